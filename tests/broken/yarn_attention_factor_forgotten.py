"""YaRN's frequencies right, its attention factor forgotten: cos and sin are not scaled, so
q·k misses the factor's square (0.1 ln(factor) + 1, squared: 1.30 at factor 4)."""

from _spec_common import PROTOCOL, SpecAttn, export_weights

from attnspec import RoPE, YaRN

EXPECTED = frozenset({"oracle", "oracle_grad"})
VARIANTS = {"positions": [RoPE(scaling=YaRN(4.0, 16)),
                          RoPE(fraction=0.5, interleaved=True, scaling=YaRN(16.0, 64))],
            "n_kv_head": "any"}


class FactorForgotten(SpecAttn):
    def scaled(self, rope, rot, length):
        return super().scaled(rope, rot, length)[0], 1.0


def build(spec):
    return FactorForgotten(spec)


__all__ = ["EXPECTED", "PROTOCOL", "VARIANTS", "build", "export_weights"]
