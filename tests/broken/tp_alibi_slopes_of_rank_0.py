"""Tensor-parallel ALiBi with every rank taking the slopes of heads 0 .. H/W - 1: the slopes are
sliced from the local head count, never offset by the rank's first global head (the class of
Megatron-LM's and BLOOM's TP ALiBi fixes). Unsharded, and on rank 0, it is right; rank 1's heads
get rank 0's slopes, and after the all-reduce every rank returns the same wrong output."""

from attnspec import ALiBi
from attnspec.subjects.reference_tp import (
    PROTOCOL,
    HeadShardedAttention,
    export_weights,
    local_attention,
    shard_heads,
)

EXPECTED = frozenset({"tp_equivalence"})
VARIANTS = {"positions": [ALiBi()]}


class SlopesOfRank0(HeadShardedAttention):
    def forward(self, x):
        # The bug: head_offset 0 on every rank, where rank r's first head is r·H/W.
        return self.o(local_attention(self.q(x), self.k(x), self.v(x), self.spec, 0))


def build(spec):
    return SlopesOfRank0(spec)


__all__ = ["EXPECTED", "PROTOCOL", "VARIANTS", "build", "export_weights", "shard_heads"]
