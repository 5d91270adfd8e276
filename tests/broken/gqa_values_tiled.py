"""Grouped-query attention with the keys shared in place (repeat_interleave) but the values
tiled (repeat): query head h scores against kv head h // (H / G) and reads the values of kv head
h % G, as when one of two copied lines is edited. Right whenever G = 1 or G = H."""

from _spec_common import PROTOCOL, SpecAttn, export_weights

EXPECTED = frozenset({"oracle", "oracle_grad", "gqa_grouping"})
VARIANTS = {"n_kv_head": "any"}


class ValuesTiled(SpecAttn):
    def forward(self, x):
        self.calls = 0
        return super().forward(x)

    def share_kv(self, t):
        self.calls += 1  # forward shares k first, then v
        if self.calls == 2:
            return t.repeat(1, self.spec.n_head // self.spec.G, 1, 1)
        return super().share_kv(t)


def build(spec):
    return ValuesTiled(spec)


__all__ = ["EXPECTED", "PROTOCOL", "VARIANTS", "build", "export_weights"]
