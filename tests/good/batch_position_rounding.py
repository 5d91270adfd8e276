"""Correct, but rounds like MKL on AVX-512: a row's last bit depends on where it sits.

MKL multiplies rows in blocks; rows in the last, partial block go through another micro-kernel
and round differently (nn.Linear on 6 identical rows: rows 4 and 5 differ by 1 ulp). This double
is the reference with the rows of the flattened (B*T, C) output that fall in the partial tail
of 4-row blocks moved one unit in the last place. A row's values still depend on its own
content alone, so this is correct attention; a check that compares rows at different batch
offsets, or from calls of different shapes, exactly, calls it leaky on every CPU. Every property
must pass it.

It also rounds like MKL on AMD EPYC: an input that does not start at a 64-byte boundary gives
every output one ulp more (nn.Linear on the same values 8 bytes off gives other bits there), so
a harness that hands identical calls differently aligned inputs calls it nondeterministic.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnspec.subjects.reference import build as reference_build
from attnspec.subjects.reference import export_weights as reference_export

EXPECTED: frozenset[str] = frozenset()
_BITS = {torch.float64: torch.int64, torch.float32: torch.int32, torch.bfloat16: torch.int16,
         torch.float16: torch.int16}


def nudge_by_position(out: Tensor) -> Tensor:
    """Move the rows after the last whole block of 4 (of B*T rows) one ulp away from zero."""
    B, T, C = out.shape
    flat = out.detach().reshape(B * T, C).clone()
    rows = torch.arange(B * T, device=out.device) >= (B * T) // 4 * 4
    bits = flat[rows].view(_BITS[out.dtype])
    flat[rows] = (bits + 1).view(out.dtype)
    # The nudge is rounding, not math: gradients flow as if it were not there.
    return out + (flat.reshape(B, T, C) - out.detach())


def nudge_if_unaligned(out: Tensor, x: Tensor) -> Tensor:
    """One ulp more everywhere when `x` does not start at a 64-byte boundary."""
    if x.data_ptr() % 64 == 0:
        return out
    bits = out.detach().contiguous().view(_BITS[out.dtype])
    return out + ((bits + 1).view(out.dtype) - out.detach())


class PositionRounding(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.inner = reference_build(n_embd, n_head)

    def forward(self, x: Tensor) -> Tensor:
        return nudge_if_unaligned(nudge_by_position(self.inner(x)), x)


def build(n_embd: int, n_head: int) -> PositionRounding:
    return PositionRounding(n_embd, n_head)


def export_weights(module: nn.Module) -> dict[str, Tensor]:
    assert isinstance(module, PositionRounding)
    return dict(reference_export(module.inner))
