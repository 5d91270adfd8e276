"""A correct subject that starts a thread at import which spins on a core for the whole run:
the verdict must still come, in time, with the cost of its own hog."""

import threading

from _hostile import around, export_weights

__all__ = ["build", "export_weights"]
HOSTILE = {"args": ["--only", "width,causality", "--max-examples", "5", "--workers", "1"],
           "exit": 0, "status": "pass", "verdicts": {"width": "pass", "causality": "pass"}}


def _spin() -> None:
    n = 0
    while True:
        n += 1


threading.Thread(target=_spin, daemon=True).start()
build = around(lambda x: None)
