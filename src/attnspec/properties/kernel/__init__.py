"""The kernel properties: q, k, v -> o (and the LSE), judged in the runner against the core.

A kernel example is its sizes (B, H, G, Tq, Tk, D), dtype, device, seed, input scale and what
the call uses (causal, scale, window, soft cap, ALiBi, sinks, varlen lengths). A check draws
q, k, v (float64 N(0, 1) values from a per-process pool x scale, cast to the dtype), converts
them to the kernel's declared layout, asks the worker for the kernel's outputs and converts
those back: everything is compared in the reference's layout, o `"B H Tq D"` and the LSE
`"B H Tq"` in natural log.

Exact comparisons only between identical calls (same shapes, same positions), with the
kernel's own jitter (two identical calls) as the allowance; everything else is the rule of
docs/design.md section 5 against a float64 golden, the yardstick the larger error of two fair
computations in the dtype (the core, and the core with the scale folded into q).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ...reference import conventions as conv
from .. import tolerance as tol
from ..base import Context, Outcome, SubjectFault, Unsupported
from .cache import check_kv_append, check_paged
from .checks import (
    RACE,
    Check,
    _oracle_outcome,
    check_batch_independence,
    check_causality,
    check_determinism,
    check_dtype,
    check_finite,
    check_fresh_results,
    check_gqa_grouping,
    check_input_unchanged,
    check_knobs,
    check_lse_grad,
    check_masked_rows,
    check_oracle,
    check_oracle_grad,
    check_sensitivity,
    check_varlen,
    check_width,
    check_window,
)
from .example import KernelExample, inputs, reference, sink_logits, slopes
from .harness import Kernel
from .judging import _at, _judgeable

__all__ = ["KERNEL_BY_ID", "KERNEL_PROPERTIES", "KERNEL_PROPERTY_IDS", "KERNEL_TWINNED", "RACE",
           "KernelExample", "KernelProperty", "first_call", "inputs", "layout_hint", "reference",
           "run_kernel_check", "sink_logits", "skip_reason", "slopes"]


# ---- the catalogue ---------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelProperty:
    """One kernel property: its id, its check, what its examples need."""

    id: str
    check: Check
    input_scales: tuple[float, ...] = (1.0,)
    needs: tuple[str, ...] = ()  # backward, lse, window, gqa, masked_rows, varlen, knobs,
    # cache, paged
    min_batch: int = 1
    cuts: bool = False


# Inputs x1, x2, x3: logits of std about 1, 4 and 9 (q.k/sqrt(D) of randn x s has std s^2), so
# peaked rows where a kernel that returns the mean of v, or rescales wrongly, fails.
KERNEL_TRAINED = (1.0, 2.0, 3.0)

KERNEL_PROPERTIES: tuple[KernelProperty, ...] = (
    KernelProperty("width", check_width),
    KernelProperty("dtype", check_dtype),
    KernelProperty("causality", check_causality, cuts=True),
    KernelProperty("batch_independence", check_batch_independence, min_batch=2),
    KernelProperty("determinism", check_determinism),
    KernelProperty("input_unchanged", check_input_unchanged),
    # x8: logits past 88 in most examples (a softmax without its row max overflows there)
    KernelProperty("finite", check_finite, input_scales=(1.0, 4.0, 8.0)),
    KernelProperty("oracle", check_oracle, input_scales=KERNEL_TRAINED),
    KernelProperty("oracle_grad", check_oracle_grad, input_scales=KERNEL_TRAINED,
                   needs=("backward",)),
    KernelProperty("window", check_window, needs=("window",), cuts=True),
    KernelProperty("gqa_grouping", check_gqa_grouping, needs=("gqa",)),
    KernelProperty("masked_rows", check_masked_rows, needs=("masked_rows",)),
    KernelProperty("varlen", check_varlen, input_scales=KERNEL_TRAINED, needs=("varlen",)),
    KernelProperty("paged", check_paged, input_scales=(1.0, 2.0), needs=("cache", "paged")),
    KernelProperty("kv_append", check_kv_append, input_scales=(1.0, 2.0), needs=("cache",)),
    KernelProperty("knobs", check_knobs, input_scales=KERNEL_TRAINED, needs=("knobs",)),
    KernelProperty("lse_grad", check_lse_grad, needs=("lse", "backward", "lse_grad")),
    KernelProperty("sensitivity", check_sensitivity),
    KernelProperty("fresh_results", check_fresh_results, input_scales=KERNEL_TRAINED),
)
KERNEL_PROPERTY_IDS: tuple[str, ...] = tuple(p.id for p in KERNEL_PROPERTIES)
KERNEL_BY_ID: dict[str, KernelProperty] = {p.id: p for p in KERNEL_PROPERTIES}
# The self-comparisons whose two sides run in two processes.
KERNEL_TWINNED = frozenset({"causality", "batch_independence", "window", "gqa_grouping"})


def skip_reason(prop: KernelProperty, c: conv.KernelConventions) -> str | None:
    """Why a kernel with conventions `c` has nothing for `prop` to check (None: it has)."""
    for need in prop.needs:
        if need == "backward" and not c.backward:
            return "the kernel declares no backward (BACKWARD = False)"
        if need == "lse" and c.lse is None:
            return "the kernel returns no LSE (LSE = None)"
        if need == "lse_grad" and not c.lse_grad:
            return ("the kernel's LSE carries no gradient (LSE_GRAD = False, as FlashAttention "
                    "2 and 3 and xformers return it)")
        if need == "window" and c.window is None:
            return "the kernel takes no window (WINDOW = None)"
        if need == "gqa" and not c.has("gqa"):
            return "the kernel takes no grouped kv heads ('gqa' is not in FEATURES)"
        if need == "varlen" and c.layout != "varlen":
            return f"the kernel's LAYOUT is {c.layout!r}, not 'varlen'"
        if need == "cache" and not c.cache:
            return ("the kernel defines no attention_with_cache(q, k_cache, v_cache, *, "
                    "cache_seqlens, causal, ...)")
        if need == "paged" and c.paged is None:
            return "the kernel declares no paged cache (PAGED = None)"
        if need == "knobs" and not c.knobs:
            return "the kernel declares no scheduling knobs (KNOBS)"
        if need == "masked_rows":
            if c.masked_rows != "zero":
                return "the kernel leaves rows without keys undefined (MASKED_ROWS)"
            if c.causal == "top_left" and not c.has("cross") and c.window is None:
                return ("with CAUSAL = 'top_left' every query sees key 0: no row without keys "
                        "can be drawn ('cross' for Tk = 0, or a WINDOW, would make them)")
            if c.causal == "bottom_right" and not c.has("cross") and c.window is None:
                return ("without 'cross' (Tq > Tk) or a WINDOW, every query sees a key")
    return None


def run_kernel_check(ctx: Context, prop: str, ex: KernelExample,
                     conventions: conv.KernelConventions) -> Outcome:
    """One kernel property on one example; the subject's faults become `error` outcomes."""
    try:
        outcome = KERNEL_BY_ID[prop].check(Kernel(ctx, ex, conventions))
    except SubjectFault as fault:
        outcome = Outcome("error", str(fault))
    except Unsupported as declined:
        outcome = Outcome("unsupported", str(declined))
    outcome.forwards = ctx.forwards
    return outcome


def first_call(ctx: Context, c: conv.KernelConventions, device: str,
               dtype: str) -> str | None:
    """The first call of a fresh worker (the load's, before any property's) against the same
    call made again at once: a kernel wrong only on its first call (a workspace read before it
    is written, a warm-up with other constants) is found here, where a harness that warms up
    first never looks. What differs, in one line, for determinism to report (None: the same)."""
    if c.layout == "varlen":
        return None  # its calls need lengths drawn; left to the properties' own calls
    ex = KernelExample(B=2, H=3, G=3, Tq=5, Tk=5, D=4, dtype=dtype, device=device, seed=0)
    q, k, v = inputs(ex)
    kern = Kernel(ctx, ex, c)
    try:
        cold, warm = kern.run([kern.step(q, k, v), kern.step(q, k, v)])
    except (SubjectFault, Unsupported):
        return None  # the properties say what is wrong, each with its example
    a, b = cold.get("o"), warm.get("o")
    if a is None or b is None or a.shape != b.shape:
        return None
    err, index = tol.max_abs_diff(a.masked_fill(~_judgeable(ex, c), 0.0),
                                  b.masked_fill(~_judgeable(ex, c), 0.0))
    wrong = _oracle_outcome(kern, cold, q, k, v)
    if wrong is None or _oracle_outcome(kern, warm, q, k, v) is not None or not err > 0:
        return None  # right first, or as wrong the second time: the properties judge that
    return (f"the first call of a fresh worker (attnspec's own, as the subject loaded: q, k, v "
            f"{tuple(q.shape)} {dtype} on {device}, seed 0) gave o {err:.3g} away from the "
            f"same call made again at once{_at(index)}, and only the second is the reference's "
            f"({wrong.message}): the kernel's first call is wrong (a workspace read before it "
            "is written, a warm-up that changes what it computes)")


def layout_hint(ctx: Context, c: conv.KernelConventions, device: str,
                dtype: str) -> str | None:
    """A one-line hint where a kernel declared (or left) LAYOUT = "bhsd" reads its inputs as
    (B, T, H, D): one probe call, whose output then matches the reference on the inputs with
    their head and position axes swapped (None: it does not, or the probe did not run)."""
    if c.layout != "bhsd":
        return None
    ex = KernelExample(B=2, H=3, G=3, Tq=5, Tk=5, D=4, dtype=dtype, device=device, seed=0)
    q, k, v = inputs(ex)
    kern = Kernel(ctx, ex, c)
    try:
        (got,) = kern.run([kern.step(q, k, v)])
    except (SubjectFault, Unsupported):
        return None  # the properties say what is wrong, each with its example
    if got["o"] is None or tuple(got["o"].shape) != (ex.B, ex.H, ex.Tq, ex.D):
        return None
    if _oracle_outcome(kern, got, q, k, v) is None:
        return None
    swapped = dataclasses.replace(ex, H=ex.Tq, G=ex.Tq, Tq=ex.H, Tk=ex.H)
    qs, ks, vs = (t.transpose(1, 2) for t in (q, k, v))
    as_bshd = reference(swapped, qs, ks, vs, c.causal)[0]
    err = float((got["o"].double() - as_bshd.transpose(1, 2)).abs().max())
    if not err <= tol.allowed(0.0, dtype, float(as_bshd.abs().max())):
        return None
    return (f"the kernel reads q, k and v as (B, T, H, D), but LAYOUT is \"bhsd\" (B, H, T, D, "
            f"the default): on q {tuple(q.shape)} its output is the reference's with the head and "
            "position axes swapped; declare LAYOUT = \"bshd\"")
