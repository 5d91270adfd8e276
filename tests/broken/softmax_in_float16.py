"""Runs the softmax in float16 "for speed" (`softmax(scores.half()).to(scores.dtype)`), which throws
away precision that float32 and float64 callers expect.
"""

import torch
from _common import Attention, export_weights

EXPECTED = frozenset({"oracle"})


class SoftmaxInFloat16(Attention):
    def softmax(self, scores):
        return torch.softmax(scores.half(), dim=-1).to(scores.dtype)


def build(n_embd: int, n_head: int) -> SoftmaxInFloat16:
    return SoftmaxInFloat16(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
