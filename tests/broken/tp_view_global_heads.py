"""The head split hard-codes the global head count, `view(B, T, self.n_head, -1)`: the class of
T5Attention's bug fixed in transformers#45109 (there the -1 sat on T). Unsharded it is right;
under ColwiseParallel each rank's q, k, v hold H / W heads, so the view makes H heads D / W wide:
no error when W divides D, and silently wrong scores (each head's dot product split in W).
"""

from attnspec.reference.core import attend, softmax_keys
from attnspec.reference.module import merge_heads
from attnspec.reference.variants import spec_scores
from attnspec.subjects.reference_tp import (
    PROTOCOL,
    HeadShardedAttention,
    export_weights,
    shard_heads,
)

EXPECTED = frozenset({"tp_equivalence"})
VARIANTS = {"bias": "any"}  # plain MHA: the narrow heads are the only thing wrong


def supports(spec):
    return spec.D % 4 == 0  # W = 2 and 4 divide D: silently wrong rather than a view error


class GlobalHeadView(HeadShardedAttention):
    def forward(self, x):
        B, T, _ = x.shape
        H = self.spec.n_head
        q, k, v = (p(x).view(B, T, H, -1).transpose(1, 2) for p in (self.q, self.k, self.v))
        return self.o(merge_heads(attend(softmax_keys(spec_scores(q, k, self.spec), None), v)))


def build(spec):
    return GlobalHeadView(spec)


__all__ = ["EXPECTED", "PROTOCOL", "VARIANTS", "build", "export_weights", "shard_heads",
           "supports"]
