"""Scaled the scores by 1/D instead of 1/sqrt(D)."""

from _common import Attention, export_weights

EXPECTED = frozenset({"oracle", "oracle_grad"})


class ScaleByHeadDim(Attention):
    def scale(self, q, k):
        return 1.0 / q.size(-1)


def build(n_embd: int, n_head: int) -> ScaleByHeadDim:
    return ScaleByHeadDim(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
