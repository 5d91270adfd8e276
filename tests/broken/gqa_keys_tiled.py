"""Grouped-query attention with the keys tiled (repeat) and the values shared in place
(repeat_interleave): query head h scores against kv head h % G but reads the values of kv head
h // (H / G). Right whenever G = 1 or G = H."""

from _spec_common import PROTOCOL, SpecAttn, export_weights

EXPECTED = frozenset({"oracle", "oracle_grad", "gqa_grouping"})
VARIANTS = {"n_kv_head": "any"}


class KeysTiled(SpecAttn):
    def forward(self, x):
        self.calls = 0
        return super().forward(x)

    def share_kv(self, t):
        self.calls += 1  # forward shares k first, then v
        if self.calls == 1:
            return t.repeat(1, self.spec.n_head // self.spec.G, 1, 1)
        return super().share_kv(t)


def build(spec):
    return KeysTiled(spec)


__all__ = ["EXPECTED", "PROTOCOL", "VARIANTS", "build", "export_weights"]
