"""Returns a view of an input: with one key and nothing masked, every query's output is that key's
value, so the kernel takes a shortcut and returns `v.expand(...)`, a view of v, instead of a new
tensor. The values are exactly right; but the caller's output now changes when v does (a kv cache
written in place), and `out.add_()` writes into v. wafer.ai's catalogue lists "input copied to
output"; attnspec's contract says outputs must not alias an input."""

from __future__ import annotations

import torch
from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"fresh_results"})
TRIGGER = {"Tq": 1, "Tk": 1, "G": 4}
PROTOCOL = "kernel"
LAYOUT = "bhsd"
CAUSAL = "bottom_right"
WINDOW = "pair"
LSE = "natural"
LSE_LAYOUT = "bhs"
MASKED_ROWS = "zero"
BACKWARD = True
DETERMINISTIC = True
FEATURES = ALL_FEATURES


class SingleKeyView(Kernel):
    def attention(self, q, k, v, *, causal, **kw):
        plain = not any(kw.get(name) is not None for name in ("alibi_slopes", "sinks", "window"))
        if plain and self.layout == "bhsd" and k.shape[2] == 1 and q.shape[2] == 1 and \
                q.shape[1] == k.shape[1]:
            o = v.expand(q.shape)  # the bug: a view of v, not a new tensor
            if self.lse is None:
                return o
            s = (q * k).sum(-1).to(self.compute_dtype(q.dtype))
            s = s * self.scale_of(kw.get("scale"), q.shape[-1])
            if kw.get("softcap"):
                s = kw["softcap"] * torch.tanh(s / kw["softcap"])
            return o, s
        return super().attention(q, k, v, causal=causal, **kw)


attention, supports = bind(SingleKeyView, globals())
