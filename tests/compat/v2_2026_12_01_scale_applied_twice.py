"""Compat subject: written once against the published protocol named below and never edited
afterwards (tests/compat/README.md).

Written against: protocol v2 as published at the end of 2026-12-01 (docs/design.md section 3 and
README.md at that commit) (commit 9e645bb3d1a0ef61416548d4afe2f4165b3595dc). Copied from:
tests/broken/scale_applied_twice.py @ 9e645bb (broken on purpose); changed:
tests/broken/_spec_common.py @ 9e645bb inlined in place of `from _spec_common import ...` (its
imports shared, not repeated).

The original docstring:

    The score scale applied twice: once folded into the query projection's output and once in
    the kernel, as when a model's config scale meets a kernel's default 1/sqrt(D).
"""

from __future__ import annotations

# ---- inlined from tests/broken/_spec_common.py @ 9e645bb ----
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

    def rotate(self, t: Tensor, rope: RoPE, start: int = 0) -> Tensor:
        T = t.shape[-2]
        return self.rotate_at(t, rope, torch.arange(start, start + T)[None, :])

    def angle_dtype(self, t: Tensor) -> torch.dtype:
        """Where the rotary angles are computed: float32 or wider."""
        return torch.float64 if t.dtype == torch.float64 else torch.float32

    def rotate_at(self, t: Tensor, rope: RoPE, pos: Tensor) -> Tensor:
        """pos (B or 1, T): each row's own positions."""
        D = t.shape[-1]
        rot = int(D * rope.fraction)
        exact = self.angle_dtype(t)
        inv = 1.0 / rope.theta ** (torch.arange(0, rot, 2, dtype=exact) / rot)
        ang = (pos.to(exact)[..., None] * inv)[:, None].to(t.device)  # (B, 1, T, rot / 2)
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


    # ---- the inference hooks ---------------------------------------------------------------

    def heads(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        B, T, _ = x.shape
        s = self.spec
        return (self.q(x).view(B, T, s.n_head, s.D).transpose(1, 2),
                self.k(x).view(B, T, s.G, s.D).transpose(1, 2),
                self.v(x).view(B, T, s.G, s.D).transpose(1, 2))

    def masked_softmax(self, scores: Tensor, seen: Tensor) -> Tensor:
        """Softmax over the keys seen; a row that sees none gets zero weights."""
        scores = scores.masked_fill(~seen, float("-inf"))
        some = seen.any(dim=-1, keepdim=True)
        return torch.softmax(scores.masked_fill(~some, 0.0), dim=-1) * some

    def attend(self, q: Tensor, k: Tensor, v: Tensor, qi: Tensor, kj: Tensor, qpos: Tensor,
               kpos: Tensor, keep: Tensor | None) -> Tensor:
        """q (B, H, Tq, D) on k, v (B, G, Tk, D); qi/kj the indices that decide visibility,
        qpos/kpos (B or 1, T) the positions ALiBi measures; keep (B, Tk) the real keys."""
        s = self.spec
        B, H, Tq, D = q.shape
        k, v = self.share_kv(k), self.share_kv(v)
        scores = q @ k.transpose(-2, -1) * self.scale()
        if s.softcap is not None:
            scores = s.softcap * torch.tanh(scores / s.softcap)
        if isinstance(s.positions, ALiBi):
            slope = torch.tensor(self.slopes(H), dtype=scores.dtype, device=q.device)
            dist = (qpos[:, None, :, None] - kpos[:, None, None, :]).to(scores.dtype)
            scores = scores - slope[None, :, None, None] * dist
        seen = kj[None, :] <= qi[:, None]
        if s.window is not None:
            seen = seen & (kj[None, :] > qi[:, None] - s.window)
        seen = seen[None, None] if keep is None else seen[None, None] & keep[:, None, None]
        y = self.masked_softmax(scores, seen) @ v
        return self.o(y.transpose(1, 2).reshape(B, Tq, H * D))

    def decode_positions(self, offset: int, t: int) -> Tensor:
        return torch.arange(offset, offset + t)

    def append(self, cache: tuple[Tensor, Tensor] | None, k: Tensor, v: Tensor,
               ) -> tuple[Tensor, Tensor]:
        if cache is None:
            return k, v
        return torch.cat((cache[0], k), dim=2), torch.cat((cache[1], v), dim=2)

    def decode(self, x: Tensor, cache: tuple[Tensor, Tensor] | None, offset: int,
               ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        q, k, v = self.heads(x)
        qi = self.decode_positions(offset, x.shape[1]).to(x.device)
        if isinstance(self.spec.positions, RoPE):
            q = self.rotate_at(q, self.spec.positions, qi[None])
            k = self.rotate_at(k, self.spec.positions, qi[None])
        k, v = self.append(cache, k, v)
        kj = torch.arange(k.shape[2], device=x.device)
        qi = torch.arange(offset, offset + x.shape[1], device=x.device)
        return self.attend(q, k, v, qi, kj, qi[None], kj[None], None), (k, v)

    def padded_decode_positions(self, keep: Tensor, offset: int, t: int) -> Tensor:
        """(B, t): the new tokens' positions, counting each row's real tokens so far."""
        return (keep.long().cumsum(1) - 1).clamp(min=0)[:, offset:offset + t]

    def decode_padded(self, x: Tensor, keep: Tensor, cache: tuple[Tensor, Tensor] | None,
                      offset: int) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        t = x.shape[1]
        x = self.padded_input(x, keep[:, offset:offset + t])
        q, k, v = self.heads(x)
        pos = self.padded_decode_positions(keep, offset, t).to(x.device)
        if isinstance(self.spec.positions, RoPE):
            q = self.rotate_at(q, self.spec.positions, pos)
            k = self.rotate_at(k, self.spec.positions, pos)
        k, v = self.append(cache, k, v)
        kj = torch.arange(k.shape[2], device=x.device)
        qi = torch.arange(offset, offset + t, device=x.device)
        kpos = (keep.long().cumsum(1) - 1).clamp(min=0).to(x.device)
        return self.attend(q, k, v, qi, kj, pos, kpos, keep.to(x.device)), (k, v)

    def shift_positions(self, offset: int, T: int) -> tuple[Tensor, Tensor]:
        """The positions queries and keys are turned by when x starts at `offset`."""
        pos = torch.arange(offset, offset + T)
        return pos, pos

    def shifted(self, x: Tensor, offset: int) -> Tensor:
        q, k, v = self.heads(x)
        T = x.shape[1]
        qpos, kpos = (p.to(x.device) for p in self.shift_positions(offset, T))
        if isinstance(self.spec.positions, RoPE):
            q = self.rotate_at(q, self.spec.positions, qpos[None])
            k = self.rotate_at(k, self.spec.positions, kpos[None])
        idx = torch.arange(T, device=x.device)
        return self.attend(q, k, v, idx, idx, qpos[None], kpos[None], None)

    def padded_input(self, x: Tensor, keep: Tensor) -> Tensor:
        return x.masked_fill(~keep[..., None], 0.0)  # padding is never read

    def padded(self, x: Tensor, keep: Tensor) -> Tensor:
        x = self.padded_input(x, keep)
        q, k, v = self.heads(x)
        pos = (keep.long().cumsum(1) - 1).clamp(min=0)
        if isinstance(self.spec.positions, RoPE):
            q = self.rotate_at(q, self.spec.positions, pos)
            k = self.rotate_at(k, self.spec.positions, pos)
        idx = torch.arange(x.shape[1], device=x.device)
        return self.attend(q, k, v, idx, idx, pos, pos, keep)

    def corner_shift(self, Tq: int, Tk: int) -> int:
        return Tk - Tq  # bottom-right: the last query sits on the last key

    def cross(self, x_q: Tensor, x_kv: Tensor) -> Tensor:
        q, _, _ = self.heads(x_q)
        _, k, v = self.heads(x_kv)
        Tq, Tk = x_q.shape[1], x_kv.shape[1]
        qi = torch.arange(Tq, device=x_q.device) + self.corner_shift(Tq, Tk)
        kj = torch.arange(Tk, device=x_q.device)
        if isinstance(self.spec.positions, RoPE):
            q = self.rotate_at(q, self.spec.positions, qi[None])
            k = self.rotate_at(k, self.spec.positions, kj[None])
        return self.attend(q, k, v, qi, kj, qi[None], kj[None], None)


CORNER = "bottom_right"


def decode(module: nn.Module, x: Tensor, cache: object, offset: int) -> tuple[Tensor, object]:
    return module.decode(x, cache, offset)  # type: ignore[operator, no-any-return]


def padded(module: nn.Module, x: Tensor, key_mask: Tensor) -> Tensor:
    return module.padded(x, key_mask)  # type: ignore[operator, no-any-return]


def cross(module: nn.Module, x_q: Tensor, x_kv: Tensor) -> Tensor:
    return module.cross(x_q, x_kv)  # type: ignore[operator, no-any-return]


def decode_padded(module: nn.Module, x: Tensor, key_mask: Tensor, cache: object, offset: int,
                  ) -> tuple[Tensor, object]:
    return module.decode_padded(x, key_mask, cache, offset)  # type: ignore[operator, no-any-return]


def shifted(module: nn.Module, x: Tensor, offset: int) -> Tensor:
    return module.shifted(x, offset)  # type: ignore[operator, no-any-return]


def export_weights(module: nn.Module) -> dict[str, Tensor]:
    out = {f"{n}_weight": getattr(module, n).weight for n in "qkvo"}
    if module.q.bias is not None:
        out |= {f"{n}_bias": getattr(module, n).bias for n in "qkvo"}
    return out


# ---- the subject ----
EXPECTED = frozenset({"oracle", "oracle_grad"})
VARIANTS = {"scale": "any"}


class ScaledTwice(SpecAttn):
    def scale(self):
        return super().scale() ** 2


def build(spec):
    return ScaledTwice(spec)


__all__ = ["EXPECTED", "PROTOCOL", "VARIANTS", "build", "export_weights"]
