"""Nothing passes unchecked: declarations checked at load, examples that never reached the
subject are no pass, and the report's edges (a quick pass cut short, a run killed early)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import attnspec
from attnspec import RoPE, SpecAttention, TargetError
from attnspec._engine import Session
from attnspec._options import RunOptions

HERE = Path(__file__).parent


def _v2(**attrs: object) -> Any:
    return SimpleNamespace(__name__="v2", PROTOCOL=2, build=SpecAttention,
                           export_weights=lambda m: m.export_weights(), **attrs)


def _forged_rope(**fields: object) -> RoPE:
    """A RoPE whose fields skipped its own checks, as a subject can make one."""
    rope = RoPE()
    for name, value in fields.items():
        object.__setattr__(rope, name, value)
    return rope


# ---- VARIANTS: every listed value is checked at load ----------------------------------------

BAD_VARIANTS = {
    "negative window": ({"window": [4, -1]}, "VARIANTS['window'] lists -1, which no attention "
                        "spec can have: window must be a whole number of keys >= 1"),
    "string window": ({"window": ["x"]}, "VARIANTS['window'] lists 'x'"),
    "no kv heads": ({"n_kv_head": [0]}, "VARIANTS['n_kv_head'] lists 0"),
    "infinite scale": ({"scale": [float("inf")]}, "VARIANTS['scale'] lists inf, which no "
                       "attention spec can have: scale must be a finite number > 0"),
    "bias None": ({"bias": [None]}, "VARIANTS['bias'] lists None, which no attention spec can "
                  "have: bias must be True or False"),
    "NaN theta": ({"positions": [_forged_rope(theta=float("nan"))]},
                  "VARIANTS['positions'] lists RoPE(theta=nan, fraction=1.0, interleaved=False)"
                  ", which no attention spec can have: Invalid RoPE: theta=nan"),
    "fraction rotating nothing": ({"positions": [RoPE(fraction=1e-4)]},
                                  "VARIANTS['positions'] lists RoPE(theta=10000.0, "
                                  "fraction=0.0001, interleaved=False), which no attention "
                                  "spec can have: RoPE rotates int(head_dim * fraction)"),
}


@pytest.mark.parametrize("case", list(BAD_VARIANTS))
def test_a_variants_value_no_spec_can_have_is_a_target_error_naming_it(case: str) -> None:
    variants, message = BAD_VARIANTS[case]
    with pytest.raises(TargetError, match="^TARGET v2: " + _escaped(message)):
        attnspec.verify(_v2(VARIANTS=variants), only="width", max_examples=2, database=False)


def _escaped(text: str) -> str:
    import re

    return re.escape(text)


def test_listed_values_a_spec_can_have_load() -> None:
    from attnspec._spec import parse_variants
    from attnspec._subject import check_variants

    check_variants(parse_variants({"window": [None, 1, 4096], "scale": [None, 0.5],
                                   "n_kv_head": "any", "bias": [False],
                                   "positions": [None, RoPE(fraction=0.25)]}), "'ok.py'")


def test_the_runner_checks_the_variants_the_worker_reports(monkeypatch: pytest.MonkeyPatch,
                                                           ) -> None:
    # The worker's process is the subject's: what its ready message says is checked again.
    from attnspec import _worker

    real = _worker.SubjectInfo.of

    def forged(subject: Any, sizes: Any = None) -> Any:
        info = real(subject) if sizes is None else real(subject, sizes)
        return dataclasses.replace(info, variants={"window": [-3]})

    monkeypatch.setattr(_worker.SubjectInfo, "of", staticmethod(forged))
    with pytest.raises(TargetError, match=r"VARIANTS\['window'\] lists -3"):
        Session(_v2(), RunOptions(max_examples=2, database=False))


# ---- examples that never reached the subject ------------------------------------------------









# ---- the report's edges ---------------------------------------------------------------------





# ---- the pytest plugin ----------------------------------------------------------------------









