"""Queries fewer than keys aligned at the top left (query i sees keys j <= i) while the subject
declares the bottom right, which decoding needs: flash-attention before 2.1, and the backend in
executorch#22426 that picked the other corner."""

from _spec_common import PROTOCOL, SpecAttn, cross, decode, export_weights, padded

EXPECTED = frozenset({"causal_corner"})
VARIANTS = {"n_kv_head": "any"}
CORNER = "bottom_right"


class TopLeft(SpecAttn):
    def corner_shift(self, Tq, Tk):
        return 0


def build(spec):
    return TopLeft(spec)


__all__ = ["CORNER", "EXPECTED", "PROTOCOL", "VARIANTS", "build", "cross", "decode",
           "export_weights", "padded"]
