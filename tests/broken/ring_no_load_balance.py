"""Declares CP_LAYOUT = "head_tail" (rank r holds chunks r and 2W - 1 - r) but runs torch's ring
with `_cp_options.enable_load_balance = False`, which treats each rank's positions as one
contiguous block: the ring skips and masks the wrong key blocks. The layout and the flag live in
different places (torch's flag is a process global that `context_parallel()` sets from its
load balancer; pytorch#183968 changed when it is set), so they can disagree. Off by 0.59-1.36 in
docs/plans/sharding.md's measurement.
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


class UnbalancedRing(RingAttention):
    def load_balanced(self):
        return False


def build(spec):
    return UnbalancedRing(spec)


__all__ = ["CP_LAYOUT", "EXPECTED", "PROTOCOL", "VARIANTS", "build", "export_weights",
           "shard_positions", "supports"]
