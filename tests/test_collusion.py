"""Verdicts a subject cannot talk its way into: self-comparisons split between two processes
(so a subject that remembers what it saw cannot make both sides agree), non-finite outputs and
drifting weights named as such, sharded outputs judged against the reference on the exported
weights (so ranks and the unsharded run cannot agree on a wrong answer)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
from torch import Tensor, nn

import attnspec
from attnspec.properties import run_check
from attnspec.properties.base import Example, Outcome
from attnspec.runner.worker import InProcess
from attnspec.subjects import reference

HERE = Path(__file__).parent
FAULTY = HERE / "faulty"


def _faulty(name: str) -> ModuleType:
    sys.path.insert(0, str(FAULTY))
    try:
        spec = importlib.util.spec_from_file_location(f"_collusion_{name}", FAULTY / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(FAULTY))


memoises = _faulty("memoises")
EXAMPLE = Example(B=2, T=9, C=8, H=2, seed=3, cuts=(0, 3, 7))


def _apart(prop: str, memory: str, ex: Example = EXAMPLE) -> Outcome:
    """`prop` on two in-process executors, each with its own memory, as two workers have."""
    mine, theirs = InProcess(memoises.Memoiser(memory)), InProcess(memoises.Memoiser(memory))
    return run_check(mine, prop, ex, twin=lambda: theirs)


@pytest.mark.parametrize(("prop", "memory"), [("causality", "future"),
                                              ("batch_independence", "batch")])
def test_a_subject_that_replays_what_it_saw_fools_one_process_but_not_two(
        prop: str, memory: str) -> None:
    one = InProcess(memoises.Memoiser(memory))
    assert run_check(one, prop, EXAMPLE).kind == "pass"  # the double does fool one memory
    outcome = _apart(prop, memory)
    assert outcome.kind == "fail", outcome
    assert ("leaks into the past" if prop == "causality" else "must not interact") in \
        outcome.message


@pytest.mark.parametrize("prop", ["causality", "batch_independence"])
def test_an_honest_subject_costs_the_same_forwards_on_two_processes(prop: str) -> None:
    mine, theirs = InProcess("attnspec.subjects.reference"), InProcess(
        "attnspec.subjects.reference")
    outcome = run_check(mine, prop, EXAMPLE, twin=lambda: theirs)
    assert outcome.kind == "pass" and outcome.forwards == (2 if prop == "causality" else 3)


class AllNaN(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.inner = reference.build(n_embd, n_head)

    def forward(self, x: Tensor) -> Tensor:
        return self.inner(x) * float("nan")  # type: ignore[no-any-return]


@pytest.mark.parametrize("prop", ["causality", "batch_independence"])
def test_non_finite_outputs_are_no_pass_of_a_self_comparison(prop: str) -> None:
    nan = InProcess(SimpleNamespace(__name__="nan", build=AllNaN))
    outcome = run_check(nan, prop, EXAMPLE)
    assert outcome.kind == "error", outcome
    shape, count = ((6, 9, 8), 432) if prop == "causality" else ((2, 9, 8), 144)
    assert outcome.message == (f"forward gave {count} non-finite values in an output of shape "
                               f"{shape} (first nan at (B, T, C) index (0, 0, 0)) for finite "
                               f"input, so {prop} cannot compare its outputs (see finite)."), \
        outcome.message


@pytest.mark.parametrize(("variant", "prop", "verdict"), [
    ("build", "causality", "pass"),  # a fresh module's first call: the drift cannot show
    ("build", "batch_independence", "error"),
    ("shared", "causality", "error"),
    ("shared", "batch_independence", "error"),
])
def test_weights_that_drift_between_calls_are_not_called_a_leak(variant: str, prop: str,
                                                               verdict: str) -> None:
    drifts = InProcess(f"{FAULTY / 'drifts.py'}:{variant}")
    outcome = run_check(drifts, prop, EXAMPLE)
    assert outcome.kind == verdict, outcome
    assert "leaks" not in outcome.message and "must not interact" not in outcome.message
    if verdict == "error":
        assert "the outputs differ between identical calls, so " \
            f"{prop} cannot tell a leak from that (see determinism)." in outcome.message
    assert run_check(drifts, "determinism", EXAMPLE).kind == "fail"


@pytest.mark.slow
def test_a_memoising_subject_fails_where_it_passed_in_one_worker() -> None:
    # Its cache lives in its process: only a second worker holds inputs it never saw. Its leak
    # is the batch's mean, which moved rows also change: causality sees it as well.
    report = attnspec.verify(f"{FAULTY / 'memoises.py'}:across_batch",
                             only="causality,batch_independence",
                             max_examples=5, seed=1, database=False)
    assert report.result("causality").verdict == "fail", report.summary()
    assert "a future token leaks into the past" in report.result("causality").message
    assert report.result("batch_independence").verdict == "fail", report.summary()
    assert "batch rows must not interact" in report.result("batch_independence").message


@pytest.mark.slow
def test_ranks_that_collude_with_the_unsharded_run_fail_against_the_exported_weights(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNSPEC_TEST_COLLUDE", str(tmp_path))
    report = attnspec.verify(str(FAULTY / "colludes.py"), only="oracle,tp_equivalence",
                             max_examples=2, seed=1, dtypes=["float32"], world_sizes=(2,),
                             database=False)
    assert report.result("oracle").verdict == "pass", report.summary()  # no rank alive yet
    result = report.result("tp_equivalence")
    assert result.verdict == "fail", report.summary()
    assert "differs from the reference on the subject's exported weights" in result.message
    assert "though it matches the unsharded module's run made beside the ranks" in \
        result.message


def test_a_hook_that_replays_forward_fools_one_process_but_not_two() -> None:
    from attnspec import AttentionSpec, RoPE

    spec = AttentionSpec(8, 2, positions=RoPE())
    ex = Example(B=1, T=5, C=8, H=2, seed=2, spec=spec)
    one = InProcess(memoises.HookMemoiser())
    assert run_check(one, "relative_position", ex).kind == "pass"
    theirs = InProcess(memoises.HookMemoiser())
    outcome = run_check(InProcess(memoises.HookMemoiser()), "relative_position", ex,
                        twin=lambda: theirs)
    assert outcome.kind == "fail" and "must change nothing" in outcome.message, outcome


def test_what_the_twin_saw_in_one_property_does_not_fool_another() -> None:
    # batch_independence's changed batches hold rows of its x; causality's x is another one,
    # so a twin that remembers them has nothing to replay in causality, same seed and shape.
    mine, theirs = InProcess(memoises.Memoiser("future")), InProcess(memoises.Memoiser("future"))
    run_check(mine, "batch_independence", EXAMPLE, twin=lambda: theirs)
    outcome = run_check(mine, "causality", EXAMPLE, twin=lambda: theirs)
    assert outcome.kind == "fail" and "leaks into the past" in outcome.message, outcome


@pytest.mark.slow
def test_the_quick_pass_starts_no_twin_and_the_full_pass_does() -> None:
    # A rejection in verify's quick pass costs no second worker (1.7 s of CPU on 2 cores).
    from attnspec.common.options import RunOptions
    from attnspec.session.engine import Session

    with Session("attnspec.subjects.reference", RunOptions(database=False, seed=1)) as session:
        assert session.run("causality", max_examples=3, stream="quick").verdict == "pass"
        assert session.workers.twin_loading is None and session.workers.twin is None
        assert session.run("causality", max_examples=4).verdict == "pass"
        assert session.workers.twin_loading is not None  # started (it loads in a thread)
