"""Verdict assembly: what one property's run saw (`State`), why it stopped (`StopReason`), and
the `PropertyResult` made of them, with the coverage judge that makes a pass earned on
degenerate examples incomplete."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..common.report import PropertyResult
from ..properties.base import Example, Outcome
from ..properties.kernel import KernelExample
from ..runner.worker import SubjectCrash
from .coverage import _Coverage, _size
from .families import Family

AnyExample = Example | KernelExample
ReplayCommand = Callable[[str, AnyExample], str]

HALTED = "the run stopped at another property's failure (exitfirst) before its verdict"


class StopReason(enum.Enum):
    """Why one property's search ended (as Hypothesis' engine records its ExitReason)."""

    SKIPPED = "the subject has nothing for this property to check"
    CONTINUED = "its quick pass had run every example asked for"
    FINISHED = "every example asked for was run"  # or a failure, shrunk to Hypothesis' end
    FAILED = "a failure was found and shrunk"
    SHRINK_BUDGET = "shrinking's budget of examples or seconds was spent"
    CANNOT_SHRINK = "a timeout or a failed restart: smaller tries cannot help"
    HALTED = "another property's failure stopped the run (exitfirst)"
    FLAKY = "Hypothesis found the test flaky"
    UNSATISFIABLE = "no example could be drawn that the subject took"
    INTERRUPTED = "Ctrl-C"


@dataclass
class State:
    """What one property's run has seen so far, from which its `PropertyResult` is made."""

    examples: int = 0  # examples run (a skipped one does not count)
    reached: int = 0  # of those, examples in which the subject ran a request (its answers say)
    forwards: int = 0  # forward calls they made, for forwards_per_example
    failures: list[tuple[AnyExample, Outcome]] = field(default_factory=list)  # fails, errors
    last: tuple[AnyExample, Outcome] | None = None  # the failure reported: Hypothesis' last
    largest: tuple[AnyExample, Outcome] | None = None  # the largest measured violation
    crash: tuple[AnyExample, SubjectCrash] | None = None  # the smallest crash or timeout
    crashes: int = 0
    stop_shrinking: bool = False  # a timeout or a failed restart: smaller tries cannot help
    first_failure_at: float | None = None  # when shrinking began (its time budget)
    failed_after: int = 0  # examples run when it began (its example budget)
    skip: str | None = None  # why the subject skipped the property, if it did
    declined: int = 0  # drawn specs the subject's supports(spec) declined
    notes: set[str] = field(default_factory=set)
    drawn: _Coverage = field(default_factory=_Coverage)
    stop: StopReason | None = None  # why its search ended (None: not yet)

    def smallest_failure(self) -> None:
        """Report the smallest failure seen (a search cut short reports no shrunk last)."""
        if self.crash is None and self.failures:
            self.last = min(self.failures, key=lambda f: _size(f[0]))

    def reported(self) -> Outcome | None:
        """The outcome the result reports, if a failure (not a crash) is what it reports."""
        if self.crash is not None or not self.failures:
            return None
        return self.last[1] if self.last else min(self.failures, key=lambda f: _size(f[0]))[1]


def result_of(prop: str, state: State, seconds: float, family: Family,
              replay_command: ReplayCommand, unreached: Callable[[State], str]) -> PropertyResult:
    """The property's result from what its run saw: a crash, else the failure reported, else a
    skip, else (if the subject was reached) a pass."""
    notes = set(state.notes)
    if state.declined and state.examples:  # what the pass was not earned on
        notes.add(f"{family.supports} declined {state.declined} of the examples drawn")
    result = PropertyResult(id=prop, examples=state.examples, reached=state.reached,
                            seconds=round(seconds, 3), declined=state.declined,
                            notes=sorted(notes), drawn=state.drawn.to_json())
    if state.examples:
        result.forwards_per_example = round(state.forwards / state.examples, 2)
    if state.crash is not None:
        ex, crash = state.crash
        result.verdict, result.message = crash.kind, str(crash)
        rank = getattr(crash, "rank", None)
        if rank is not None:
            result.where = {"rank": rank}
        result.counterexample = ex.to_json()
        result.replay = replay_command(prop, ex)
        return result
    if state.failures:
        ex, outcome = state.last if state.last else min(
            state.failures, key=lambda f: _size(f[0]))
        result.verdict = outcome.kind
        result.message = outcome.message
        result.measured, result.allowed = outcome.measured, outcome.allowed
        result.where = outcome.where
        result.counterexample = ex.to_json()
        result.replay = replay_command(prop, ex)
        if state.largest is not None and state.largest[1] is not outcome \
                and state.largest[0] != ex:  # the same example again says nothing new
            big_ex, big = state.largest
            result.largest = {"measured": big.measured, "allowed": big.allowed,
                              "message": big.message, "example": big_ex.to_json(),
                              "replay": replay_command(prop, big_ex)}
        return result
    if state.skip is not None and state.examples == 0:
        result.verdict, result.message = "skip", state.skip
        return result
    if state.reached == 0:  # nothing the subject did was judged: not a pass
        result.verdict, result.message = "skip", unreached(state)
        return result
    result.verdict = "pass"
    return result


def judge_coverage(result: PropertyResult, state: State, total: int, family: Family,
                   dtypes: Mapping[str, Sequence[str]]) -> None:
    """A pass earned on degenerate examples, because the subject declined the others, is
    incomplete: fewer than half the examples asked for, only one-token calls, or (a kernel,
    whose supports(case) sees the dtype) fewer dtypes than the run checks. Without declines
    the draws are the run's own choice."""
    if result.verdict != "pass" or not state.declined:
        return
    which = family.supports
    drawn = state.drawn.to_json() or {}
    lead = f"{which} declined {state.declined} of {state.declined + state.examples} draws"
    lengths = [drawn[a] for a in family.length_axes if a in drawn]
    asked = sorted({d for dts in dtypes.values() for d in dts})
    reached = sorted(drawn.get("dtype", {}))
    why = None
    single = family.name == "module" and drawn.get("H") == [1, 1] and drawn.get("D") == [1, 1]
    if lengths and all(high <= 1 for _, high in lengths):
        axes = " = ".join(family.length_axes) + " = 1"
        why = f"{lead}: only {axes} was checked, where attention is one key's value"
    elif single:
        why = (f"{lead}: only H = 1 and D = 1 were checked (one head of one channel, where "
               "head splits, merges and scales cannot show)")
    elif state.examples < max(1, total // 2):
        why = (f"{lead}: only {state.examples} of the {total} examples asked for were "
               "checked")
    elif family.dtype_declinable and len(reached) < len(asked) \
            and state.examples >= 2 * len(asked):
        # Only a kernel's supports(case) sees the dtype: a module's supports(spec) cannot
        # decline one, so a dtype its accepted draws missed is the draws' own chance.
        why = (f"{lead}: only {', '.join(reached)} of {', '.join(asked)} was checked; "
               f"DTYPES = ({', '.join(f'torch.{d}' for d in reached)},) says so instead, "
               "and the header then shows it")
    if why is not None:
        result.verdict, result.message = "incomplete", (
            why if "DTYPES" in why else
            why + f"; {which} must accept what it implements, so that a pass covers it")


def unreached(state: State, family: Family, bounds: str) -> str:
    """Why a property whose examples never reached the subject has no verdict; `bounds`: the
    run's size bounds, as its options name them."""
    declined = (f"{family.supports} declined all {state.declined} {family.cases} drawn"
                if state.declined else "")
    if not state.examples:
        return declined or ("no example could be drawn for this property within this "
                            f"run's bounds ({bounds})")
    why = "; ".join(sorted(state.notes)) or "none asked the subject anything"
    return (f"none of its {state.examples} examples reached the subject: each ended before "
            f"calling it ({why})" + (f", and {declined}" if declined else ""))


def nothing_checked(target: str, results: Sequence[PropertyResult],
                    declined: Mapping[str, int]) -> str | None:
    """Why a run whose properties were all skipped checked nothing (None: it checked
    something, or something failed): such a run is the TARGET's or the options' error."""
    skipped = [p for p in results if p.verdict == "skip"]
    if not skipped or any(p.verdict not in ("skip", "not_run") for p in results):
        return None
    lead = ("every spec attnspec drew was declined by supports(spec)"
            if all(declined.get(p.id) for p in skipped)
            else "no property's examples reached the subject")
    reasons = "; ".join(f"{p.id}: {p.message}" for p in skipped)
    return f"TARGET {target!r}: nothing was checked: {lead} ({reasons})."


def cut_short(partial: PropertyResult, verdictless: bool, verdict: str, message: str,
              note: str) -> PropertyResult:
    """A pass stopped before its end: no verdict yet (`verdict`, `message`), or the failure it
    had found, with `note` saying its shrinking was cut short."""
    if verdictless:
        partial.verdict, partial.message = verdict, message
    else:
        partial.notes.append(note)
    return partial


def halted(partial: PropertyResult, state: State) -> PropertyResult:
    """What a pass stopped by another property's failure found: not a verdict, unless it
    had found a failure of its own (then that, not shrunk to the end)."""
    return cut_short(
        partial, state.crash is None and not state.failures,
        "not_run", f"{HALTED}; its pass had run {state.examples} examples without a "
        "failure", "stopped while shrinking, at another property's failure: a smaller "
        "counterexample may exist")
