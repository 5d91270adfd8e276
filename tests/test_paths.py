"""The oracle on every hook path (issue 23): with exports, a path that drops a feature the
forward has fails the property of that path, naming the path and the feature; the trained-size
double passes (tests/test_properties.py). In process, hand-made examples: seconds."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from torch import Tensor

from attnspec import AttentionSpec, RoPE
from attnspec.properties import run_check
from attnspec.properties.base import Example
from attnspec.runner.worker import InProcess

BROKEN = Path(__file__).parent / "broken"
GOOD = Path(__file__).parent / "good"


@pytest.mark.parametrize(("name", "prop", "spec", "words"), [
    ("padded_drops_softcap", "padding_invariance", AttentionSpec(8, 2, softcap=1.0),
     "the padded path drops the soft cap (1)"),
    ("padded_drops_window", "padding_invariance", AttentionSpec(8, 2, window=1),
     "the padded path drops the window (1)"),
    ("cross_ignores_scale", "causal_corner", AttentionSpec(8, 2, scale=0.05),
     "the cross path drops the custom scale (0.05"),
    ("padded_decode_drops_window", "decode", AttentionSpec(8, 2, window=2),
     "the decode_padded path drops the window (2)"),
    ("decode_drops_softcap", "decode", AttentionSpec(8, 2, softcap=1.0),
     "the decode path drops the soft cap (1)"),
    ("decode_rope_offset_forgotten", "decode", AttentionSpec(8, 2, positions=RoPE()),
     "does not pass the cache's offset to RoPE"),
])
def test_a_path_that_drops_a_feature_fails_naming_the_path_and_the_feature(
        name: str, prop: str, spec: AttentionSpec, words: str) -> None:
    subject = InProcess(str(BROKEN / f"{name}.py"))
    ex = Example(B=2, T=6, C=8, H=2, seed=1, cuts=(0, 2, 3), spec=spec)
    outcome = run_check(subject, prop, ex)
    assert outcome.kind == "fail" and words in outcome.message, outcome


@pytest.mark.parametrize("prop", ["padding_invariance", "causal_corner", "decode",
                                  "relative_position"])
def test_the_path_oracles_pass_correct_hooks(prop: str) -> None:
    # The same specs as above, on hooks written independently of the reference.
    subject = InProcess(str(GOOD / "independent_hooks_v2.py"))
    for spec in (AttentionSpec(8, 2, softcap=1.0, window=2, positions=RoPE()),
                 AttentionSpec(8, 2, scale=0.05, n_kv_head=1, positions=RoPE())):
        for dtype in ("float32", "bfloat16", "float64"):
            ex = Example(B=2, T=6, C=8, H=2, dtype=dtype, seed=1, cuts=(0, 2, 3), scale=5.0,
                         spec=spec)
            outcome = run_check(subject, prop, ex)
            assert outcome.kind == "pass", (ex, outcome)


def test_a_path_off_by_something_no_feature_explains_says_so() -> None:
    # A padded path whose outputs are 1% large everywhere: no dropped feature explains that.
    sys.path.insert(0, str(BROKEN))
    try:
        import _spec_common as common
    finally:
        sys.path.remove(str(BROKEN))

    class Louder(common.SpecAttn):  # type: ignore[misc, name-defined]
        def padded(self, x: Tensor, keep: Tensor) -> Tensor:
            return super().padded(x, keep) * 1.01  # type: ignore[no-any-return]

    subject = InProcess(SimpleNamespace(
        PROTOCOL=2, VARIANTS={"softcap": "any"}, build=Louder,
        export_weights=common.export_weights, padded=common.padded))
    ex = Example(B=2, T=6, C=8, H=2, seed=1, spec=AttentionSpec(8, 2, softcap=5.0))
    outcome = run_check(subject, "padding_invariance", ex)
    assert outcome.kind == "fail", outcome
    assert "dropping no single feature (the soft cap (5)) explains it" in outcome.message
