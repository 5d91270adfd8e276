"""Tried multi-query attention (one key/value head shared by all heads) but averaged k and v over
dim 0, which is the batch, so with B >= 2 every row attends to keys pooled from the whole batch.
"""

from _common import Attention, export_weights

EXPECTED = frozenset({"batch_independence", "oracle"})


class KeysPooledAcrossBatch(Attention):
    def attention(self, q, k, v):
        k = k.mean(dim=0, keepdim=True)  # meant the head axis (dim 1)
        v = v.mean(dim=0, keepdim=True)
        return super().attention(q, k, v)


def build(n_embd: int, n_head: int) -> KeysPooledAcrossBatch:
    return KeysPooledAcrossBatch(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
