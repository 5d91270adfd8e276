"""Subjects that write well-formed but forged answers into attnspec's pipe, one per TARGET name.

In the worker, `sys.argv[2]` is the descriptor of the worker's end of the socket; a frame is an
8-byte little-endian length, then a message in attnspec's wire format. The runner numbers its
requests; these read the number off the request in the worker's stack (a subject can read its
own process's memory), so their forgeries pass the wire and reach the answer checks.
`:string_out` answers a one-step request with a string where the output belongs;
`:wrong_shape` answers a grad request "ok" with an input gradient of shape (1, 2, 3) (once
a pass of grad_causality: its slices of it were all zero);
`:not_a_dict` answers with a list; `:bad_kind` with kind "maybe".
"""

import os
import struct
import sys
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch
from _base import build_before, export_weights
from torch import Tensor

from attnspec.runner.wire import encode


def _seq() -> dict[str, Any]:
    """The number of the request being answered, found in the worker's frames."""
    frame = sys._getframe()
    while frame is not None:
        request = frame.f_locals.get("request")
        if isinstance(request, dict) and "seq" in request:
            return {"seq": request["seq"]}
        frame = frame.f_back  # type: ignore[assignment]
    return {}


def _send(message: Any) -> None:
    if sys.argv[0] != "-c":  # not in attnspec's worker: nobody to lie to
        return
    if isinstance(message, dict):
        message = {**message, **_seq()}
    data = encode(message)
    os.write(int(sys.argv[2]), struct.pack("<Q", len(data)) + data)


def _forging(message: Callable[[Tensor], Any]) -> SimpleNamespace:
    def before(x: Tensor) -> None:
        _send(message(x))

    return SimpleNamespace(build=build_before(before), export_weights=export_weights)


string_out = _forging(lambda x: {"kind": "ok", "results": [{"out": "forged", "device": "cpu"}]})
wrong_shape = _forging(lambda x: {"kind": "ok", "results": [
    {"out": torch.zeros_like(x), "device": "cpu", "grad_x": torch.zeros(1, 2, 3, dtype=x.dtype),
     "params": {}}]})
not_a_dict = _forging(lambda x: ["kind", "ok"])
bad_kind = _forging(lambda x: {"kind": "maybe", "results": []})
