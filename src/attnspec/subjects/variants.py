"""The reference for every attention spec (protocol v2): GQA/MQA, head sizes of their own,
sliding windows, scales, soft caps, RoPE and ALiBi, q/k norms, attention sinks, and every
inference hook (a cache, key padding, queries fewer than keys, positions from an offset). It
must pass everything."""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor, nn

from ..reference.spec import AttentionSpec
from ..reference.variants import SpecAttention

PROTOCOL = "2.1"  # VARIANTS "any" as revision 2.1 draws it (scaled RoPE, given ALiBi slopes)
VARIANTS = {name: "any" for name in ("n_kv_head", "head_dim", "window", "scale", "softcap",
                                     "positions", "bias", "qk_norm", "sinks")}
CORNER = "bottom_right"
MASKED_ROWS = "zero"


def build(spec: AttentionSpec) -> nn.Module:
    return SpecAttention(spec)


def export_weights(module: nn.Module) -> Mapping[str, Tensor]:
    assert isinstance(module, SpecAttention)
    return module.export_weights()


def decode(module: nn.Module, x: Tensor, cache: object, offset: int) -> tuple[Tensor, object]:
    assert isinstance(module, SpecAttention)
    return module.decode(x, cache, offset)  # type: ignore[arg-type]


def decode_padded(module: nn.Module, x: Tensor, key_mask: Tensor, cache: object, offset: int,
                  ) -> tuple[Tensor, object]:
    assert isinstance(module, SpecAttention)
    return module.decode_padded(x, key_mask, cache, offset)  # type: ignore[arg-type]


def shifted(module: nn.Module, x: Tensor, offset: int) -> Tensor:
    assert isinstance(module, SpecAttention)
    return module.shifted(x, offset)


def padded(module: nn.Module, x: Tensor, key_mask: Tensor) -> Tensor:
    assert isinstance(module, SpecAttention)
    return module.padded(x, key_mask)


def cross(module: nn.Module, x_q: Tensor, x_kv: Tensor) -> Tensor:
    assert isinstance(module, SpecAttention)
    return module.cross(x_q, x_kv, CORNER)
