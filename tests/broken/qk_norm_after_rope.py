"""The q/k norm applied after RoPE instead of before: the per-channel norm weights then scale
rotated channels, which is not the model (Qwen3, Gemma3 and OLMo2 normalise, then rotate)."""

from _spec_common import PROTOCOL, SpecAttn, export_weights

from attnspec import QKNorm, RoPE

EXPECTED = frozenset({"oracle", "oracle_grad"})
VARIANTS = {"qk_norm": [QKNorm(), QKNorm(kind="layer", per_head=False)],
            "positions": [RoPE(), RoPE(interleaved=True)], "n_kv_head": "any"}


class NormAfterRope(SpecAttn):
    def norm(self, t, which):
        return t  # skipped here; done on the rotated heads below

    def rotate(self, t, rope, start=0):
        turned = super().rotate(t, rope, start)
        B, N, T, D = turned.shape
        flat = turned.transpose(1, 2).reshape(B, T, N * D)
        return SpecAttn.norm(self, flat, "q" if N == self.spec.n_head else "k").view(
            B, T, N, D).transpose(1, 2)


def build(spec):
    return NormAfterRope(spec)


__all__ = ["EXPECTED", "PROTOCOL", "VARIANTS", "build", "export_weights"]
