"""RoPE conventions mixed: weights from a GPT-J-style model (interleaved pairs) run through a
rotate-half kernel (GPT-NeoX, Llama). Every output is finite and causal, only wrong."""

from _spec_common import PROTOCOL, SpecAttn, export_weights

from attnspec import RoPE

EXPECTED = frozenset({"oracle", "oracle_grad"})
VARIANTS = {"positions": [RoPE(interleaved=True), RoPE(fraction=0.5, interleaved=True)]}


class HalvesForPairs(SpecAttn):
    def rotate(self, t, rope):
        return super().rotate(t, RoPE(rope.theta, rope.fraction, interleaved=False))


def build(spec):
    return HalvesForPairs(spec)


__all__ = ["EXPECTED", "PROTOCOL", "VARIANTS", "build", "export_weights"]
