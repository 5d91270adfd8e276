"""Kills its runner (the worker's parent) with SIGKILL as soon as it is built: run alone it
ends the verify; among many targets it ends its judge, which the driver runs once more and then
reports as dying on each of its tries, with what it finished, while the other targets go on."""

import os
import signal

from attnspec.subjects.reference import build as reference_build
from attnspec.subjects.reference import export_weights

__all__ = ["build", "export_weights"]


def build(n_embd: int, n_head: int) -> object:
    os.kill(os.getppid(), signal.SIGKILL)
    return reference_build(n_embd, n_head)
