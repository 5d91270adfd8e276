"""The module is correct, but export_weights returns `weight.T` (the x @ W layout) instead of
nn.Linear's (out, in) weight, so the oracle runs with transposed projections.
"""

from _common import Attention
from _common import export_weights as _export

EXPECTED = frozenset({"oracle", "oracle_grad"})


def build(n_embd: int, n_head: int) -> Attention:
    return Attention(n_embd, n_head)


def export_weights(module):
    return {key: t.T if key.endswith("weight") else t for key, t in _export(module).items()}
