"""The reference for every attention spec (protocol v2): GQA/MQA, head sizes of their own,
sliding windows, scales, soft caps, RoPE and ALiBi. It must pass everything."""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor, nn

from .._spec import AttentionSpec
from .._variants import SpecAttention

PROTOCOL = 2
VARIANTS = {name: "any" for name in ("n_kv_head", "head_dim", "window", "scale", "softcap",
                                     "positions", "bias")}


def build(spec: AttentionSpec) -> nn.Module:
    return SpecAttention(spec)


def export_weights(module: nn.Module) -> Mapping[str, Tensor]:
    assert isinstance(module, SpecAttention)
    return module.export_weights()
