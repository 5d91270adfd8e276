"""What the kernel subjects (PROTOCOL = "kernel") share: loading an optional library with a
three-part message when it (or the GPU it needs) is absent, and checking the tensors a kernel
is called with, so that a bad call says what, with which values and why."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import torch
from torch import Tensor

STANDIN_FLAG = "ATTNSPEC_STANDIN"
"""A module attribute that marks a plain-torch stand-in of a library (tests/kernels/standins):
it runs on CPU, so the adapter does not ask for a GPU."""


class KernelUnavailable(ImportError):
    """A kernel adapter whose library or device is absent: raised at import, so attnspec's TARGET
    loader reports it in one line and the engine can skip the subject cleanly."""

    def __init__(self, subject: str, needs: str, found: str, fix: str) -> None:
        super().__init__(f"loading the kernel subject {subject}: it needs {needs}, but {found}; "
                         f"{fix}")
        self.subject, self.needs, self.found, self.fix = subject, needs, found, fix


def require(module: str, *, subject: str, library: str, install: str,
            needs_cuda: bool) -> ModuleType:
    """Import `module` for `subject`; KernelUnavailable names the library, what was found
    (the import error, or no CUDA device) and how to get it."""
    try:
        lib = importlib.import_module(module)
    except ImportError as error:
        raise KernelUnavailable(subject, f"{library} (the Python module {module!r})",
                                f"importing it failed ({type(error).__name__}: {error})",
                                f"install it ({install}) or choose another subject.") from None
    if needs_cuda and not getattr(lib, STANDIN_FLAG, False) and not torch.cuda.is_available():
        raise KernelUnavailable(subject, f"{library} on a CUDA GPU",
                                f"{module} is installed and torch {torch.__version__} sees no "
                                "CUDA device (torch.cuda.is_available() is False)",
                                "run on a machine with an NVIDIA GPU and a CUDA build of torch.")
    return lib


def check_qkv(subject: str, layout: str, q: Tensor, k: Tensor, v: Tensor,
              ) -> tuple[int, int, int, int, int, int]:
    """(B, H, G, Tq, Tk, D) of a "bhsd" or "bshd" call; a ValueError says which tensor breaks
    the layout and why."""
    axes = {"bhsd": "(B, H, Tq, D) and k, v (B, G, Tk, D)",
            "bshd": "(B, Tq, H, D) and k, v (B, Tk, G, D)"}[layout]
    shapes = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
    where = f"{subject}.attention({shapes}; LAYOUT {layout!r})"
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"{where}: every tensor must be 4-D, as the layout is q {axes}.")
    if layout == "bhsd":
        (B, H, Tq, D), (Bk, G, Tk, Dk), (Bv, Gv, Tv, _) = q.shape, k.shape, v.shape
    else:
        (B, Tq, H, D), (Bk, Tk, G, Dk), (Bv, Tv, Gv, _) = q.shape, k.shape, v.shape
    if (Bk, Bv) != (B, B) or (Gv, Tv) != (G, Tk) or Dk != D:
        raise ValueError(f"{where}: the shapes disagree; the layout is q {axes}, with v's "
                         "head dim free.")
    if G == 0 or H % G:
        raise ValueError(f"{where}: H={H} query heads is not a positive multiple of G={G} kv "
                         "heads, so query head h cannot read kv head h // (H / G).")
    if not (q.dtype == k.dtype == v.dtype) or not (q.device == k.device == v.device):
        raise ValueError(f"{where}: dtypes {q.dtype}, {k.dtype}, {v.dtype} on {q.device}, "
                         f"{k.device}, {v.device}; all three must share dtype and device.")
    return B, H, G, Tq, Tk, D


def window_pair(subject: str, window: Any, causal: bool) -> tuple[int, int]:
    """(left, right) of a "pair" window with -1 for unbounded (a causal kernel's right is 0, as
    the causal mask already bounds it); a ValueError for anything else."""
    if window is None:
        return -1, 0 if causal else -1
    if (not isinstance(window, (tuple, list)) or len(window) != 2
            or not all(isinstance(w, int) and not isinstance(w, bool) and w >= -1
                       for w in window)):
        raise ValueError(f"{subject}.attention(window={window!r}): WINDOW is 'pair', so the "
                         "window must be (left, right), two ints >= -1 with -1 unbounded.")
    left, right = int(window[0]), int(window[1])
    return left, 0 if causal else right


def per_head(subject: str, name: str, value: Tensor, H: int) -> Tensor:
    """An (H,) float tensor of `name` (alibi_slopes, sinks), checked."""
    if not isinstance(value, Tensor) or value.shape != (H,) or not value.is_floating_point():
        shape = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
        raise ValueError(f"{subject}.attention({name}={shape}): {name} must be a float tensor "
                         f"of shape (H,) = ({H},), one value per query head.")
    return value
