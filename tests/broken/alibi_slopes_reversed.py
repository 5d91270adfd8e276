"""ALiBi with the slopes in the wrong order: head 0 gets the gentlest slope instead of the
steepest."""

from _spec_common import PROTOCOL, SpecAttn, export_weights

from attnspec import ALiBi

EXPECTED = frozenset({"oracle", "oracle_grad"})
VARIANTS = {"positions": [ALiBi()]}


class ReversedSlopes(SpecAttn):
    def slopes(self, H):
        return super().slopes(H)[::-1]


def build(spec):
    return ReversedSlopes(spec)


__all__ = ["EXPECTED", "PROTOCOL", "VARIANTS", "build", "export_weights"]
