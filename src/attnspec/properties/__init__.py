"""The catalogue: one Property per id, in report order, and run_check."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

from ..common.protocol import Executor, Ranks
from .base import Context, Example, Outcome, SubjectFault, Unfound, Unsupported, _inputs
from .basic import (
    check_determinism,
    check_divisibility,
    check_dtype,
    check_finite,
    check_input_unchanged,
    check_width,
)
from .causal import (
    check_batch_independence,
    check_causality,
    check_grad_causality,
    check_mixing,
    check_prefix,
    check_window,
)
from .grouping import check_gqa_grouping
from .inference import (
    check_causal_corner,
    check_decode,
    check_masked_rows,
    check_padding_invariance,
    check_relative_position,
)
from .oracle import check_device_agreement, check_oracle, check_oracle_grad
from .sharded import check_cp_equivalence, check_tp_equivalence
from .yardsticks import TRAINED_LOGIT_STD, _exported, _has_export, logit_std


@dataclass(frozen=True)
class Property:
    """One property: its stable id, what it needs from the subject and the draw, its check."""

    id: str
    check: Callable[[Context, Example], Outcome]
    needs_export: bool = False
    uses_cuts: bool = False
    min_batch: int = 1
    needs_cuda: bool = False
    invalid_configs: bool = False  # draws configurations that build must refuse
    # The factors inputs are drawn at: 1, and x3 and x5 (peaked softmax rows, trained logits)
    # for the checks judged by the rule or by "must move", where the logits' size matters.
    input_scales: tuple[float, ...] = (1.0,)
    needs_window: bool = False  # draws only specs with a window (protocol v2 subjects)
    needs_hook: str | None = None  # a protocol v2 inference hook: decode, padded or cross
    needs_groups: bool = False  # draws only specs with 1 < n_kv_head < n_head (protocol v2)
    needs_rope: bool = False  # draws only specs with rotary positions (protocol v2)
    shards: str | None = None  # heads or positions: draws a world, runs on that many ranks


# Inputs x1, x3 and x5: attnspec's own weights then give logits of std about 0.3 (a nearly
# uniform softmax), 3 and 8 (peaked rows, where a kernel that returns the mean of v fails).
TRAINED = (1.0, 3.0, 5.0)


PROPERTIES: tuple[Property, ...] = (
    Property("width", check_width),
    Property("dtype", check_dtype),
    Property("divisibility", check_divisibility, invalid_configs=True),
    Property("causality", check_causality, uses_cuts=True),
    Property("prefix", check_prefix, uses_cuts=True, input_scales=TRAINED),
    Property("batch_independence", check_batch_independence, min_batch=2),
    Property("determinism", check_determinism),
    Property("input_unchanged", check_input_unchanged),
    Property("finite", check_finite, input_scales=(1.0, 4.0)),
    Property("oracle", check_oracle, needs_export=True, input_scales=TRAINED),
    Property("oracle_grad", check_oracle_grad, needs_export=True, input_scales=TRAINED),
    Property("grad_causality", check_grad_causality, uses_cuts=True),
    Property("device_agreement", check_device_agreement, needs_cuda=True,
             input_scales=TRAINED),
    Property("window", check_window, uses_cuts=True, needs_window=True, input_scales=TRAINED),
    Property("gqa_grouping", check_gqa_grouping, needs_export=True, needs_groups=True,
             input_scales=TRAINED),
    Property("decode", check_decode, uses_cuts=True, needs_hook="decode",
             input_scales=TRAINED),
    Property("padding_invariance", check_padding_invariance, needs_hook="padded",
             input_scales=TRAINED),
    Property("masked_rows", check_masked_rows, needs_hook="padded"),
    Property("causal_corner", check_causal_corner, needs_hook="cross", input_scales=TRAINED),
    Property("relative_position", check_relative_position, needs_hook="shifted",
             needs_rope=True, input_scales=TRAINED),
    Property("tp_equivalence", check_tp_equivalence, needs_hook="shard_heads", shards="heads",
             input_scales=TRAINED),
    Property("cp_equivalence", check_cp_equivalence, needs_hook="shard_positions",
             shards="positions", input_scales=TRAINED),
    Property("mixing", check_mixing, uses_cuts=True),
)


PROPERTY_IDS: tuple[str, ...] = tuple(p.id for p in PROPERTIES)


BY_ID: dict[str, Property] = {p.id: p for p in PROPERTIES}


# The properties whose self-comparisons are split between a worker and its twin.
TWINNED = frozenset({"causality", "batch_independence", "decode", "padding_invariance",
                     "masked_rows", "causal_corner", "relative_position", "mixing"})


def _fitted_scale(ctx: Context, ex: Example) -> tuple[Example, str | None]:
    """Inputs scaled up to trained logits, no further: where the subject's own weights (its
    export) already make logits spread wider than TRAINED_LOGIT_STD at the drawn scale, the
    scale comes down to where they spread that much (at least 1). A trained model's inputs
    are normalised; x5 on its weights is a softmax no trained model sees."""
    if ex.scale <= 1 or not _has_export(ctx):
        return ex, None
    own = _exported(ctx, ex)
    assert own is not None
    spread = logit_std(_inputs(ex), own, ex.attention)
    if not spread > TRAINED_LOGIT_STD:
        return ex, None
    fitted = max(1.0, ex.scale * math.sqrt(TRAINED_LOGIT_STD / spread))
    return dataclasses.replace(ex, scale=fitted), (
        f"inputs x{fitted:.3g} instead of x{ex.scale:g} where the subject's logits would spread "
        f"beyond std {TRAINED_LOGIT_STD:g} (trained size)")


def run_check(executor: Executor, prop: str, ex: Example,
              gangs: Callable[[int], Ranks] | None = None,
              twin: Callable[[], Executor | None] | None = None) -> Outcome:
    """Run one property on one example; the subject's faults become `error` outcomes. `twin`
    gives the second process the self-comparisons use (None: in process, no second one)."""
    ctx = Context(executor, gangs, twin)
    try:
        ex, note = _fitted_scale(ctx, ex)
        outcome = BY_ID[prop].check(ctx, ex)
        if note:
            outcome.notes.append(note)
    except SubjectFault as fault:
        outcome = Outcome("error", str(fault))
    except Unsupported as declined:
        outcome = Outcome("unsupported", str(declined))
    except Unfound as unfound:  # not the subject's fault, and no evidence: not an example
        outcome = Outcome("skip", str(unfound), notes=[str(unfound)])
    outcome.forwards = ctx.forwards
    return outcome
