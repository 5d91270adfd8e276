"""The implementations the benchmarks time, built the same way everywhere (seeded, eval mode).

Importing this module imports attnspec, which reads ATTNSPEC_TYPECHECK at import.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnspec import CausalSelfAttention
from attnspec.reference import module as reference_module
from attnspec.subjects import sdpa as sdpa_subject
from attnspec.subjects import torch_mha as mha_subject

IMPLS = ("explicit", "fastpath", "sdpa", "mha")
"""explicit: the reference (kernel="explicit"); fastpath: kernel="sdpa"; sdpa: fused QKV +
F.scaled_dot_product_attention (attnspec.subjects.sdpa); mha: nn.MultiheadAttention with a
causal mask (attnspec.subjects.torch_mha)."""

LABELS = {
    "explicit": "reference, explicit",
    "fastpath": 'reference, kernel="sdpa"',
    "sdpa": "bare SDPA module",
    "mha": "nn.MultiheadAttention",
}


def _internals_missing() -> str | None:
    """The reference internals section 1 relies on; None when all are there."""
    need = ("_PLAIN", "_CHECKED", "TYPECHECK")
    missing = [n for n in need if not hasattr(reference_module, n)]
    if not hasattr(CausalSelfAttention, "_pipeline"):
        missing.append("CausalSelfAttention._pipeline")
    if missing:
        return ("attnspec.reference.module no longer has " + ", ".join(missing)
                + "; update benchmarks/bench_impls.py to the new forward.")
    return None


class Bare(CausalSelfAttention):
    """The reference's pipeline with no switch at all: forward as if the checks did not exist.

    The baseline for "checks off costs nothing": same module, same plain steps, no test of
    ATTNSPEC_TYPECHECK and no signature cache.
    """

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self._pipeline(x, reference_module._PLAIN,
                                     explicit=self.kernel == "explicit")
        return out


def build(name: str, n_embd: int, n_head: int, device: str) -> nn.Module:
    torch.manual_seed(0)
    module: nn.Module
    if name == "explicit":
        module = CausalSelfAttention(n_embd, n_head)
    elif name == "fastpath":
        module = CausalSelfAttention(n_embd, n_head, kernel="sdpa")
    elif name == "bare":
        module = Bare(n_embd, n_head)
    elif name == "sdpa":
        module = sdpa_subject.build(n_embd, n_head)
    elif name == "mha":
        module = mha_subject.build(n_embd, n_head)
    else:
        raise ValueError(f"unknown implementation {name!r}")
    return module.eval().to(device)


def inputs(B: int, T: int, C: int, device: str) -> Tensor:
    gen = torch.Generator().manual_seed(1)
    return torch.randn(B, T, C, generator=gen).to(device)


def is_large(B: int, T: int, C: int, H: int) -> bool:
    """Shapes timed one call per block (a forward of milliseconds) rather than many short ones."""
    return T * C > 10_000


def parse_shape(text: str) -> tuple[int, int, int, int]:
    B, T, C, H = (int(v) for v in text.split(","))
    return B, T, C, H
