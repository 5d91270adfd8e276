"""The property checks themselves, on hand-made examples (in-process, no Hypothesis)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from torch import Tensor, nn

from attnspec import _tolerance as tol
from attnspec._properties import Example, run_check
from attnspec._worker import InProcess
from attnspec.subjects import reference


class Leaky(nn.Module):
    """The reference plus `leak` times the mean over ALL positions of the input."""

    def __init__(self, n_embd: int, n_head: int, leak: float) -> None:
        super().__init__()
        self.inner = reference.build(n_embd, n_head)
        self.leak = leak

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.inner(x)
        return out + self.leak * x.mean(dim=1, keepdim=True)


def leaky(leak: float) -> InProcess:
    return InProcess(SimpleNamespace(
        __name__="leaky", build=lambda c, h: Leaky(c, h, leak),
        export_weights=lambda m: m.inner.export_weights()))


CUTS = (0, 1, 7, 15, 16, 17, 31, 32)


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
def test_causality_detects_a_leak_of_one_thousandth_of_the_change(dtype: str) -> None:
    ex = Example(B=2, T=33, C=16, H=4, dtype=dtype, seed=5, cuts=CUTS)
    outcome = leaky(1e-3).check("causality", ex)
    assert outcome["kind"] == "fail", outcome
    assert outcome["allowed"] == 0.0 and outcome["measured"] > 0


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
def test_causality_passes_the_reference_exactly(dtype: str) -> None:
    ex = Example(B=2, T=33, C=16, H=4, dtype=dtype, seed=5, cuts=CUTS)
    assert leaky(0.0).check("causality", ex)["kind"] == "pass"


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_prefix_detects_a_leak_of_one_thousandth_of_the_change(dtype: str) -> None:
    ex = Example(B=2, T=33, C=16, H=4, dtype=dtype, seed=5, cuts=CUTS)
    assert leaky(1e-3).check("prefix", ex)["kind"] == "fail"
    assert leaky(0.0).check("prefix", ex)["kind"] == "pass"


def test_oracle_detects_a_leak_of_one_thousandth() -> None:
    ex = Example(B=2, T=9, C=16, H=4, dtype="float32", seed=5)
    outcome = leaky(1e-3).check("oracle", ex)
    assert outcome["kind"] == "fail" and outcome["measured"] > outcome["allowed"]
    assert leaky(0.0).check("oracle", ex)["kind"] == "pass"


@pytest.mark.parametrize("T", [4, 16, 64, 256])
def test_causality_costs_the_same_forward_calls_for_any_T(T: int) -> None:
    cuts = tuple(range(T))  # every cut point, batched into the same calls
    ex = Example(B=1, T=T, C=8, H=2, seed=1, cuts=cuts)
    outcome = run_check(InProcess("attnspec.subjects.reference").subject, "causality", ex)
    assert outcome["kind"] == "pass" and outcome["forwards"] == 2


def test_grad_causality_uses_one_forward_for_every_cut() -> None:
    ex = Example(B=2, T=32, C=8, H=2, seed=1, cuts=tuple(range(32)))
    outcome = run_check(InProcess("attnspec.subjects.reference").subject, "grad_causality", ex)
    assert outcome["kind"] == "pass" and outcome["forwards"] == 1


def test_max_abs_diff_treats_matching_nan_and_inf_as_equal_and_lone_nan_as_infinite() -> None:
    a = torch.tensor([1.0, math.nan, math.inf, 2.0])
    assert tol.max_abs_diff(a, a.clone()) == (0.0, None)
    b = torch.tensor([1.0, 0.0, math.inf, 2.5])
    assert tol.max_abs_diff(a, b) == (math.inf, (1,))


def test_tolerance_floor_keeps_a_zero_yardstick_possible() -> None:
    assert tol.allowed(0.0, "float32", 0.5) == 1e-5
    assert tol.allowed(1e-6, "float32", 10.0) == pytest.approx(2e-6 + 1e-4)


def test_example_round_trips_through_json() -> None:
    ex = Example(B=2, T=5, C=12, H=3, dtype="bfloat16", seed=9, cuts=(0, 2), scale=4.0)
    assert Example.from_json(ex.to_json()) == ex
    assert ex.D == 4
    assert ex.describe() == ("B=2, T=5, C=12, H=3, D=4, dtype=bfloat16, device=cpu, seed=9, "
                             "cuts=[0, 2]")
