"""Strategies as Hypothesis users expect them (issue 45): `st.from_type(AttentionSpec)` draws
attnspec's specs once attnspec.strategies is imported, and a KernelCase prints its shapes and
dtypes, not its tensors' values, so a falsifying example stays readable."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

import attnspec
from attnspec import strategies as ast


@settings(max_examples=10, database=None, deadline=None)
@given(st.from_type(attnspec.AttentionSpec))
def test_from_type_draws_valid_specs(spec: attnspec.AttentionSpec) -> None:
    assert isinstance(spec, attnspec.AttentionSpec)
    assert spec.n_embd % spec.n_head == 0 or spec.head_dim is not None


@settings(max_examples=10, database=None, deadline=None)
@given(ast.kernel_cases(features=("gqa", "softcap", "alibi", "sinks", "scale")))
def test_a_kernel_case_prints_shapes_not_values(case: ast.KernelCase) -> None:
    shown = repr(case)
    assert shown.startswith("KernelCase(q=<(") and "tensor(" not in shown, shown
    dtype = str(case.q.dtype).removeprefix("torch.")
    assert f"q=<{tuple(case.q.shape)} {dtype} {case.q.device}>" in shown, shown
    assert f"layout={case.layout!r}" in shown and f"seed={case.example.seed}" in shown
    assert ("alibi_slopes=<(H,) float32>" in shown) == (case.alibi_slopes is not None)
    assert len(shown) < 400 and not re.search(r"\d\.\d{4}e", shown), shown
