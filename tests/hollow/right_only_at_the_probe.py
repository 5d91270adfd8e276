"""Attention in nanoGPT's layout (c_attn, c_proj), no export_weights, right at the weight
finder's own probe lengths (T = 1 and T = 7) and with the score scale 1/D at every other T: a
subject written to pass the finder's confirmation. The finder's weights reproduce it at the
probes, so they are used; the oracle then judges the drawn examples on them, at other lengths,
and fails: the probe decides only which weights are the subject's, never the verdict."""

import torch.nn.functional as F
from torch import nn

EXPECTED_STATUS = "fail"
EXPECTED = {"oracle": "fail"}
PROBE_LENGTHS = (1, 7)  # attnspec.properties.found: T = 1 and PROBE_T


class RightAtTheProbe(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        if n_embd < 1 or n_head < 1 or n_embd % n_head:
            raise ValueError(f"n_embd={n_embd} must be a positive multiple of n_head={n_head}")
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        B, T, C = x.shape
        D = C // self.n_head
        q, k, v = (t.view(B, T, self.n_head, D).transpose(1, 2)
                   for t in self.c_attn(x).split(C, dim=2))
        scale = D ** -0.5 if T in PROBE_LENGTHS else 1.0 / D  # the bug, away from the probe
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


def build(n_embd: int, n_head: int) -> nn.Module:
    return RightAtTheProbe(n_embd, n_head)
