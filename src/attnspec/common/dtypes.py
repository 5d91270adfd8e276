"""The dtype table: the dtypes attnspec draws and checks, by name, and what the wire carries."""

from __future__ import annotations

import torch

__all__ = ["DTYPE_NAMES", "WIRE_DTYPES", "declared_dtype_names", "default_dtypes",
           "dtype_from_name", "dtype_name"]

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


def declared_dtype_names(declared: object) -> tuple[str, ...]:
    """A subject's DTYPES as names: each a torch dtype or its name ("float64", as --dtype takes
    it, or "torch.float64"); a TypeError says which entry is neither."""
    if isinstance(declared, str | torch.dtype):  # a name is a sequence of letters: not that
        raise TypeError(f"{declared!r} is one dtype, not a sequence: write ({declared!r},)")
    try:
        entries = list(declared)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(f"{declared!r} is not a sequence") from None
    names = []
    for entry in entries:
        if isinstance(entry, torch.dtype):
            names.append(dtype_name(entry))
        elif isinstance(entry, str) and entry.strip():
            names.append(entry.strip().removeprefix("torch."))
        else:
            raise TypeError(f"{entry!r} is neither a torch dtype nor a dtype's name")
    return tuple(names)


def default_dtypes(device: str) -> tuple[str, ...]:
    """docs/design.md's default: float32, float64, bfloat16, and float16 on CUDA."""
    base = ("float32", "float64", "bfloat16")
    return (*base, "float16") if device == "cuda" else base


WIRE_DTYPES = {**DTYPE_NAMES, "bool": torch.bool, "int64": torch.int64, "int32": torch.int32,
               "uint8": torch.uint8}
"""What the wire carries: the drawn dtypes, masks and indices."""
