"""LSE-only loss leaks into dv: the kernel's backward folds the LSE's incoming gradient into dO
(broadcast over D), so a loss on the LSE alone, which cannot depend on v, gives dv != 0 (and wrong
dq, dk). Modelled exactly: the returned LSE is lse + sum_D(o - o.detach()), equal in value, with
o's path open to the LSE's gradient. FA4's `test_flash_attn_lse_grad` checks that with an
LSE-only loss dV is exactly 0."""

from __future__ import annotations

from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"lse_grad"})
TRIGGER = {}
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


class LseGradIntoDv(Kernel):
    def softmax_attend(self, s, v, p):
        o, lse = super().softmax_attend(s, v, p)
        return o, lse + (o - o.detach()).sum(dim=-1)  # the bug: dLSE flows through o into v


attention, supports = bind(LseGradIntoDv, globals())
