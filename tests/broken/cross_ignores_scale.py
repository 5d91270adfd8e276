"""The cross path (queries fewer than keys) scores with 1/sqrt(D), ignoring the custom scale the
forward uses (Gemma's query_pre_attn_scalar, Granite's attention_multiplier): the corner is
right, so only the cross path's oracle catches it."""

import dataclasses

from _spec_common import CORNER, PROTOCOL, SpecAttn, export_weights

EXPECTED = frozenset({"causal_corner"})
VARIANTS = {"scale": [0.05, 1.0]}


class CrossIgnoresScale(SpecAttn):
    def cross(self, x_q, x_kv):
        full, self.spec = self.spec, dataclasses.replace(self.spec, scale=None)
        try:
            return super().cross(x_q, x_kv)
        finally:
            self.spec = full


def build(spec):
    return CrossIgnoresScale(spec)


def cross(module, x_q, x_kv):
    return module.cross(x_q, x_kv)


__all__ = ["CORNER", "EXPECTED", "PROTOCOL", "VARIANTS", "build", "cross", "export_weights"]
