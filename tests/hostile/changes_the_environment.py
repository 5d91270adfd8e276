"""A correct subject that rewrites os.environ at import with the judge's own settings (exec'd
workers, Hypothesis' profile and seed, the catalogue's share, the worker's timeout): the
runner must not follow them; its report keeps the seed and profile it was given."""

import os

from _hostile import around, export_weights

__all__ = ["build", "export_weights"]
HOSTILE = {"args": ["--only", "width,causality", "--max-examples", "5", "--workers", "1"],
           "exit": 0, "status": "pass", "verdicts": {"width": "pass", "causality": "pass"},
           "header": {"seed": 0, "profile": "default"}}

os.environ.update({"ATTNSPEC_EXEC_WORKERS": "1", "HYPOTHESIS_PROFILE": "ci",
                   "ATTNSPEC_CATALOGUE": "full", "ATTNSPEC_SEED": "7",
                   "ATTNSPEC_TIMEOUT": "0.001", "PYTHONHASHSEED": "1"})
build = around(lambda x: None)
