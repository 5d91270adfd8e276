"""Nondeterministic forward by a race: split-KV partials are combined in the order the splits
finish, as an atomic-add merge does; float addition is not associative, so the last bits of o
change from call to call. The finishing order is modelled by a rotation that advances with every
call (a stand-in for the scheduler that cannot flake: two calls in a row always differ). The race
FA's `test_flash_attn_race_condition` hunts with batch 60 and 250 repeats; the values stay within
rounding of the truth, so only repeating the call and comparing bits shows it."""

from __future__ import annotations

from _kernel import ALL_FEATURES, Blockwise, bind

EXPECTED = frozenset({"determinism"})
TRIGGER = {"causal": False, "Tq": 6, "Tk": 24, "D": 8}
PROTOCOL = "kernel"
LAYOUT = "bhsd"
CAUSAL = "bottom_right"
WINDOW = "pair"
LSE = "natural"
LSE_LAYOUT = "bhs"
MASKED_ROWS = "zero"
BACKWARD = True
DETERMINISTIC = False
FEATURES = ALL_FEATURES


class RacingMerge(Blockwise):
    KNOB_DEFAULTS = {"block_q": 16, "block_k": 4, "num_splits": 3}
    calls = 0

    def attention(self, q, k, v, **kw):
        RacingMerge.calls += 1
        return super().attention(q, k, v, **kw)

    def merge(self, parts, sink, sizes):
        turn = RacingMerge.calls % len(parts)  # the bug: the order the splits finish
        order = list(range(turn, len(parts))) + list(range(turn))
        return super().merge([parts[i] for i in order], sink, [sizes[i] for i in order])


attention, supports = bind(RacingMerge, globals())
