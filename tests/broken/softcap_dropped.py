"""The soft cap dropped: scores go straight to the mask and softmax, never through
softcap * tanh(scores / softcap), as when a Gemma-2 port runs a fused kernel without its
logit soft-capping argument (the config's attn_logit_softcapping read and then ignored)."""

import dataclasses

from _spec_common import PROTOCOL, SpecAttn, export_weights

EXPECTED = frozenset({"oracle", "oracle_grad"})
VARIANTS = {"softcap": [1.0, 5.0]}  # caps small enough to bind on attnspec's scores


class NoSoftcap(SpecAttn):
    def __init__(self, spec):
        super().__init__(spec)
        self.spec = dataclasses.replace(spec, softcap=None)  # the cap read, then never kept


def build(spec):
    return NoSoftcap(spec)


__all__ = ["EXPECTED", "PROTOCOL", "VARIANTS", "build", "export_weights"]
