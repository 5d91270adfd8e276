"""The key padding mask applied to the queries (rows of the score matrix) instead of the keys:
real tokens still attend to the padding."""

import torch
from _spec_common import CORNER, PROTOCOL, SpecAttn, cross, decode, export_weights, padded

EXPECTED = frozenset({"padding_invariance"})
VARIANTS = {"n_kv_head": "any"}


class MaskOnQueries(SpecAttn):
    def padded(self, x, keep):
        q, k, v = self.heads(x)
        idx = torch.arange(x.shape[1], device=x.device)
        pos = idx[None]
        keep_rows = keep[:, :, None] & torch.ones_like(keep)[:, None, :]  # (B, Tq, Tk)
        seen = (idx[None, :] <= idx[:, None])[None] & keep_rows
        return self.attend_seen(q, k, v, seen, pos)

    def attend_seen(self, q, k, v, seen, pos):
        B, H, T, D = q.shape
        k, v = self.share_kv(k), self.share_kv(v)
        scores = q @ k.transpose(-2, -1) * self.scale()
        y = self.masked_softmax(scores, seen[:, None]) @ v
        return self.o(y.transpose(1, 2).reshape(B, T, H * D))


def build(spec):
    return MaskOnQueries(spec)


__all__ = ["CORNER", "EXPECTED", "PROTOCOL", "VARIANTS", "build", "cross", "decode",
           "export_weights", "padded"]
