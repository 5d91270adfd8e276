"""Given a position offset, the queries are turned from it but the keys from 0: the forward
pass (offset 0) is right, yet every shifted call sees distances off by the offset, as in code
that threads position_ids to the query rotation only."""

import torch
from _spec_common import PROTOCOL, SpecAttn, export_weights, shifted

EXPECTED = frozenset({"relative_position"})
VARIANTS = {"n_kv_head": "any", "positions": "any"}


class KeysFromZero(SpecAttn):
    def shift_positions(self, offset, T):
        return torch.arange(offset, offset + T), torch.arange(T)


def build(spec):
    return KeysFromZero(spec)


__all__ = ["EXPECTED", "PROTOCOL", "VARIANTS", "build", "export_weights", "shifted"]
