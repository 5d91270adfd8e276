"""The projections are called as `F.linear(x, layer.weight)` and drop their biases, but
export_weights still exports the (nonzero) biases.
"""

import torch.nn.functional as F
from _common import Attention, export_weights

EXPECTED = frozenset({"oracle", "oracle_grad"})


class BiasesIgnoredInForward(Attention):
    def project(self, x):
        return F.linear(x, self.q.weight), F.linear(x, self.k.weight), F.linear(x, self.v.weight)

    def output(self, y):
        return F.linear(y, self.o.weight)


def build(n_embd: int, n_head: int) -> BiasesIgnoredInForward:
    return BiasesIgnoredInForward(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
