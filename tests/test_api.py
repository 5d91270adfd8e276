"""The public API is small and pinned; the three front ends (API, CLI, pytest suite) agree."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

import attnspec
from attnspec.common.report import progress_printer

ROOT = Path(__file__).parent.parent

PUBLIC = [
    "ALiBi", "AttentionConfig", "AttentionSpec", "AttentionWeights", "AttnspecError",
    "CausalSelfAttention", "ConfigError", "DivisibilityError", "DynamicNTK", "HeadTensor",
    "KERNEL_PROPERTIES", "LinearScaling", "Llama3Scaling", "PROPERTIES", "QKNorm", "Report",
    "Residual", "RoPE",
    "ShapeError", "ShapeTrace", "ShardError", "SpecAttention", "TargetError", "UsageError",
    "YaRN", "check_shardable", "divisors", "kernel_attention", "plot_heads",
    "shard_positions_of", "trace", "typecheck_enabled", "verify", "verify_many",
]


def test_public_api_is_pinned() -> None:
    # Submodules (attnspec.subjects once imported) are not names the package defines.
    eager = {n for n, v in vars(attnspec).items() if not n.startswith("_")
             and n not in ("annotations", "TYPE_CHECKING", "Any", "importlib")
             and not isinstance(v, types.ModuleType)}
    assert sorted(eager | set(attnspec._LAZY)) == PUBLIC
    assert sorted(n for n in dir(attnspec) if not n.startswith("_") and n in PUBLIC) == PUBLIC
    for name in PUBLIC:
        assert getattr(attnspec, name) is not None
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        attnspec.nope  # noqa: B018


STRATEGIES = [
    "KernelCase", "PaddedBatch", "StrategyError", "batch_sizes", "configs", "cut_points",
    "head_dims", "inputs", "invalid_configs", "kernel_cases", "kernel_lengths",
    "padded_batches", "seq_lengths", "specs",
]


def test_the_strategies_module_is_pinned() -> None:
    import inspect

    from attnspec import strategies

    assert sorted(strategies.__all__) == STRATEGIES
    public = {n for n, v in vars(strategies).items() if not n.startswith("_")
              and n != "annotations" and not isinstance(v, types.ModuleType)}
    assert public == set(STRATEGIES)
    for name in STRATEGIES:  # documented, and (the functions) keyword-only, like Hypothesis's
        value = getattr(strategies, name)
        assert value.__doc__ and value.__module__.startswith("attnspec."), name
        if inspect.isfunction(value):
            kinds = {p.kind for p in inspect.signature(value).parameters.values()}
            assert kinds <= {inspect.Parameter.KEYWORD_ONLY}, name
            assert ">>> " in value.__doc__, f"{name}'s docstring has no example"


def test_builtin_subjects_are_pinned() -> None:
    from attnspec import subjects

    assert subjects.BUILTIN == ("reference", "reference_sdpa", "torch_mha", "sdpa", "hf_gpt2",
                                "variants", "hf_llama", "hf_mistral", "hf_bloom",
                                "sdpa_lower_right", "reference_tp", "reference_ring")
    assert subjects.KERNEL_BUILTIN == ("kernel_sdpa", "kernel_sdpa_lower_right", "kernel_flex",
                                       "kernel_blockwise")


def test_kernel_property_ids_are_pinned() -> None:
    from attnspec.properties.kernel import KERNEL_PROPERTY_IDS

    assert attnspec.KERNEL_PROPERTIES == KERNEL_PROPERTY_IDS == (
        "width", "dtype", "causality", "batch_independence", "determinism", "input_unchanged",
        "finite", "oracle", "oracle_grad", "window", "gqa_grouping", "masked_rows", "varlen",
        "paged", "kv_append", "knobs", "lse_grad", "sensitivity", "fresh_results")


def test_property_ids_are_designs_contract() -> None:
    assert attnspec.PROPERTIES == (
        "width", "dtype", "divisibility", "causality", "prefix", "batch_independence",
        "determinism", "input_unchanged", "finite", "oracle", "oracle_grad", "grad_causality",
        "device_agreement", "window", "gqa_grouping", "decode", "padding_invariance",
        "masked_rows", "causal_corner", "relative_position", "tp_equivalence", "cp_equivalence",
        "mixing")


def test_verify_accepts_a_module_object_in_process() -> None:
    from attnspec.subjects import sdpa

    report = attnspec.verify(sdpa, max_examples=5, seed=0, database=False,
                             only="width,oracle")
    assert report.ok, report.summary()
    assert report.header["isolated"] is False


def test_report_says_what_the_examples_covered() -> None:
    from attnspec.subjects import sdpa

    report = attnspec.verify(sdpa, max_examples=40, seed=0, database=False,
                             only="width,divisibility", dtypes=("float32", "bfloat16"))
    width = report.to_json()["properties"][0]["drawn"]
    assert sum(width["dtype"].values()) == width["device"]["cpu"] == 40
    assert set(width["dtype"]) == {"float32", "bfloat16"}
    assert 1 <= width["T"][0] < width["T"][1] <= 64
    assert 1 < width["shapes"] <= 40
    divisibility = report.result("divisibility").drawn
    assert divisibility is not None and "dtype" not in divisibility  # no tensor runs there


def test_unknown_options_are_usage_errors() -> None:
    with pytest.raises(attnspec.UsageError, match="only='nope': unknown property id 'nope'"):
        attnspec.verify("attnspec.subjects.reference", only="nope")
    with pytest.raises(attnspec.UsageError, match="profile='fast': choose from"):
        attnspec.verify("attnspec.subjects.reference", profile="fast")
    with pytest.raises(attnspec.UsageError, match="dtypes='float8': choose from"):
        attnspec.verify("attnspec.subjects.reference", dtypes=["float8"])


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_without_a_gpu_is_a_usage_error() -> None:
    with pytest.raises(attnspec.UsageError, match="torch sees no CUDA device"):
        attnspec.verify("attnspec.subjects.reference", device="cuda")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_a_live_line_on_a_terminal() -> None:
    stream = _Terminal()
    show = progress_printer(stream)
    show("causality", 3, 50, None)
    from attnspec.common.report import PropertyResult

    show("causality", 50, 50, PropertyResult(id="causality", verdict="pass", examples=50,
                                             seconds=1.25))
    text = stream.getvalue()
    assert "\r\x1b[Kcausality            running     3/50 examples" in text
    assert text.endswith("\r\x1b[Kcausality            pass       50 examples    1.2s\n")


def test_progress_is_plain_lines_when_not_a_terminal() -> None:
    from attnspec.common.report import PropertyResult

    stream = io.StringIO()
    show = progress_printer(stream)
    show("causality", 3, 50, None)
    show("causality", 50, 50, PropertyResult(id="causality", verdict="fail", examples=7,
                                             seconds=0.5))
    assert stream.getvalue() == "causality            fail        7 examples    0.5s\n"


@pytest.mark.slow
def test_conformance_suite_rejects_a_broken_subject_with_a_replay_command() -> None:
    env = {**os.environ, "CI": ""}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--attnspec-subject",
         "tests/faulty/raises.py", "--attnspec-max-examples", "20", "-k", "width or finite"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 1, done.stdout
    assert "width error on tests/faulty/raises.py: forward raised" in done.stdout
    assert "replay: attnspec verify tests/faulty/raises.py --only width --replay" in done.stdout


def _conformance(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "CI": ""}, timeout=300)


def test_conformance_suite_refuses_an_impossible_limit_before_collecting() -> None:
    done = _conformance("--attnspec-subject", "attnspec.subjects.sdpa", "--attnspec-max-seq",
                        "5000")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "--attnspec-max-seq 5000: must be between 1 and 4096" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_conformance_suite_names_a_target_it_cannot_open_in_one_line() -> None:
    done = _conformance("--attnspec-subject", "tests/faulty/targets/no_build.py", "-k", "width")
    assert done.returncode == 1, done.stdout
    assert "attnspec: TARGET 'tests/faulty/targets/no_build.py'" in done.stdout
    assert "Traceback" not in done.stdout


def test_api_errors_name_parameters_and_the_cli_names_its_flags() -> None:
    with pytest.raises(attnspec.UsageError) as caught:
        attnspec.verify("attnspec.subjects.reference", timeout=0)
    why = "must be a finite number of seconds > 0."  # an error message, not a timing
    assert str(caught.value) == f"timeout=0: {why}"
    assert (caught.value.option, caught.value.value) == ("timeout", 0)
    done = subprocess.run([sys.executable, "-m", "attnspec", "verify",
                           "attnspec.subjects.reference", "--timeout", "0"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == f"attnspec verify: error: --timeout 0: {why}"


def test_a_message_that_every_property_repeats_is_printed_once() -> None:
    from attnspec.common.report import PropertyResult, Report

    said = "build(4, 2) raised for a valid configuration: ValueError: no kernel"
    report = Report(target="t", header={}, partial=False, properties=[
        PropertyResult(id=p, verdict="error", message=said) for p in ("width", "dtype", "finite")])
    summary = report.summary()
    assert summary.count(said) == 1
    assert "dtype: error: the same message as width." in summary


def test_a_kernel_for_head_size_64_is_checked_by_default() -> None:
    from types import SimpleNamespace

    from attnspec.subjects import sdpa

    kernel = SimpleNamespace(__name__="d64", build=sdpa.build, export_weights=sdpa.export_weights,
                             supports=lambda c, h: c // h == 64 and h <= 2)
    report = attnspec.verify(kernel, only="oracle", max_examples=5, seed=0, database=False,
                             dtypes=["float32"])
    assert report.ok, report.summary()
    assert report.result("oracle").drawn["D"] == [64, 64]
    with pytest.raises(attnspec.UsageError, match="supports none of the configurations"):
        attnspec.verify(kernel, only="oracle", max_examples=3, database=False, max_head_dim=32)
    with pytest.raises(attnspec.UsageError, match="raise max_heads, max_head_dim or max_width"):
        attnspec.verify(kernel, only="oracle", max_examples=3, database=False, max_width=60)


def test_wide_examples_are_a_share_with_one_row_and_short_sequences() -> None:
    report = attnspec.verify("attnspec.subjects.reference", only="width", max_examples=60,
                             seed=0, database=False, isolate=False)
    drawn = report.result("width").drawn
    assert drawn["size"]["wide"] >= 5 and drawn["size"]["narrow"] >= 30, drawn
    assert drawn["H"][1] > 8 and drawn["D"][1] > 16 and drawn["C"][1] <= 512, drawn


@pytest.mark.parametrize(("option", "value"), [("max_heads", 0), ("max_head_dim", 1025),
                                                  ("max_width", 0), ("max_width", 16385)])
def test_size_bounds_are_checked_and_named(option: str, value: int) -> None:
    with pytest.raises(attnspec.UsageError, match=f"{option}={value}: must be between 1 and"):
        attnspec.verify("attnspec.subjects.sdpa", **{option: value})  # type: ignore[arg-type]
