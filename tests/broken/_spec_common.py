"""Correct protocol v2 attention for the catalogue's variant bugs (not a subject).

Written independently of attnspec's reference, one overridable method per rule, so each broken
subject overrides only its bug: key/value head sharing, the window, RoPE, the scale, ALiBi, and
the inference hooks (a cache, key padding, queries fewer than keys, fully masked rows).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnspec import ALiBi, AttentionSpec, RoPE

PROTOCOL = "2.1"  # VARIANTS "any" as revision 2.1 draws it (scaled RoPE, given ALiBi slopes)


class SpecAttn(nn.Module):
    def __init__(self, spec: AttentionSpec) -> None:
        super().__init__()
        self.spec = spec
        C, H, G, D = spec.n_embd, spec.n_head, spec.G, spec.D
        self.q = nn.Linear(C, H * D, bias=spec.bias)
        self.k = nn.Linear(C, G * D, bias=spec.bias)
        self.v = nn.Linear(C, G * D, bias=spec.bias)
        self.o = nn.Linear(H * D, C, bias=spec.bias)
        norm = spec.qk_norm
        if norm is not None:  # drawn near 1 (not ones), so a weight misapplied shows
            q_n, k_n = (D, D) if norm.per_head else (H * D, G * D)
            self.q_norm_weight = nn.Parameter(1 + 0.3 * (torch.rand(q_n) * 2 - 1))
            self.k_norm_weight = nn.Parameter(1 + 0.3 * (torch.rand(k_n) * 2 - 1))
            if norm.kind == "layer":
                self.q_norm_bias = nn.Parameter(0.3 * (torch.rand(q_n) * 2 - 1))
                self.k_norm_bias = nn.Parameter(0.3 * (torch.rand(k_n) * 2 - 1))
        if spec.sinks:
            self.sinks = nn.Parameter(torch.randn(H))

    def softmax(self, scores: Tensor) -> Tensor:
        """Over the keys, and with sinks over each head's sink logit too, dropped after."""
        if not self.spec.sinks:
            return torch.softmax(scores, dim=-1)
        B, H, Tq, _ = scores.shape
        sink = self.sinks.to(scores.dtype)[None, :, None, None].expand(B, H, Tq, 1)
        return torch.softmax(torch.cat((scores, sink), dim=-1), dim=-1)[..., :-1]

    def norm(self, t: Tensor, which: str) -> Tensor:
        """q or k (B, T, N·D) normalised per head (or over all of it), as RMSNorm/LayerNorm."""
        norm = self.spec.qk_norm
        if norm is None:
            return t
        B, T, W = t.shape
        chunks = t.reshape(B, T, -1, self.spec.D if norm.per_head else W)
        wide = chunks.to(torch.float64 if t.dtype == torch.float64 else torch.float32)
        if norm.kind == "layer":
            out = F.layer_norm(wide, wide.shape[-1:], eps=norm.eps).to(t.dtype)
        else:
            out = F.rms_norm(wide, wide.shape[-1:], eps=norm.eps).to(t.dtype)
        out = out.reshape(B, T, W) if not norm.per_head else out
        out = out * getattr(self, f"{which}_norm_weight")
        if norm.kind == "layer":
            out = out + getattr(self, f"{which}_norm_bias")
        return out.reshape(B, T, W)

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

    def scaled(self, rope: RoPE, rot: int, length: int) -> tuple[list[float], float]:
        """RoPE scaling's frequencies, one by one, and the factor on cos and sin (YaRN's), as
        transformers' ROPE_INIT_FUNCTIONS; `length` is what dynamic NTK rebases on."""
        s, base = rope.scaling, rope.theta
        kind = type(s).__name__
        if kind == "DynamicNTK" and length > s.original_max_position:
            base *= (s.factor * length / s.original_max_position - s.factor + 1) ** (
                rot / (rot - 2))
        freqs = [base ** (-2 * i / rot) for i in range(rot // 2)]
        if kind == "LinearScaling":
            return [f / s.factor for f in freqs], 1.0
        if kind == "Llama3Scaling":
            M, lo, hi = s.original_max_position, s.low_freq_factor, s.high_freq_factor
            out = []
            for f in freqs:
                wave = 2 * math.pi / f
                if wave < M / hi:
                    out.append(f)
                elif wave > M / lo:
                    out.append(f / s.factor)
                else:
                    mix = (M / wave - lo) / (hi - lo)
                    out.append((1 - mix) * f / s.factor + mix * f)
            return out, 1.0
        if kind == "YaRN":
            def dim(turns: float) -> float:
                return rot * math.log(s.original_max_position / (turns * 2 * math.pi)) / (
                    2 * math.log(rope.theta))
            lo, hi = dim(s.beta_fast), dim(s.beta_slow)
            if s.truncate:
                lo, hi = math.floor(lo), math.ceil(hi)
            lo, hi = max(lo, 0), min(hi, rot - 1)
            hi = hi + 0.001 if lo == hi else hi
            mixed = []
            for i, f in enumerate(freqs):
                r = min(max((i - lo) / (hi - lo), 0.0), 1.0)  # 0: kept, 1: interpolated
                mixed.append(f * (1 - r) + f / s.factor * r)
            if s.attention_factor is not None:
                return mixed, s.attention_factor

            def m(scale: float, k: float = 1.0) -> float:
                return 1.0 if scale <= 1 else 0.1 * k * math.log(scale) + 1.0
            if s.mscale and s.mscale_all_dim:
                return mixed, m(s.factor, s.mscale) / m(s.factor, s.mscale_all_dim)
            return mixed, m(s.factor)
        return freqs, 1.0

    def rotate_at(self, t: Tensor, rope: RoPE, pos: Tensor, length: int | None = None,
                  ) -> Tensor:
        """pos (B or 1, T): each row's own positions; length: dynamic NTK's (1 + max pos)."""
        D = t.shape[-1]
        rot = int(D * rope.fraction)
        exact = self.angle_dtype(t)
        factor = 1.0
        if rope.scaling is None:
            inv = 1.0 / rope.theta ** (torch.arange(0, rot, 2, dtype=exact) / rot)
        else:
            seen = int(pos.max()) + 1 if length is None else length
            freqs, factor = self.scaled(rope, rot, seen)
            inv = torch.tensor(freqs, dtype=torch.float64).to(exact)
        ang = (pos.to(exact)[..., None] * inv)[:, None].to(t.device)  # (B, 1, T, rot / 2)
        cos, sin = ang.cos() * factor, ang.sin() * factor
        cos, sin = cos.to(t.dtype), sin.to(t.dtype)
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
        given = getattr(self.spec.positions, "slopes", None)
        return list(given) if given is not None else self.paper_slopes(H)

    def paper_slopes(self, H: int) -> list[float]:
        def pow2(n: int) -> list[float]:
            start = 2 ** (-(2 ** -(math.log2(n) - 3)))
            return [start * start ** i for i in range(n)]
        if math.log2(H).is_integer():
            return pow2(H)
        low = 2 ** math.floor(math.log2(H))
        return pow2(low) + self.paper_slopes(2 * low)[0::2][:H - low]

    def forward(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        s = self.spec
        H, G, D = s.n_head, s.G, s.D
        q = self.norm(self.q(x), "q").view(B, T, H, D).transpose(1, 2)
        k = self.norm(self.k(x), "k").view(B, T, G, D).transpose(1, 2)
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
        y = self.softmax(scores) @ v
        return self.o(y.transpose(1, 2).reshape(B, T, H * D))


    # ---- the inference hooks ---------------------------------------------------------------

    def heads(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        B, T, _ = x.shape
        s = self.spec
        return (self.norm(self.q(x), "q").view(B, T, s.n_head, s.D).transpose(1, 2),
                self.norm(self.k(x), "k").view(B, T, s.G, s.D).transpose(1, 2),
                self.v(x).view(B, T, s.G, s.D).transpose(1, 2))

    def masked_softmax(self, scores: Tensor, seen: Tensor) -> Tensor:
        """Softmax over the keys seen; a row that sees none gets zero weights."""
        scores = scores.masked_fill(~seen, float("-inf"))
        some = seen.any(dim=-1, keepdim=True)
        return self.softmax(scores.masked_fill(~some, 0.0)) * some

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
            seen = self.decode_length(offset, x.shape[1])
            q = self.rotate_at(q, self.spec.positions, qi[None], seen)
            k = self.rotate_at(k, self.spec.positions, qi[None], seen)
        k, v = self.append(cache, k, v)
        kj = torch.arange(k.shape[2], device=x.device)
        qi = torch.arange(offset, offset + x.shape[1], device=x.device)
        return self.attend(q, k, v, qi, kj, qi[None], kj[None], None), (k, v)

    def decode_length(self, offset: int, t: int) -> int:
        """Dynamic NTK's length for a decode call: 1 + its last position."""
        return offset + t

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
            seen = max(Tq + self.corner_shift(Tq, Tk), Tk)  # one length for q and k
            q = self.rotate_at(q, self.spec.positions, qi[None], seen)
            k = self.rotate_at(k, self.spec.positions, kj[None], seen)
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
    extras = ("q_norm_weight", "k_norm_weight", "q_norm_bias", "k_norm_bias", "sinks")
    return out | {k: getattr(module, k) for k in extras if hasattr(module, k)}
