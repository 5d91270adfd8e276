"""Grouped-query attention with the key/value heads tiled (repeat) instead of repeated in place
(repeat_interleave): query head h reads kv head h % G, not h // (H / G) (onnx#7274,
axlearn#842). Correct whenever G = 1 or G = H, so plain tests never see it.
"""

from _spec_common import PROTOCOL, SpecAttn, export_weights

EXPECTED = frozenset({"oracle", "oracle_grad", "gqa_grouping"})
VARIANTS = {"n_kv_head": "any"}


class TiledGQA(SpecAttn):
    def share_kv(self, t):
        return t.repeat(1, self.spec.n_head // self.spec.G, 1, 1)


def build(spec):
    return TiledGQA(spec)


__all__ = ["EXPECTED", "PROTOCOL", "VARIANTS", "build", "export_weights"]
