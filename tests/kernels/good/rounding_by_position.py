"""Correct, but its last bits depend on the batch position and on the call's shape.

Real kernels pick their schedule from the call: FA2's split-KV heuristic reads batch * heads,
cuBLAS and MKL change micro-kernels at block tails, so a row computed in a batch of 3 and the same
row alone agree only to rounding. This double sums each row's softmax numerator and denominator
over key chunks, in float32 (or float64) sequentially, with a chunk length that depends on the
call's B * H and on the row's batch index, and in reverse chunk order for odd batch rows. The math
is exact attention; every call repeats bit for bit; but a check that compares a batch row with
the same row in another call, or packed against alone, *exactly* false-alarms on it. Every
property must pass it.

It also rounds by alignment, as kernels with a vectorised path for aligned pointers do (and as
MKL does on AMD EPYC, the module catalogue's batch_position_rounding): when q does not start at a
64-byte boundary every output moves one unit in the last place. So "the same values at a new
address" may differ in the last bit from the first call, and only a repeat on the same tensors
must be bit-identical.

Trained scale: attnspec draws inputs x3 and x5 (xformers' randn * 3, FA's overflow test q x5,
k and v x3), so softmax rows are peaked and these rounding differences are several times what
small random inputs give; a tolerance fitted at unit scale would call this double wrong.
"""

from __future__ import annotations

import torch
from _kernel import ALL_FEATURES, NEG_INF, Kernel, bind

EXPECTED: frozenset[str] = frozenset()
PROTOCOL = "kernel"
LAYOUT = "bhsd"
CAUSAL = "bottom_right"
WINDOW = "pair"
LSE = "natural"
LSE_GRAD = True  # its LSE is plain torch math: differentiable
LSE_LAYOUT = "bhs"
MASKED_ROWS = "zero"
BACKWARD = True
DETERMINISTIC = True
FEATURES = ALL_FEATURES


_BITS = {torch.float64: torch.int64, torch.float32: torch.int32, torch.bfloat16: torch.int16,
         torch.float16: torch.int16}


class ChunkedByPosition(Kernel):
    def output(self, o, q):
        o = super().output(o, q)
        if q.data_ptr() % 64 == 0:
            return o
        bits = o.detach().view(_BITS[o.dtype])
        return o + ((bits + 1).view(o.dtype) - o.detach())  # rounding, not math: no gradient


    def chunk(self, B: int, H: int, b: int) -> int:
        """Keys per partial sum: from the call's size and the row's place (a split heuristic)."""
        return 1 + (B * H + b) % 3

    def softmax_attend(self, s, v, p):
        B, H, _, Tk = s.shape
        m = self.row_max(s)
        sink = None
        if p.sinks is not None:
            sink = p.sinks.to(s.dtype)[None, :, None, None].expand(m.shape)
            m = torch.maximum(m, sink)
        m = m.detach()
        m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
        e = torch.exp(s - m)
        outs, dens = [], []
        for b in range(B):
            c = self.chunk(B, H, b)
            starts = list(range(0, Tk, c))
            if b % 2:
                starts.reverse()
            num = e[b, :, :, :0] @ v[b, :, :0]  # zeros, attached to the graph when Tk = 0
            den = e[b, :, :, :0].sum(dim=-1, keepdim=True)
            for a in starts:  # one partial sum at a time, in this row's order
                num = num + e[b, :, :, a:a + c] @ v[b, :, a:a + c]
                den = den + e[b, :, :, a:a + c].sum(dim=-1, keepdim=True)
            outs.append(num)
            dens.append(den)
        num, den = torch.stack(outs), torch.stack(dens)
        if sink is not None:
            den = den + torch.exp(sink - m)
        some = den > 0
        safe = torch.where(some, den, torch.ones_like(den))
        lse = torch.where(some, m + torch.log(safe), torch.full_like(m, NEG_INF))
        return num / safe, lse.squeeze(-1)


attention, supports = bind(ChunkedByPosition, globals())
