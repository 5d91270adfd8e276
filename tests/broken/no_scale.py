"""Scores are plain `q @ k.T` with no 1/sqrt(D) scale (I assumed softmax normalises anyway), so the
attention is sharper than the reference's.
"""

from _common import Attention, export_weights

EXPECTED = frozenset({"oracle", "oracle_grad"})


class NoScale(Attention):
    def scale(self, q, k):
        return 1.0


def build(n_embd: int, n_head: int) -> NoScale:
    return NoScale(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
