"""Correct sharded attention by the plainest means, independent of torch's private ring.

Tensor parallel: DTensor's ColwiseParallel on q, k, v and RowwiseParallel on o, the module
reading its local head count from q's width. Context parallel: every rank all-gathers the
positions (an autograd-aware all_gather), puts them back in global order, runs the whole
attention and keeps its own positions' rows. Both must pass tp_equivalence and cp_equivalence.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnspec import AttentionSpec
from attnspec.reference.sharding import check_shardable, shard_positions_of

PROTOCOL = "2.1"  # VARIANTS "any" as revision 2.1 draws it (scaled RoPE, given ALiBi slopes)
VARIANTS = {"n_kv_head": "any", "bias": "any", "scale": "any"}
WORLD_SIZES = (2, 4)
CP_LAYOUT = "head_tail"
EXPECTED: frozenset[str] = frozenset()


class Gathered(nn.Module):
    def __init__(self, spec: AttentionSpec) -> None:
        super().__init__()
        self.spec = spec
        C, H, G, D = spec.n_embd, spec.n_head, spec.G, spec.D
        self.q = nn.Linear(C, H * D, bias=spec.bias)
        self.k = nn.Linear(C, G * D, bias=spec.bias)
        self.v = nn.Linear(C, G * D, bias=spec.bias)
        self.o = nn.Linear(H * D, C, bias=spec.bias)
        self.group: object = None  # context parallel: the ranks' group

    def attend(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        D = self.spec.D
        q, k, v = (p(x).view(B, T, -1, D).transpose(1, 2) for p in (self.q, self.k, self.v))
        k = k.repeat_interleave(q.size(1) // k.size(1), dim=1)
        v = v.repeat_interleave(q.size(1) // v.size(1), dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.spec.attn_scale)
        return self.o(y.transpose(1, 2).reshape(B, T, -1))

    def forward(self, x: Tensor) -> Tensor:
        if self.group is None:
            return self.attend(x)
        import torch.distributed as td
        from torch.distributed._functional_collectives import all_gather_single_autograd

        world, rank = td.get_world_size(self.group), td.get_rank(self.group)
        T = x.size(1) * world
        held = torch.tensor([p for r in range(world)
                             for p in shard_positions_of(T, r, world, CP_LAYOUT)])
        pieces = all_gather_single_autograd(x.contiguous(), gather_dim=1, group=self.group)
        whole = torch.empty_like(pieces).index_copy(1, held, pieces)
        mine = torch.tensor(shard_positions_of(T, rank, world, CP_LAYOUT))
        return self.attend(whole)[:, mine]


def build(spec: AttentionSpec) -> nn.Module:
    return Gathered(spec)


def export_weights(module: Gathered) -> dict[str, Tensor]:
    out = {f"{n}_weight": getattr(module, n).weight for n in "qkvo"}
    if module.spec.bias:
        out |= {f"{n}_bias": getattr(module, n).bias for n in "qkvo"}
    return out


def shard_heads(module: Gathered, mesh: object, local_output: bool = True) -> nn.Module:
    """DTensor TP; `local_output=False` leaves the output a DTensor (the wrapped double)."""
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    check_shardable(module.spec, mesh.size(), "heads")  # type: ignore[attr-defined]
    plan = {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(),
            "o": RowwiseParallel(use_local_output=local_output)}
    return parallelize_module(module, mesh, plan)  # type: ignore[arg-type]


def shard_positions(module: Gathered, mesh: object) -> nn.Module:
    module.group = mesh.get_group()  # type: ignore[attr-defined]
    return module
