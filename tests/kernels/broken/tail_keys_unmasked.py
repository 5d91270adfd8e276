"""Tail blocks not masked: a tiled kernel zero-pads the last key tile to `block_k` (Triton's
`other=0` load) and forgets to hide the padded keys, so whenever Tk is not a multiple of the tile
each row's softmax gets -inf-less zeros: score 0 and value 0, a weight that dilutes the row. Causal
bottom-right hides the pad anyway; non-causal and windowed rows do not. The bug class of pytorch
#159247 (flex accuracy when the kv length is not a multiple of the block), attention-gym #50
(differs from FA over the last tokens at length 137), and the softmax tail-mask bugs of arXiv
2606.27396 that "regular" shapes catch 0% of the time."""

from __future__ import annotations

from _kernel import ALL_FEATURES, Blockwise, bind

EXPECTED = frozenset({"knobs", "oracle"})
TRIGGER = {"causal": False, "Tq": 5, "Tk": 9}
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
KNOBS = {"block_q": (16, 4), "block_k": (8, 3, 16), "num_splits": (1, 2)}


class TailUnmasked(Blockwise):
    def tile_mask(self, i, j, Tq, Tk, p):
        return self.visible(i, j, Tq, Tk, p)  # the bug: padded keys j >= Tk stay visible


attention, supports = bind(TailUnmasked, globals())
