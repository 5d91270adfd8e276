"""The reference sharded over positions with torch's ring attention (protocol v2,
`shard_positions`): causal, with RoPE at global positions and GQA, no window, soft cap or ALiBi.

Each rank holds T / W positions in the head-tail layout (`attnspec.shard_positions_of`) and
replicated projections; keys and values travel round the ring in torch's private
`_templated_ring_attention` (load-balanced, CPU flash kernel), whose backward
`_templated_ring_attention_backward` an autograd.Function calls. Unsharded, the same module runs
`scaled_dot_product_attention`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..reference.module import merge_heads
from ..reference.sharding import check_shardable, shard_positions_of
from ..reference.spec import AttentionSpec, RoPE
from ..reference.variants import SpecAttention, heads_of, repeat_kv, turn

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup
    from torch.distributed.device_mesh import DeviceMesh

PROTOCOL = "2.1"  # VARIANTS "any" as revision 2.1 draws it (scaled RoPE, given ALiBi slopes)
# ALiBi, windows and soft caps need a mask or score hook per block, which the ring has not.
VARIANTS: dict[str, Any] = {
    "n_kv_head": "any", "head_dim": "any", "scale": "any", "bias": "any",
    "positions": [None, RoPE(), RoPE(interleaved=True), RoPE(fraction=0.5),
                  RoPE(theta=500000.0, fraction=0.25, interleaved=True)]}
WORLD_SIZES = (2, 4)
CP_LAYOUT = "head_tail"

_aten = torch.ops.aten


def supports(spec: AttentionSpec) -> bool:
    return (spec.window is None and spec.softcap is None
            and (spec.positions is None or isinstance(spec.positions, RoPE)))


def _ring_api() -> ModuleType:
    """torch's private ring attention module, or a RuntimeError naming this torch."""
    where = "torch.distributed.tensor.experimental._context_parallel._attention"
    try:
        from torch.distributed.tensor.experimental._context_parallel import _attention
    except ImportError as error:
        raise RuntimeError(f"reference_ring needs torch's private ring attention ({where}), "
                           f"which torch {torch.__version__} lacks: {error}") from None
    missing = [name for name in ("_templated_ring_attention", "_templated_ring_attention_backward",
                                 "_cp_options") if not hasattr(_attention, name)]
    if missing:
        raise RuntimeError(f"reference_ring needs {', '.join(missing)} from {where}, which torch "
                           f"{torch.__version__} lacks.")
    return _attention


def rotate_at(t: Tensor, rope: RoPE, positions: Tensor) -> Tensor:
    """RoPE on t (B, N, T, D) at the given global positions (T,), as `_variants.rotate`."""
    rot = rope.rotary_dim(t.size(-1))
    exact = torch.float64 if t.dtype == torch.float64 else torch.float32
    freq = rope.theta ** (-torch.arange(0, rot, 2, dtype=exact, device=t.device) / rot)
    return turn(t, rope, positions.to(exact)[:, None] * freq)


class _Ring(torch.autograd.Function):
    """Ring attention with its backward: q, k, v (B, H, T_local, D), k and v already repeated."""

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor, module: RingAttention) -> Tensor:
        out, lse = module.ring_forward(q, k, v)
        ctx.module = module
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx: Any, dout: Tensor) -> tuple[Tensor, Tensor, Tensor, None]:
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = ctx.module.ring_backward(dout, q, k, v, out, lse)
        return dq, dk, dv, None


class RingAttention(SpecAttention):
    """`SpecAttention`'s parameters (same seed, same weights); after `shard_positions` each
    rank's forward takes and returns only its own positions."""

    def __init__(self, spec: AttentionSpec) -> None:
        super().__init__(spec)
        self.group: ProcessGroup | None = None  # set by shard_positions, with what follows
        self.rank, self.world, self.layout = 0, 1, "contiguous"  # unsharded: all T, in order

    def forward(self, x: Tensor) -> Tensor:
        spec = self.spec
        H, G, D = spec.n_head, spec.G, spec.D
        q, k, v = heads_of(self.q(x), H, D), heads_of(self.k(x), G, D), heads_of(self.v(x), G, D)
        if isinstance(spec.positions, RoPE):
            held = shard_positions_of(x.size(1) * self.world, self.rank, self.world, self.layout)
            positions = torch.tensor(held, device=x.device)
            q, k = rotate_at(q, spec.positions, positions), rotate_at(k, spec.positions, positions)
        k, v = repeat_kv(k, H), repeat_kv(v, H)
        if self.group is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=spec.attn_scale)
        else:
            y = _Ring.apply(q, k, v, self)  # type: ignore[no-untyped-call]
        out: Tensor = self.o(merge_heads(y))
        return out

    def load_balanced(self) -> bool:
        """Whether the ring treats the blocks as head-tail (as the layout says) or contiguous."""
        return self.layout == "head_tail"

    def configured_ring(self, dtype: torch.dtype) -> ModuleType:
        ring = _ring_api()
        # _cp_options is global to the process: set at every call, never inherited.
        ring._cp_options.enable_load_balance = self.load_balanced()
        # float32 merging would cap float64 at float32's accuracy.
        ring._cp_options.convert_to_f32 = dtype != torch.float64
        return ring

    def ring_forward(self, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        ring = self.configured_ring(q.dtype)
        out, lse = ring._templated_ring_attention(
            self.group, 2, _aten._scaled_dot_product_flash_attention_for_cpu, q, k, v,
            is_causal=True, scale=self.spec.attn_scale)[:2]
        return out, lse

    def backward_op(self, k: Tensor, v: Tensor) -> Callable[..., tuple[Tensor, ...]]:
        """The per-block backward kernel (k, v: this rank's own blocks, for overriding)."""
        op: Callable[..., tuple[Tensor, ...]] = \
            _aten._scaled_dot_product_flash_attention_for_cpu_backward
        return op

    def ring_backward(self, dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                      lse: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        ring = self.configured_ring(q.dtype)
        dq, dk, dv = ring._templated_ring_attention_backward(
            self.group, 2, self.backward_op(k, v), dout, "grad_out", q, k, v, out, lse,
            is_causal=True, dropout_p=0.0, scale=self.spec.attn_scale)[:3]
        return dq, dk, dv


def build(spec: AttentionSpec) -> nn.Module:
    return RingAttention(spec)


def export_weights(module: nn.Module) -> Mapping[str, Tensor]:
    assert isinstance(module, RingAttention)
    return module.export_weights()


def shard_positions(module: nn.Module, mesh: DeviceMesh) -> nn.Module:
    """Make `module` a ring rank in place: it then takes x[:, shard_positions_of(T, rank, W)]
    (B, T / W, C) and returns those positions' outputs."""
    assert isinstance(module, RingAttention)
    check_shardable(module.spec, mesh.size(), "positions")
    _ring_api()
    module.group, module.rank = mesh.get_group(), mesh.get_local_rank()
    module.world, module.layout = mesh.size(), CP_LAYOUT
    return module
