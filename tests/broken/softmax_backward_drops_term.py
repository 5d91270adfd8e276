"""A hand-written softmax autograd.Function (to save memory) whose backward returns `w * g` and
drops the `- w * (w * g).sum(-1)` term: the forward is exact, the gradients are wrong.
"""

import torch
from _common import Attention, export_weights

EXPECTED = frozenset({"oracle_grad"})


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, scores):
        weights = torch.softmax(scores, dim=-1)
        ctx.save_for_backward(weights)
        return weights

    @staticmethod
    def backward(ctx, grad):
        (weights,) = ctx.saved_tensors
        return weights * grad  # should be weights * (grad - (weights * grad).sum(-1, keepdim=True))


class SoftmaxBackwardDropsTerm(Attention):
    def softmax(self, scores):
        return _Softmax.apply(scores)


def build(n_embd: int, n_head: int) -> SoftmaxBackwardDropsTerm:
    return SoftmaxBackwardDropsTerm(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
