"""gqa_grouping: which kv head each query head reads, identified from the subject's output and
its exported weights (in-process, hand-made examples)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from torch import Tensor

from attnspec import ALiBi, AttentionSpec, RoPE, SpecAttention
from attnspec.properties.base import Context, Example
from attnspec.properties.grouping import check_gqa_grouping
from attnspec.runner.worker import InProcess

sys.path.insert(0, str(Path(__file__).parent / "broken"))
from _spec_common import SpecAttn, export_weights  # noqa: E402

sys.path.pop(0)

SPECS = [AttentionSpec(16, 4, n_kv_head=2), AttentionSpec(24, 6, n_kv_head=2, positions=ALiBi()),
         AttentionSpec(32, 8, n_kv_head=4, positions=RoPE(), window=3),
         AttentionSpec(12, 6, n_kv_head=3, bias=False, softcap=5.0)]


def _subject(module: type, **attrs: Any) -> InProcess:
    return InProcess(SimpleNamespace(__name__=module.__name__, PROTOCOL=2, build=module,
                                     export_weights=export_weights, **attrs))


def _example(spec: AttentionSpec, dtype: str = "float32", B: int = 1, T: int = 5) -> Example:
    return Example(B=B, T=T, C=spec.n_embd, H=spec.n_head, dtype=dtype, seed=3, spec=spec)


class Tiled(SpecAttn):
    def share_kv(self, t: Tensor) -> Tensor:
        return t.repeat(1, self.spec.n_head // self.spec.G, 1, 1)


class Reversed(SpecAttn):
    """Query head h reads kv head G - 1 - h // (H / G): a permutation that is not tiling."""

    def share_kv(self, t: Tensor) -> Tensor:
        return super().share_kv(t.flip(1))


class Unscaled(SpecAttn):
    def scale(self) -> float:
        return 1.0


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.describe())
def test_correct_grouping_passes_and_the_two_wrong_ones_are_named(spec: AttentionSpec,
                                                                  dtype: str) -> None:
    ex = _example(spec, dtype)
    H, G = spec.n_head, spec.G
    right = check_gqa_grouping(Context(_subject(SpecAttn)), ex)
    assert right.kind == "pass" and right.notes == [], right
    tiled = check_gqa_grouping(Context(_subject(Tiled)), ex)
    assert tiled.kind == "fail", tiled
    assert f"kv heads {[h % G for h in range(H)]}" in tiled.message, tiled.message
    assert "tiled (repeat)" in tiled.message
    flipped = check_gqa_grouping(Context(_subject(Reversed)), ex)
    assert flipped.kind == "fail", flipped
    assert f"kv heads {[G - 1 - h // (H // G) for h in range(H)]}" in flipped.message
    assert "tiled" not in flipped.message


def test_the_reference_module_passes() -> None:
    ex = _example(SPECS[2], "float64", B=2, T=9)
    subject = InProcess(SimpleNamespace(
        __name__="ref", PROTOCOL=2, build=SpecAttention,
        export_weights=lambda m: m.export_weights()))
    assert check_gqa_grouping(Context(subject), ex).kind == "pass"


def test_a_bug_that_is_not_grouping_is_left_to_oracle() -> None:
    outcome = check_gqa_grouping(Context(_subject(Unscaled)), _example(SPECS[0], "float64"))
    assert outcome.kind == "pass", outcome
    assert any("see oracle" in note for note in outcome.notes), outcome.notes


def test_one_position_and_one_row_still_identify_the_grouping() -> None:
    # B*T*C = 8 outputs for H*G = 32 unknowns: the check draws more rows of its own.
    spec = AttentionSpec(8, 8, n_kv_head=4)
    outcome = check_gqa_grouping(Context(_subject(Tiled)), _example(spec, B=1, T=1))
    assert outcome.kind == "fail" and "tiled" in outcome.message, outcome


def test_the_engine_says_why_it_draws_no_grouped_spec() -> None:
    import attnspec
    from attnspec.subjects import variants

    plain = SimpleNamespace(__name__="plain", PROTOCOL=2, build=SpecAttention,
                            export_weights=variants.export_weights, VARIANTS={"window": "any"})
    report = attnspec.verify(plain, only="gqa_grouping", max_examples=3, isolate=False,
                             database=False)
    result = report.result("gqa_grouping")
    assert result.verdict == "skip" and "n_kv_head" in (result.message or ""), result
    report = attnspec.verify("attnspec.subjects.reference", only="gqa_grouping",
                             max_examples=3, database=False)
    result = report.result("gqa_grouping")
    assert result.verdict == "skip" and "protocol 1" in (result.message or ""), result


@pytest.mark.parametrize(("twin", "which"), [("gqa_values_tiled", "values"),
                                             ("gqa_keys_tiled", "keys"),
                                             ("gqa_tiled", "keys and values")])
def test_keys_or_values_tiled_alone_is_named(twin: str, which: str) -> None:
    spec = SPECS[2]  # H=8 on G=4, RoPE and a window
    subject = InProcess(str(Path(__file__).parent / "broken" / f"{twin}.py"))
    outcome = check_gqa_grouping(Context(subject), _example(spec))
    assert outcome.kind == "fail", outcome
    assert f"reading the {which} of kv heads {[h % 4 for h in range(8)]}" in outcome.message
    assert f"the {which} tiled (repeat)" in outcome.message, outcome.message
    other = {"values": "keys", "keys": "values"}.get(which)
    assert (f"while the {other} are grouped as declared" in outcome.message) == bool(other)


@pytest.mark.parametrize("twin", ["gqa_values_tiled", "gqa_tiled"])
def test_with_one_key_per_query_the_keys_sharing_is_not_claimed(twin: str) -> None:
    # T=1: every query sees only its own key, so which kv head the keys come from cannot show.
    subject = InProcess(str(Path(__file__).parent / "broken" / f"{twin}.py"))
    outcome = check_gqa_grouping(Context(subject), _example(SPECS[0], T=1))
    assert outcome.kind == "fail", outcome
    assert "reading the values of kv heads [0, 1, 0, 1]" in outcome.message, outcome.message
    assert "which kv head the keys come from does not show" in outcome.message, outcome.message
