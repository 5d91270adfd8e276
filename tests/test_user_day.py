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


def test_a_kernels_supports_reads_the_case_by_key_or_attribute() -> None:
    import types

    import torch.nn.functional as F

    seen: list[tuple[bool, int, str]] = []
    kernel = types.ModuleType("attribute_supports")
    kernel.PROTOCOL = "kernel"  # type: ignore[attr-defined]
    kernel.CAUSAL = "top_left"  # type: ignore[attr-defined]

    def attention(q: object, k: object, v: object, *, causal: bool) -> object:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # type: ignore[arg-type]

    def supports(case: dict[str, object]) -> bool:
        seen.append((isinstance(case, dict), case.Tq, case["dtype"]))  # type: ignore[attr-defined]
        return case.Tq == case["Tq"]  # type: ignore[attr-defined,no-any-return]

    kernel.attention, kernel.supports = attention, supports  # type: ignore[attr-defined]
    report = attnspec.verify(kernel, only="oracle", max_examples=5, seed=0, database=False,
                             device="cpu", dtypes=["float32"])
    assert report.ok, report.summary()
    assert seen and all(is_dict and isinstance(tq, int) for is_dict, tq, _ in seen)
