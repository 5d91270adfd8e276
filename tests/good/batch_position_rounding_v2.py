"""The position-rounding double (batch_position_rounding.py) for protocol v2: the reference for
any spec, with the rows in the partial tail of 4-row blocks moved one ulp. Every property that
applies to a spec (window among them) must pass it."""

from __future__ import annotations

from batch_position_rounding import nudge_by_position, nudge_if_unaligned
from torch import Tensor, nn

from attnspec import AttentionSpec, SpecAttention

EXPECTED: frozenset[str] = frozenset()
PROTOCOL = "2.1"  # VARIANTS "any" as revision 2.1 draws it (scaled RoPE, given ALiBi slopes)
VARIANTS = {name: "any" for name in ("n_kv_head", "head_dim", "window", "scale", "softcap",
                                     "positions", "bias")}


class PositionRoundingV2(nn.Module):
    def __init__(self, spec: AttentionSpec) -> None:
        super().__init__()
        self.inner = SpecAttention(spec)

    def forward(self, x: Tensor) -> Tensor:
        return nudge_if_unaligned(nudge_by_position(self.inner(x)), x)


def build(spec: AttentionSpec) -> PositionRoundingV2:
    return PositionRoundingV2(spec)


def export_weights(module: nn.Module) -> dict[str, Tensor]:
    assert isinstance(module, PositionRoundingV2)
    return module.inner.export_weights()


# The inference hooks, rounded the same way: their exact comparisons must hold under it too.
CORNER = "bottom_right"


def decode(module: nn.Module, x: Tensor, cache: object, offset: int) -> tuple[Tensor, object]:
    assert isinstance(module, PositionRoundingV2)
    out, cache = module.inner.decode(x, cache, offset)  # type: ignore[arg-type]
    return nudge_by_position(out), cache


def padded(module: nn.Module, x: Tensor, key_mask: Tensor) -> Tensor:
    assert isinstance(module, PositionRoundingV2)
    return nudge_by_position(module.inner.padded(x, key_mask))


def decode_padded(module: nn.Module, x: Tensor, key_mask: Tensor, cache: object, offset: int,
                  ) -> tuple[Tensor, object]:
    assert isinstance(module, PositionRoundingV2)
    out, cache = module.inner.decode_padded(x, key_mask, cache, offset)  # type: ignore[arg-type]
    return nudge_by_position(out), cache


def shifted(module: nn.Module, x: Tensor, offset: int) -> Tensor:
    assert isinstance(module, PositionRoundingV2)
    return nudge_by_position(module.inner.shifted(x, offset))


def cross(module: nn.Module, x_q: Tensor, x_kv: Tensor) -> Tensor:
    assert isinstance(module, PositionRoundingV2)
    return nudge_by_position(module.inner.cross(x_q, x_kv, CORNER))
