"""RoPE with the base hard-coded to 10000, whatever the spec's theta (Llama 3's 500000, Qwen's
1e6): the config's rope_theta never reaches the rotary embedding. Position 0 and the first
channel pair turn alike, so short or low-channel tests do not see it."""

from _spec_common import PROTOCOL, SpecAttn, export_weights

from attnspec import RoPE

EXPECTED = frozenset({"oracle", "oracle_grad"})
VARIANTS = {"positions": [RoPE(theta=500000.0), RoPE(theta=1000000.0, interleaved=True)]}


class HardcodedTheta(SpecAttn):
    def rotate_at(self, t, rope, pos):
        return super().rotate_at(t, RoPE(10000.0, rope.fraction, rope.interleaved), pos)


def build(spec):
    return HardcodedTheta(spec)


__all__ = ["EXPECTED", "PROTOCOL", "VARIANTS", "build", "export_weights"]
