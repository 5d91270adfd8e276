"""Rotary angles computed in the input's dtype: in bfloat16 a position past 256 is rounded
(1001 becomes 1000) and position x frequency keeps 8 bits, so far from the start the rotation
no longer measures distances. float32 and float64 hide it."""

import torch
from _spec_common import PROTOCOL, SpecAttn, export_weights, shifted

EXPECTED = frozenset({"relative_position"})
VARIANTS = {"n_kv_head": "any", "positions": "any"}
DTYPES = (torch.float32, torch.bfloat16)


class AnglesInInputDtype(SpecAttn):
    def rotate_at(self, t, rope, pos):
        D = t.shape[-1]
        rot = int(D * rope.fraction)
        inv = 1.0 / rope.theta ** (torch.arange(0, rot, 2, dtype=t.dtype) / rot)
        ang = (pos.to(t.dtype)[..., None] * inv)[:, None].to(t.device)
        cos, sin = ang.cos(), ang.sin()
        x, rest = t[..., :rot], t[..., rot:]
        if rope.interleaved:
            x1, x2 = x[..., 0::2], x[..., 1::2]
            out = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
        else:
            x1, x2 = x[..., :rot // 2], x[..., rot // 2:]
            out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
        return torch.cat((out, rest), dim=-1)


def build(spec):
    return AnglesInInputDtype(spec)


__all__ = ["DTYPES", "EXPECTED", "PROTOCOL", "VARIANTS", "build", "export_weights", "shifted"]
