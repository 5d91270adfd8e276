"""FlashInfer-convention window off by one: `window_left` is inclusive (keys i' - left .. i'), and
vLLM passes `sliding_window - 1` for exactly that reason (vllm tests/kernels/attention/
test_flashinfer.py). This kernel reads `window_left` as the window's size, keys
i' - left + 1 .. i', one key short. A varlen, base-2 LSE kernel like FlashInfer's ragged prefill."""

from __future__ import annotations

from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"oracle", "window"})
TRIGGER = {"window": (3, 0), "seqlens_q": [4, 6], "seqlens_k": [6, 9]}
PROTOCOL = "kernel"
LAYOUT = "varlen"
CAUSAL = "bottom_right"
WINDOW = "left"
LSE = "base2"
LSE_LAYOUT = "sh"
MASKED_ROWS = "zero"
BACKWARD = True
DETERMINISTIC = True
FEATURES = ALL_FEATURES


class LeftAsSize(Kernel):
    def window_edges(self, window, causal):
        left, right = super().window_edges(window, causal)
        return (None if left is None else left - 1), right  # the bug: a size, not a reach


attention, supports = bind(LeftAsSize, globals())
