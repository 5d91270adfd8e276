"""Casts the result to float32 at the end "for a stable loss", so float64 and bfloat16 inputs come
back as float32.
"""

from _common import Attention, export_weights

EXPECTED = frozenset({"dtype"})


class AlwaysFloat32(Attention):
    def forward(self, x):
        return super().forward(x).float()


def build(n_embd: int, n_head: int) -> AlwaysFloat32:
    return AlwaysFloat32(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
