"""The reference sharded over heads with DTensor tensor parallelism (protocol v2, `shard_heads`).

q, k and v are `ColwiseParallel` (rank r holds query heads [rH/W, (r+1)H/W) and the key/value
heads [rG/W, (r+1)G/W) they read), o is `RowwiseParallel` (its partial sums all-reduced). The
forward reads its local head counts off the projections' widths, so one forward serves the
unsharded module and every rank; ALiBi keeps the global heads' slopes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from ..reference.core import attend, softmax_keys
from ..reference.module import merge_heads
from ..reference.sharding import check_shardable
from ..reference.spec import ALiBi, AttentionSpec, RoPE
from ..reference.variants import SpecAttention, heads_of, repeat_kv, rotate, spec_scores

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

PROTOCOL = "2.1"  # VARIANTS "any" as revision 2.1 draws it (scaled RoPE, given ALiBi slopes)
VARIANTS = {name: "any" for name in ("n_kv_head", "head_dim", "window", "scale", "softcap",
                                     "positions", "bias")}
WORLD_SIZES = (2, 4)


def local_attention(q: Tensor, k: Tensor, v: Tensor, spec: AttentionSpec, head_offset: int,
                    ) -> Tensor:
    """Attention of the heads in projections q (B, T, H·D) and k, v (B, T, G·D), whatever H and
    G this rank holds: (B, T, H·D). `head_offset` is the first query head's global index."""
    D = spec.D
    H, G = q.size(-1) // D, k.size(-1) // D
    q, k, v = heads_of(q, H, D), heads_of(k, G, D), heads_of(v, G, D)
    if isinstance(spec.positions, RoPE):
        q, k = rotate(q, spec.positions, 0), rotate(k, spec.positions, 0)
    k, v = repeat_kv(k, H), repeat_kv(v, H)
    # ALiBi goes on below, with the global heads' slopes; -inf (masked) minus a slope stays -inf.
    scores = spec_scores(q, k, replace(spec, positions=None))
    if isinstance(spec.positions, ALiBi):
        slopes = torch.tensor(spec.positions.slopes_for(spec.n_head)[head_offset:head_offset + H],
                              dtype=scores.dtype, device=q.device)
        i = torch.arange(q.size(-2), device=q.device)
        scores = scores - slopes[:, None, None] * (i[:, None] - i[None, :]).to(scores.dtype)
    return merge_heads(attend(softmax_keys(scores, None), v))


class HeadShardedAttention(SpecAttention):
    """`SpecAttention`'s parameters (same names, same creation order, so the same seed builds
    the same weights) with a forward that runs on whichever heads the projections hold."""

    def __init__(self, spec: AttentionSpec) -> None:
        super().__init__(spec)
        self.rank = 0  # set by shard_heads: which block of heads this rank's projections hold

    def forward(self, x: Tensor) -> Tensor:
        q = self.q(x)
        head_offset = self.rank * (q.size(-1) // self.spec.D)
        out: Tensor = self.o(local_attention(q, self.k(x), self.v(x), self.spec, head_offset))
        return out


def build(spec: AttentionSpec) -> nn.Module:
    return HeadShardedAttention(spec)


def export_weights(module: nn.Module) -> Mapping[str, Tensor]:
    assert isinstance(module, HeadShardedAttention)
    return module.export_weights()


def shard_heads(module: nn.Module, mesh: DeviceMesh) -> nn.Module:
    """Shard `module` over the 1-D `mesh` in place: each rank keeps its heads' q, k, v rows and
    o columns. Called with the full x on every rank, it returns the full output."""
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    assert isinstance(module, HeadShardedAttention)
    check_shardable(module.spec, mesh.size(), "heads")
    module.rank = mesh.get_local_rank()
    return parallelize_module(module, mesh, {"q": ColwiseParallel(), "k": ColwiseParallel(),
                                             "v": ColwiseParallel(), "o": RowwiseParallel()})
