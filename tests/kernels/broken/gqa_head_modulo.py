"""GQA mapping wrong: query head h reads kv head h % G instead of h // (H / G), the
`repeat` versus `repeat_interleave` mix-up (SDPA's `enable_gqa` and FlashAttention both group
consecutive query heads on one kv head). With G = 1 (MQA) or G = H both mappings agree, so only
a true grouping (1 < G < H) shows it."""

from __future__ import annotations

import torch
from _kernel import ALL_FEATURES, Kernel, bind

EXPECTED = frozenset({"gqa_grouping", "oracle"})
TRIGGER = {"H": 4, "G": 2}
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


class HeadModulo(Kernel):
    def kv_heads(self, H, G, device):
        return torch.arange(H, device=device) % G  # the bug: interleaved, not grouped


attention, supports = bind(HeadModulo, globals())
