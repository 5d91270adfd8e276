"""The shape trace and the `attnspec trace` command."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch

import attnspec
from attnspec import DivisibilityError
from attnspec.frontends.cli import _build_parser, _spec_of, main
from attnspec.reference.trace import STAGES

TABLE_12_3 = """\
n_embd (C) = 12, n_head (H) = 3, head_dim (D) = C / H = 4

stage              axes     shape
input              B T C    (2, 5, 12)    residual stream
projection         B T C    (2, 5, 12)    q, k, v each
head split         B H T D  (2, 3, 5, 4)  B T (H D) -> B H T D
scores             B H T T  (2, 3, 5, 5)  q @ k^T / sqrt(D), causally masked
weights            B H T T  (2, 3, 5, 5)  softmax over keys
attend             B H T D  (2, 3, 5, 4)  weights @ v
merge              B T C    (2, 5, 12)    B H T D -> B T (H D)
output projection  B T C    (2, 5, 12)    back to residual width"""

# docs/design.md's pipeline table, row by row: (stage name in the trace, its axes).
DESIGN_STAGES = [
    ("input", "B T C"),  # input (residual stream)
    ("projection", "B T C"),  # q/k/v projection
    ("head split", "B H T D"),  # head split
    ("scores", "B H T T"),  # attention scores, causally masked
    ("weights", "B H T T"),  # attention weights (softmax over keys)
    ("attend", "B H T D"),  # attend (weights @ v)
    ("merge", "B T C"),  # merge heads (transpose, then concatenate)
    ("output projection", "B T C"),  # output projection
]

DIVISIBILITY_LINE = (
    "attnspec trace: error: Invalid attention configuration (n_embd=10, n_head=3): n_embd must "
    "be divisible by n_head, but head_dim would be 10/3 = 3.333, not a whole number. Head "
    "counts that divide n_embd=10: 1, 2, 5, 10.\n"
)


def expected_shapes(B: int, T: int, C: int, H: int) -> dict[str, tuple[int, ...]]:
    D = C // H
    return {"input": (B, T, C), "projection": (B, T, C), "head split": (B, H, T, D),
            "scores": (B, H, T, T), "weights": (B, H, T, T), "attend": (B, H, T, D),
            "merge": (B, T, C), "output projection": (B, T, C)}


def test_trace_table_of_the_lesson() -> None:
    table = str(attnspec.trace(12, 3, batch=2, seq=5))
    assert table == TABLE_12_3, (
        f"str(trace(12, 3, batch=2, seq=5)) was\n{table}\n\nbut should be\n{TABLE_12_3}"
    )


@pytest.mark.parametrize("kernel", ["explicit", "sdpa"])
def test_trace_stages_follow_designs_pipeline_in_order(kernel: str) -> None:
    trace = attnspec.trace(12, 3, kernel=kernel)  # type: ignore[arg-type]
    got = [(s.name, s.labels) for s in trace.stages]
    assert got == DESIGN_STAGES, (
        f"stages (name, axes)={got}, but docs/design.md says {DESIGN_STAGES}")
    assert list(STAGES) == DESIGN_STAGES, (
        f"STAGES={STAGES}, but docs/design.md says {DESIGN_STAGES}")


@pytest.mark.parametrize("kernel", ["explicit", "sdpa"])
@pytest.mark.parametrize("n_head", attnspec.divisors(12))
def test_trace_shapes_for_every_divisor_of_12(n_head: int, kernel: str) -> None:
    trace = attnspec.trace(12, n_head, batch=3, seq=4, kernel=kernel)  # type: ignore[arg-type]
    got = {s.name: s.shape for s in trace.stages}
    expected = expected_shapes(3, 4, 12, n_head)
    assert got == expected, f"trace(12, {n_head}, batch=3, seq=4) shapes={got}, not {expected}"


def test_unknown_stage_raises_key_error_listing_the_stages() -> None:
    trace = attnspec.trace(12, 3)
    with pytest.raises(KeyError) as info:
        trace.shape("nope")
    expected = ("No stage 'nope' in this trace; recorded: input, projection, head split, scores, "
                "weights, attend, merge, output projection.")
    assert info.value.args == (expected,), f"KeyError said {info.value.args}, not {expected!r}"


def test_sdpa_trace_marks_scores_and_weights_as_fused() -> None:
    trace = attnspec.trace(12, 3, kernel="sdpa")
    notes = {s.name: s.note for s in trace.stages}
    for name in ("scores", "weights"):
        assert notes[name] == "fused inside sdpa (not materialised)", (
            f"kernel='sdpa' trace note for {name} is {notes[name]!r}; sdpa never builds it"
        )
    assert "fused inside sdpa (not materialised)" in str(trace), "the table hides the fusion"


def test_trace_rejects_an_indivisible_configuration() -> None:
    with pytest.raises(DivisibilityError) as info:
        attnspec.trace(10, 3)
    assert str(info.value) == DIVISIBILITY_LINE.removeprefix("attnspec trace: error: ").strip(), (
        f"trace(10, 3) said {info.value}"
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"seq": 0}, "trace(n_embd=12, n_head=3): seq=0; seq must be an int >= 1."),
     ({"batch": True}, "trace(n_embd=12, n_head=3): batch=True; batch must be an int >= 1.")],
)
def test_trace_rejects_bad_batch_or_seq(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as info:
        attnspec.trace(12, 3, **kwargs)  # type: ignore[arg-type]
    assert str(info.value) == message, f"trace(12, 3, **{kwargs}) said {info.value!r}"


def test_trace_leaves_the_global_random_state_alone() -> None:
    before = torch.random.get_rng_state()
    attnspec.trace(12, 3, seed=7)
    assert torch.equal(torch.random.get_rng_state(), before), (
        "trace() changed torch's global random state; it should use its own seed only"
    )


def test_cli_trace_prints_the_lessons_table(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["trace", "--n-embd", "12", "--n-head", "3", "--batch", "2", "--seq", "5"])
    out, err = capsys.readouterr()
    assert code == 0, f"attnspec trace exited {code}; stderr: {err}"
    assert out == TABLE_12_3 + "\n", f"attnspec trace printed\n{out}\nnot\n{TABLE_12_3}"


@pytest.mark.parametrize("n_head", [4, 6])
def test_cli_trace_with_another_divisor_keeps_the_residual_shape(
    n_head: int, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["trace", "--n-head", str(n_head)])
    out, err = capsys.readouterr()
    D = 12 // n_head
    assert code == 0, f"attnspec trace --n-head {n_head} exited {code}; stderr: {err}"
    lines = out.splitlines()
    assert lines[0] == f"n_embd (C) = 12, n_head (H) = {n_head}, head_dim (D) = C / H = {D}", (
        f"header line was {lines[0]!r}"
    )
    # Columns are separated by two or more spaces: stage, axes, shape, note.
    rows = {cells[0]: cells[2] for cells in (re.split(r" {2,}", line) for line in lines[3:])}
    expected = {name: str(shape) for name, shape in expected_shapes(2, 5, 12, n_head).items()}
    assert rows == expected, f"attnspec trace --n-head {n_head} shapes={rows}, not {expected}"


def test_cli_indivisible_configuration_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["trace", "--n-embd", "10", "--n-head", "3"])
    out, err = capsys.readouterr()
    assert code == 2, f"attnspec trace --n-embd 10 --n-head 3 exited {code}, not 2"
    assert err == DIVISIBILITY_LINE, f"stderr was\n{err}\nnot the one line\n{DIVISIBILITY_LINE}"
    assert out == "", f"nothing should go to stdout, got {out!r}"


def test_cli_seq_zero_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["trace", "--seq", "0"])
    err = capsys.readouterr().err
    assert info.value.code == 2, f"attnspec trace --seq 0 exited {info.value.code}, not 2"
    last = "attnspec trace: error: argument --seq: expected a whole number >= 1, got 0"
    assert err.splitlines()[-1] == last, f"stderr ended {err.splitlines()[-1:]}, not {last!r}"
    assert "Traceback" not in err, f"a usage error should not print a traceback: {err}"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ATTNSPEC_TYPECHECK"}
    return subprocess.run([sys.executable, "-m", "attnspec", *args], capture_output=True,
                          text=True, env=env, timeout=120, check=False)


def test_python_m_attnspec_trace_prints_the_table() -> None:
    result = run_cli("trace", "--n-embd", "12", "--n-head", "3")
    assert result.returncode == 0, f"python -m attnspec trace exited {result.returncode}: " + (
        result.stderr[-2000:])
    assert result.stdout == TABLE_12_3 + "\n", f"python -m attnspec trace printed\n{result.stdout}"


def test_python_m_attnspec_trace_indivisible_prints_no_traceback() -> None:
    result = run_cli("trace", "--n-embd", "10", "--n-head", "3")
    assert result.returncode == 2, f"exited {result.returncode}, not 2; stderr: {result.stderr}"
    assert result.stderr == DIVISIBILITY_LINE, (
        f"stderr was\n{result.stderr}\nnot the one line\n{DIVISIBILITY_LINE}"
    )


# Protocol v2 specs: trace(spec=...) traces SpecAttention; the CLI's spec options describe one.

GQA = attnspec.AttentionSpec(n_embd=12, n_head=4, n_kv_head=2)


def test_trace_of_a_gqa_spec_shows_the_kv_heads_and_their_sharing() -> None:
    trace = attnspec.trace(spec=GQA, batch=2, seq=5)
    got = [(s.name, s.labels, s.shape) for s in trace.stages]
    # H = 4 query heads of D = 3 read G = 2 kv heads, each shared by H / G = 2 of them.
    expected = [("input", "B T C", (2, 5, 12)), ("projection", "B T H*D", (2, 5, 12)),
                ("head split", "B H T D", (2, 4, 5, 3)), ("kv heads", "B G T D", (2, 2, 5, 3)),
                ("shared kv", "B H T D", (2, 4, 5, 3)), ("scores", "B H T T", (2, 4, 5, 5)),
                ("weights", "B H T T", (2, 4, 5, 5)), ("attend", "B H T D", (2, 4, 5, 3)),
                ("merge", "B T H*D", (2, 5, 12)), ("output projection", "B T C", (2, 5, 12))]
    assert got == expected, f"trace(spec={GQA}) stages={got}, not {expected}"
    assert str(trace).splitlines()[0] == "spec: C=12, H=4, n_kv_head=2", str(trace)


def test_trace_of_a_spec_accepts_matching_n_embd_and_n_head() -> None:
    alone = attnspec.trace(spec=GQA, seed=3)
    repeated = attnspec.trace(12, 4, spec=GQA, seed=3)
    assert alone == repeated, f"trace(12, 4, spec=...) gave\n{repeated}\nnot\n{alone}"


@pytest.mark.parametrize(
    ("args", "message"),
    [((16, None), "trace(n_embd=16, n_head=None, spec=AttentionSpec(n_embd=12, n_head=4, "
                  "n_kv_head=2)): n_embd=16 disagrees with the spec's n_embd=12. Give the spec "
                  "alone (it carries n_embd and n_head), or values that match it."),
     ((12, 3), "trace(n_embd=12, n_head=3, spec=AttentionSpec(n_embd=12, n_head=4, "
               "n_kv_head=2)): n_head=3 disagrees with the spec's n_head=4. Give the spec alone "
               "(it carries n_embd and n_head), or values that match it.")],
)
def test_trace_rejects_n_embd_or_n_head_that_contradict_the_spec(
    args: tuple[int, int | None], message: str
) -> None:
    with pytest.raises(attnspec.UsageError) as info:
        attnspec.trace(*args, spec=GQA)
    assert str(info.value) == message, f"trace{args} with spec= said {info.value}"


def test_trace_without_a_configuration_says_what_to_give() -> None:
    with pytest.raises(attnspec.UsageError) as info:
        attnspec.trace(12)
    assert str(info.value) == ("trace(n_embd=12, n_head=None): give both n_embd (C) and n_head "
                               "(H), or spec=attnspec.AttentionSpec(...).")


def test_trace_of_a_spec_names_it_in_errors_and_refuses_sdpa() -> None:
    with pytest.raises(ValueError, match=r"^trace\(spec=AttentionSpec\(n_embd=12, n_head=4, "
                                         r"n_kv_head=2\)\): seq=0; seq must be an int >= 1\.$"):
        attnspec.trace(spec=GQA, seq=0)
    with pytest.raises(attnspec.UsageError, match="kernel='sdpa'; a spec is traced by "
                                                  "SpecAttention, which has the explicit math"):
        attnspec.trace(spec=GQA, kernel="sdpa")


@pytest.mark.parametrize(
    ("argv", "spec"),
    [([], None),
     (["--kv-heads", "1"], attnspec.AttentionSpec(12, 3, n_kv_head=1)),
     (["--n-embd", "16", "--n-head", "4", "--kv-heads", "2", "--head-dim", "6", "--window", "3",
       "--rope"], attnspec.AttentionSpec(16, 4, n_kv_head=2, head_dim=6, window=3,
                                         positions=attnspec.RoPE())),
     (["--rope-interleaved"], attnspec.AttentionSpec(
         12, 3, positions=attnspec.RoPE(interleaved=True))),
     (["--alibi", "--window", "2"], attnspec.AttentionSpec(12, 3, window=2,
                                                           positions=attnspec.ALiBi()))],
)
@pytest.mark.parametrize("command", ["trace", "plot"])
def test_cli_spec_options_round_trip_to_the_spec(
    command: str, argv: list[str], spec: attnspec.AttentionSpec | None
) -> None:
    args = _build_parser().parse_args([command, *argv])
    assert _spec_of(args) == spec, f"attnspec {command} {' '.join(argv)} -> {_spec_of(args)}"


def test_cli_trace_with_spec_options_traces_that_spec(
    capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["trace", "--n-head", "4", "--kv-heads", "2", "--batch", "2", "--seq", "5"])
    out, err = capsys.readouterr()
    assert code == 0, f"attnspec trace --n-head 4 --kv-heads 2 exited {code}; stderr: {err}"
    assert out == str(attnspec.trace(spec=GQA)) + "\n", f"it printed\n{out}"


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--kv-heads", "2"], "Invalid attention spec (n_embd=12, n_head=3, n_kv_head=2): n_head "
      "must be divisible by n_kv_head, since each key/value head serves n_head / n_kv_head query "
      "heads, and 3/2 is not a whole number. n_kv_head values that divide n_head=3: 1, 3."),
     (["--window", "0"], "Invalid attention configuration: window=0; window must be >= 1."),
     (["--n-head", "4", "--rope"], "Invalid attention spec (n_embd=12, n_head=4, head_dim=3, "
      "RoPE fraction=1.0): RoPE rotates channel pairs, so int(head_dim * fraction) = 3 must be "
      "even and >= 2; D=3 has no even number of channels >= 2 to rotate."),
     (["--kernel", "sdpa", "--alibi"], "--kernel sdpa: the spec options (--kv-heads, --head-dim, "
      "--window, --rope, --rope-interleaved, --alibi) trace SpecAttention, which has the "
      "explicit math only; drop one or the other.")],
)
def test_cli_impossible_spec_exits_2_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["trace", *argv])
    out, err = capsys.readouterr()
    assert code == 2, f"attnspec trace {' '.join(argv)} exited {code}, not 2"
    assert err == f"attnspec trace: error: {message}\n", f"stderr was\n{err}"
    assert out == "", f"nothing should go to stdout, got {out!r}"


@pytest.mark.parametrize(
    ("argv", "last"),
    [(["--rope", "--alibi"], "argument --alibi: not allowed with argument --rope"),
     (["--kv-heads", "two"], "argument --kv-heads: invalid int value: 'two'")],
)
def test_cli_malformed_spec_options_exit_2(
    argv: list[str], last: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["trace", *argv])
    err = capsys.readouterr().err
    assert info.value.code == 2, f"attnspec trace {' '.join(argv)} exited {info.value.code}"
    assert err.splitlines()[-1] == f"attnspec trace: error: {last}", f"stderr: {err}"
