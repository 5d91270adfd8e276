"""A GPT-2-style fused `c_attn` ((3C, C): q, k and v rows stacked) sharded with a plain
ColwiseParallel, as if it were one projection. Shard(0) cuts the stacked rows evenly, so at W = 2
rank 0 holds all of q and half of k and takes q's second half for its k. It runs and is silently
wrong; unsharded it is right. Seen in NVIDIA-NeMo/Automodel#1324 ("rank 0 gets all Q and some
K"); torch's answer is fused-QKV sharding (pytorch#140069, #149701).
"""

from torch import nn

from attnspec.reference.sharding import check_shardable
from attnspec.subjects.reference_tp import PROTOCOL, local_attention

EXPECTED = frozenset({"tp_equivalence"})
VARIANTS = {"positions": "any", "bias": "any"}  # MHA only: the fused rows are C, C, C


class FusedQKV(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.spec, self.rank = spec, 0
        self.c_attn = nn.Linear(spec.n_embd, 3 * spec.n_embd, bias=spec.bias)
        self.c_proj = nn.Linear(spec.n_embd, spec.n_embd, bias=spec.bias)

    def forward(self, x):
        q, k, v = self.c_attn(x).chunk(3, dim=-1)  # thirds of whatever rows this rank holds
        offset = self.rank * (q.size(-1) // self.spec.D)
        return self.c_proj(local_attention(q, k, v, self.spec, offset))


def build(spec):
    return FusedQKV(spec)


def export_weights(module):
    q, k, v = module.c_attn.weight.chunk(3)
    out = {"q_weight": q, "k_weight": k, "v_weight": v, "o_weight": module.c_proj.weight}
    if module.spec.bias:
        qb, kb, vb = module.c_attn.bias.chunk(3)
        out |= {"q_bias": qb, "k_bias": kb, "v_bias": vb, "o_bias": module.c_proj.bias}
    return out


def shard_heads(module, mesh):
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    check_shardable(module.spec, mesh.size(), "heads")
    module.rank = mesh.get_local_rank()
    # The bug: c_attn's rows are three projections, but Colwise shards them as one.
    return parallelize_module(module, mesh, {"c_attn": ColwiseParallel(),
                                             "c_proj": RowwiseParallel()})


__all__ = ["EXPECTED", "PROTOCOL", "VARIANTS", "build", "export_weights", "shard_heads"]
