"""A knob that changes results: split-KV (`num_splits`, FA3/flash-decoding) computes each split's
partial output correctly but merges the splits weighted by how many keys each holds, not by
exp(lse_s - lse). With the default single split it is exact, so an oracle run with default knobs
passes; only comparing knob values shows it. FA3 sweeps `num_splits` in every test for this;
FlashInfer's batch-invariance tests and its "empty chunk merge must not produce NaN" check guard
the same merge."""

from __future__ import annotations

from _kernel import ALL_FEATURES, Blockwise, bind

EXPECTED = frozenset({"knobs"})
TRIGGER = {"causal": False, "Tq": 5, "Tk": 20}
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
KNOBS = {"num_splits": (1, 2, 3)}


class MergeByLength(Blockwise):
    def merge(self, parts, sink, sizes):
        if len(parts) == 1:
            return super().merge(parts, sink, sizes)
        total = float(sum(sizes)) or 1.0
        o = sum(w / total * part for w, (part, _) in zip(sizes, parts, strict=True))
        _, lse = super().merge(parts, sink, sizes)
        return o, lse  # the bug: o weighted by split length, not by exp(lse_s - lse)


attention, supports = bind(MergeByLength, globals())
