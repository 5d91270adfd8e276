"""A correct attention of trained size: the independent hooks double (independent_hooks_v2.py)
with its q and k projections multiplied by a factor (ATTNSPEC_TRAINED_FACTOR at build, 4 by
default), so that logits q.k/sqrt(D) have a std of about 0.3 x factor^2 (5 at x4, 20 at x8)
instead of attnspec's 0.3, and outputs rounded by batch position and by the input's alignment
(batch_position_rounding.py).
With q/k norms (Qwen3, Gemma-3) the projections' size is normalised away: the norms' weights
are multiplied by sqrt(factor) instead (logits of std about 2 and 3 times larger).
Trained models look like this: peaked softmax rows, rounding errors several times those of small
random weights. Every property must pass it, in every dtype."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "broken"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _spec_common import (  # noqa: E402
    CORNER,
    PROTOCOL,
    SpecAttn,
    export_weights,  # noqa: E402
)
from _spec_common import cross as _cross  # noqa: E402
from _spec_common import decode as _decode  # noqa: E402
from _spec_common import decode_padded as _decode_padded  # noqa: E402
from _spec_common import padded as _padded  # noqa: E402
from _spec_common import shifted as _shifted  # noqa: E402
from batch_position_rounding import nudge_by_position, nudge_if_unaligned  # noqa: E402

EXPECTED: frozenset[str] = frozenset()
VARIANTS = {name: "any" for name in ("n_kv_head", "head_dim", "window", "scale", "softcap",
                                     "positions", "bias", "qk_norm", "sinks")}


class TrainedScale(SpecAttn):
    def forward(self, x: Tensor) -> Tensor:
        return nudge_if_unaligned(nudge_by_position(super().forward(x)), x)


def build(spec: object) -> TrainedScale:
    module = TrainedScale(spec)  # type: ignore[arg-type]
    factor = float(os.environ.get("ATTNSPEC_TRAINED_FACTOR", "4"))
    with torch.no_grad():  # trained q and k: larger than nn.Linear's initialisation
        for linear in (module.q, module.k):
            linear.weight.mul_(factor)
            if linear.bias is not None:
                linear.bias.mul_(factor)
        for name in ("q_norm_weight", "k_norm_weight", "q_norm_bias", "k_norm_bias"):
            if hasattr(module, name):  # RMS-normed q and k (Qwen3, Gemma-3): larger norm weights
                getattr(module, name).mul_(factor ** 0.5)
    return module


def decode(module: nn.Module, x: Tensor, cache: object, offset: int) -> tuple[Tensor, object]:
    out, cache = _decode(module, x, cache, offset)
    return nudge_by_position(out), cache


def decode_padded(module: nn.Module, x: Tensor, key_mask: Tensor, cache: object, offset: int,
                  ) -> tuple[Tensor, object]:
    out, cache = _decode_padded(module, x, key_mask, cache, offset)
    return nudge_by_position(out), cache


def padded(module: nn.Module, x: Tensor, key_mask: Tensor) -> Tensor:
    return nudge_by_position(_padded(module, x, key_mask))


def shifted(module: nn.Module, x: Tensor, offset: int) -> Tensor:
    return nudge_by_position(_shifted(module, x, offset))


def cross(module: nn.Module, x_q: Tensor, x_kv: Tensor) -> Tensor:
    return nudge_by_position(_cross(module, x_q, x_kv))


__all__ = ["CORNER", "EXPECTED", "PROTOCOL", "VARIANTS", "build", "cross", "decode",
           "decode_padded", "export_weights", "padded", "shifted"]
