"""NaN gradients at length 1: a hand-written backward recomputes P = exp(S - LSE) on a key tile
padded to BLOCK_K = 16, where the padding holds whatever memory did (modelled as NaN), and zeroes
the padded columns by multiplying with the mask rather than selecting, so NaN reaches dS and,
through dS @ K, all of dq whenever Tk % 16 != 0. The forward is exact. FA #334 (seqlen 1, d 16, NaN
in dQ), whose fix masked "elements beyond seqlen_k" and added `test_flash_attn_bwd_overflow`
(seqlen 1..128, q x5, k and v x3); pytorch #153799 (flex NaN in backward when the length is not
a multiple of 128)."""

from __future__ import annotations

import torch
from _kernel import Kernel, bind

EXPECTED = frozenset({"finite", "oracle_grad"})
TRIGGER = {"Tq": 1, "Tk": 1}
PROTOCOL = "kernel"
LAYOUT = "bhsd"
CAUSAL = "bottom_right"
WINDOW = None
LSE = "natural"
LSE_LAYOUT = "bhs"
MASKED_ROWS = "zero"
BACKWARD = True
DETERMINISTIC = True
FEATURES = ("scale", "noncausal", "cross")


BLOCK_K = 16


class _TiledBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, seen, scale):
        s = (q @ k.transpose(-2, -1) * scale).masked_fill(~seen, float("-inf"))
        lse = torch.logsumexp(s, dim=-1, keepdim=True)
        lse_safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
        o = torch.exp(s - lse_safe) @ v
        ctx.save_for_backward(q, k, v, seen, o, lse_safe)
        ctx.scale = scale
        return o, lse.squeeze(-1)

    @staticmethod
    def backward(ctx, do, dlse):
        q, k, v, seen, o, lse = ctx.saved_tensors
        Tk = k.shape[-2]
        pad = -Tk % BLOCK_K
        garbage = k.new_full(k.shape[:-2] + (pad, k.shape[-1]), float("nan"))
        kp, vp = torch.cat([k, garbage], -2), torch.cat([v, garbage], -2)
        seen_p = torch.cat([seen, seen.new_zeros(seen.shape[:-1] + (pad,))], -1)
        s = kp.new_zeros(()) + q @ kp.transpose(-2, -1) * ctx.scale
        p = torch.exp(s - lse) * seen_p  # the bug: NaN * 0 is NaN; a select would be 0
        dv = (p.transpose(-2, -1) @ do)[..., :Tk, :]
        ds = p * (do @ vp.transpose(-2, -1) - (do * o).sum(-1, keepdim=True))
        dq = ds @ kp * ctx.scale
        dk = (ds.transpose(-2, -1) @ q)[..., :Tk, :] * ctx.scale
        return dq, dk, dv, None, None


class TiledBackward(Kernel):
    def core(self, q, k, v, p):
        Tq, Tk = q.shape[2], k.shape[2]
        q, k, v = self.prepare(q, k, v)
        i, j = torch.arange(Tq, device=q.device), torch.arange(Tk, device=q.device)
        seen = self.visible(i, j, Tq, Tk, p).expand(q.shape[0], q.shape[1], Tq, Tk)
        return _TiledBackward.apply(q, k, v, seen, p.scale)


attention, supports = bind(TiledBackward, globals())
