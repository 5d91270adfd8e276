"""Rotary angles computed in the input's dtype: in bfloat16 a position past 256 is rounded
(1001 becomes 1000) and position x frequency keeps 8 bits, so far from the start the rotation
no longer measures distances. float32 and float64 hide it."""

import torch
from _spec_common import PROTOCOL, SpecAttn, export_weights, shifted

EXPECTED = frozenset({"relative_position"})
VARIANTS = {"n_kv_head": "any", "positions": "any"}
DTYPES = (torch.float32, torch.bfloat16)


class AnglesInInputDtype(SpecAttn):
    def angle_dtype(self, t):
        return t.dtype


def build(spec):
    return AnglesInInputDtype(spec)


__all__ = ["DTYPES", "EXPECTED", "PROTOCOL", "VARIANTS", "build", "export_weights", "shifted"]
