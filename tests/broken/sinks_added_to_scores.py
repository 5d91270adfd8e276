"""The sink logit added to every score of its head instead of joining the softmax as a key of
its own: softmax is shift-invariant, so the sink does nothing (rows still sum to 1)."""

from _spec_common import PROTOCOL, SpecAttn, export_weights

EXPECTED = frozenset({"oracle", "oracle_grad"})
VARIANTS = {"sinks": [True], "n_kv_head": "any", "window": "any"}


class SinkAdded(SpecAttn):
    def softmax(self, scores):
        return (scores + self.sinks.to(scores.dtype)[None, :, None, None]).softmax(dim=-1)


def build(spec):
    return SinkAdded(spec)


__all__ = ["EXPECTED", "PROTOCOL", "VARIANTS", "build", "export_weights"]
