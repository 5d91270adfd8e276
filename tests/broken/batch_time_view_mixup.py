"""Flattened (B, T, C) to (B*T, C) for the projections and restored it with
`view(T, B, C).transpose(0, 1)` (nn.MultiheadAttention's layout), which mixes batch rows and
positions whenever B >= 2.
"""

from _common import Attention, export_weights

EXPECTED = frozenset({"batch_independence", "causality", "oracle"})


class BatchTimeViewMixup(Attention):
    def project(self, x):
        B, T, C = x.shape
        flat = x.reshape(B * T, C)  # batch-major rows

        def unflatten(y):
            return y.view(T, B, C).transpose(0, 1)  # should be y.view(B, T, C)

        return unflatten(self.q(flat)), unflatten(self.k(flat)), unflatten(self.v(flat))


def build(n_embd: int, n_head: int) -> BatchTimeViewMixup:
    return BatchTimeViewMixup(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
