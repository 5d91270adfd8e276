"""A correct subject that, at import, forks a child which leaves its session and sleeps with
every descriptor it inherited, the worker's socket among them: the run must end with its
verdict, and the child must not outlive it (the runner is a subreaper)."""

import os
import time

from _hostile import around, export_weights

__all__ = ["build", "export_weights"]
HOSTILE = {"args": ["--only", "width", "--max-examples", "5", "--workers", "1"],
           "exit": 0, "status": "pass", "verdicts": {"width": "pass"}}

if os.fork() == 0:
    os.setsid()
    time.sleep(600)
    os._exit(0)
build = around(lambda x: None)
