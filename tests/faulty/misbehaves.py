"""Forwards that misbehave in ways a plain `except Exception` misses, one per TARGET name.

`misbehaves.py:exits` calls sys.exit(3) for T > 8; `:interrupts` raises KeyboardInterrupt;
`:unprintable` raises an exception whose str() itself raises; `:floods` raises with a
two-million-character message; `:exports_none` has export_weights return None.
"""

import sys
from types import SimpleNamespace

from _base import build_before, export_weights, reference_build
from torch import Tensor, nn


class Unprintable(RuntimeError):
    def __str__(self) -> str:
        raise ValueError("no text for you")


def _fault(name: str) -> None:
    if name == "exits":
        sys.exit(3)
    if name == "interrupts":
        raise KeyboardInterrupt
    if name == "unprintable":
        raise Unprintable()
    raise ValueError("x" * 2_000_000)


def _subject(fault: str) -> SimpleNamespace:
    def before(x: Tensor) -> None:
        if x.size(1) > 8:
            _fault(fault)

    return SimpleNamespace(build=build_before(before), export_weights=export_weights)


def _none(module: nn.Module) -> None:
    return None


exits, interrupts, unprintable, floods = (
    _subject(f) for f in ("exits", "interrupts", "unprintable", "floods"))
exports_none = SimpleNamespace(build=reference_build, export_weights=_none)
