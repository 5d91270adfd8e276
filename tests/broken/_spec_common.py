"""Correct protocol v2 attention for the catalogue's variant bugs (not a subject).

Written independently of attnspec's reference, one overridable method per rule, so each broken
subject overrides only its bug: key/value head sharing, the window, RoPE, the scale, ALiBi.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnspec import ALiBi, AttentionSpec, RoPE

PROTOCOL = 2


class SpecAttn(nn.Module):
    def __init__(self, spec: AttentionSpec) -> None:
        super().__init__()
        self.spec = spec
        C, H, G, D = spec.n_embd, spec.n_head, spec.G, spec.D
        self.q = nn.Linear(C, H * D, bias=spec.bias)
        self.k = nn.Linear(C, G * D, bias=spec.bias)
        self.v = nn.Linear(C, G * D, bias=spec.bias)
        self.o = nn.Linear(H * D, C, bias=spec.bias)

    def share_kv(self, t: Tensor) -> Tensor:
        """(B, G, T, D) -> (B, H, T, D): query head h reads kv head h // (H / G)."""
        return t.repeat_interleave(self.spec.n_head // self.spec.G, dim=1)

    def allowed(self, T: int, device: torch.device) -> Tensor:
        """(T, T): query i sees key j iff i - window < j <= i."""
        i = torch.arange(T, device=device)[:, None]
        j = torch.arange(T, device=device)[None, :]
        seen = j <= i
        return seen if self.spec.window is None else seen & (j > i - self.spec.window)

    def rotate(self, t: Tensor, rope: RoPE) -> Tensor:
        T, D = t.shape[-2:]
        rot = int(D * rope.fraction)
        inv = 1.0 / rope.theta ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot)
        ang = torch.outer(torch.arange(T, dtype=torch.float32), inv).to(t.device)
        cos, sin = ang.cos().to(t.dtype), ang.sin().to(t.dtype)
        x, rest = t[..., :rot], t[..., rot:]
        if rope.interleaved:
            x1, x2 = x[..., 0::2], x[..., 1::2]
            out = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
        else:
            x1, x2 = x[..., :rot // 2], x[..., rot // 2:]
            out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
        return torch.cat((out, rest), dim=-1)

    def scale(self) -> float:
        s = self.spec.scale
        return 1.0 / math.sqrt(self.spec.D) if s is None else s

    def slopes(self, H: int) -> list[float]:
        def pow2(n: int) -> list[float]:
            start = 2 ** (-(2 ** -(math.log2(n) - 3)))
            return [start * start ** i for i in range(n)]
        if math.log2(H).is_integer():
            return pow2(H)
        low = 2 ** math.floor(math.log2(H))
        return pow2(low) + self.slopes(2 * low)[0::2][:H - low]

    def forward(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        s = self.spec
        H, G, D = s.n_head, s.G, s.D
        q = self.q(x).view(B, T, H, D).transpose(1, 2)
        k = self.k(x).view(B, T, G, D).transpose(1, 2)
        v = self.v(x).view(B, T, G, D).transpose(1, 2)
        if isinstance(s.positions, RoPE):
            q, k = self.rotate(q, s.positions), self.rotate(k, s.positions)
        k, v = self.share_kv(k), self.share_kv(v)
        scores = q @ k.transpose(-2, -1) * self.scale()
        if s.softcap is not None:
            scores = s.softcap * torch.tanh(scores / s.softcap)
        if isinstance(s.positions, ALiBi):
            i = torch.arange(T, device=x.device)[:, None]
            j = torch.arange(T, device=x.device)[None, :]
            slope = torch.tensor(self.slopes(H), dtype=scores.dtype, device=x.device)
            scores = scores - slope[:, None, None] * (i - j).to(scores.dtype)
        scores = scores.masked_fill(~self.allowed(T, x.device), float("-inf"))
        y = torch.softmax(scores, dim=-1) @ v
        return self.o(y.transpose(1, 2).reshape(B, T, H * D))


def export_weights(module: nn.Module) -> dict[str, Tensor]:
    out = {f"{n}_weight": getattr(module, n).weight for n in "qkvo"}
    if module.q.bias is not None:
        out |= {f"{n}_bias": getattr(module, n).bias for n in "qkvo"}
    return out
