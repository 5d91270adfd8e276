"""The dtype table: the dtypes attnspec draws and checks, by name, and what the wire carries."""

from __future__ import annotations

import torch

__all__ = ["DTYPE_NAMES", "WIRE_DTYPES", "default_dtypes", "dtype_from_name", "dtype_name"]

DTYPE_NAMES = {"float32": torch.float32, "float64": torch.float64,
               "bfloat16": torch.bfloat16, "float16": torch.float16}
"""The dtypes attnspec draws and checks, by name: the one list every front end offers."""


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def dtype_from_name(name: str) -> torch.dtype:
    try:
        return DTYPE_NAMES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; choose from {', '.join(DTYPE_NAMES)}") from None


def default_dtypes(device: str) -> tuple[str, ...]:
    """docs/design.md's default: float32, float64, bfloat16, and float16 on CUDA."""
    base = ("float32", "float64", "bfloat16")
    return (*base, "float16") if device == "cuda" else base


WIRE_DTYPES = {**DTYPE_NAMES, "bool": torch.bool, "int64": torch.int64, "int32": torch.int32,
               "uint8": torch.uint8}
"""What the wire carries: the drawn dtypes, masks and indices."""
