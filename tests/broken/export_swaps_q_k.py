"""The module is correct, but export_weights hands out the key projection as q and the query
projection as k, so the oracle computes k @ q.T, the transposed scores.
"""

from _common import Attention
from _common import export_weights as _export

EXPECTED = frozenset({"oracle", "oracle_grad"})


def build(n_embd: int, n_head: int) -> Attention:
    return Attention(n_embd, n_head)


def export_weights(module):
    w = _export(module)
    w["q_weight"], w["k_weight"] = w["k_weight"], w["q_weight"]
    w["q_bias"], w["k_bias"] = w["k_bias"], w["q_bias"]
    return w
