"""The worker pipe's format: a JSON header and raw tensor bytes, never pickle.

The runner reads what the worker sends, and the worker runs the subject's code, so what comes
back is data only: a message is a JSON value in which `{"__tensor__": i}` stands for the i-th
tensor, followed by each tensor's raw bytes. Reading one cannot execute code.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import torch

__all__ = ["WireError", "decode", "encode"]

_DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
           "float16": torch.float16, "bool": torch.bool, "int64": torch.int64,
           "int32": torch.int32, "uint8": torch.uint8}
_NAMES = {dtype: name for name, dtype in _DTYPES.items()}
_HEAD = struct.Struct("<Q")  # length of the JSON header


class WireError(Exception):
    """A message that is not in the wire format (a worker that wrote garbage to the pipe)."""


def encode(value: Any) -> bytes:
    """JSON with tensors replaced by references, then their bytes (contiguous, on the CPU)."""
    tensors: list[torch.Tensor] = []

    def strip(item: Any) -> Any:
        if isinstance(item, torch.Tensor):
            tensors.append(item)
            return {"__tensor__": len(tensors) - 1}
        if isinstance(item, dict):
            return {str(k): strip(v) for k, v in item.items()}
        if isinstance(item, list | tuple):
            return [strip(v) for v in item]
        return item

    body = strip(value)
    blobs, meta = [], []
    for tensor in tensors:
        t = tensor.detach().to("cpu")
        if t.dtype not in _NAMES:
            raise WireError(f"cannot send a {t.dtype} tensor; attnspec sends "
                            f"{', '.join(_DTYPES)}.")
        # A fresh 1-D copy has stride 1 whatever t's strides were (size-1 axes keep odd ones).
        flat = torch.empty(t.numel(), dtype=t.dtype).copy_(t.reshape(-1))
        raw = flat.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        meta.append({"dtype": _NAMES[t.dtype], "shape": list(t.shape), "nbytes": len(raw)})
        blobs.append(raw)
    header = json.dumps({"body": body, "tensors": meta}, allow_nan=True).encode()
    return b"".join([_HEAD.pack(len(header)), header, *blobs])


def decode(data: bytes) -> Any:
    """The value `encode` wrote, with fresh CPU tensors; WireError if the bytes are not one."""
    try:
        (length,) = _HEAD.unpack_from(data, 0)
        header = json.loads(data[_HEAD.size:_HEAD.size + length])
        meta, body = header["tensors"], header["body"]
        tensors, offset = [], _HEAD.size + length
        for entry in meta:
            dtype = _DTYPES[entry["dtype"]]
            shape = [int(s) for s in entry["shape"]]
            nbytes = int(entry["nbytes"])
            numel = 1
            for s in shape:
                numel *= s
            if nbytes != numel * dtype.itemsize or offset + nbytes > len(data):
                raise WireError("tensor size does not match its header")
            raw = bytearray(data[offset:offset + nbytes])
            offset += nbytes
            flat = (torch.frombuffer(raw, dtype=torch.uint8) if nbytes
                    else torch.empty(0, dtype=torch.uint8))
            tensors.append(flat.view(dtype).reshape(shape))
    except WireError:
        raise
    except (ValueError, KeyError, TypeError, IndexError, struct.error, RecursionError) as error:
        raise WireError(f"not an attnspec message ({type(error).__name__}: {error})") from None

    def fill(item: Any) -> Any:
        if isinstance(item, dict):
            if set(item) == {"__tensor__"}:
                return tensors[int(item["__tensor__"])]
            return {k: fill(v) for k, v in item.items()}
        if isinstance(item, list):
            return [fill(v) for v in item]
        return item

    try:
        return fill(body)
    except (IndexError, ValueError, TypeError, RecursionError) as error:
        raise WireError(f"not an attnspec message ({type(error).__name__})") from None
