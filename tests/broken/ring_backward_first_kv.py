"""Ring attention whose backward reads the rank's own k/v block at every ring step instead of
the block that has come round (diffusers#14265: the backward op re-read ctx.saved_tensors,
saved at ring step 0; Megatron-LM#1464 reports the same symptom in TransformerEngine's P2P
ring). Outputs are right; dq, dk, dv and so every gradient are wrong.
"""

from attnspec.subjects.reference_ring import (
    CP_LAYOUT,
    PROTOCOL,
    VARIANTS,
    RingAttention,
    export_weights,
    shard_positions,
    supports,
)

EXPECTED = frozenset({"cp_equivalence"})


class StaleKVRing(RingAttention):
    def backward_op(self, k, v):
        kernel = super().backward_op(k, v)

        def stale(**kw):
            n = kw["key"].size(2)  # the load-balanced steps take a half block: as much of ours
            kw["key"], kw["value"] = k[:, :, :n], v[:, :, :n]
            return kernel(**kw)
        return stale


def build(spec):
    return StaleKVRing(spec)


__all__ = ["CP_LAYOUT", "EXPECTED", "PROTOCOL", "VARIANTS", "build", "export_weights",
           "shard_positions", "supports"]
