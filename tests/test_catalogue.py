"""The suite proves its power: every broken implementation in tests/broken/ is rejected, by
(at least) a property its author expected to catch it; every correct one in tests/good/ passes;
and every property has a witness."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

import attnspec

HERE = Path(__file__).parent
BROKEN = sorted(p for p in (HERE / "broken").glob("*.py") if not p.name.startswith("_"))
GOOD = sorted(p for p in (HERE / "good").glob("*.py") if not p.name.startswith("_"))
CUDA_ONLY = {"device_agreement"}

pytestmark = pytest.mark.slow


def expected(path: Path) -> frozenset[str]:
    """The module's EXPECTED, read without running the engine."""
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location(f"catalogue_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    value = module.EXPECTED
    assert isinstance(value, frozenset) and value <= set(attnspec.PROPERTIES), path
    return value


def test_catalogue_is_large_enough() -> None:
    assert len(BROKEN) >= 20, [p.name for p in BROKEN]
    assert len(GOOD) >= 3, [p.name for p in GOOD]


def test_every_property_has_a_witness() -> None:
    witnessed = set().union(*(expected(p) for p in BROKEN))
    assert set(attnspec.PROPERTIES) - witnessed == set()


@pytest.mark.parametrize("path", BROKEN, ids=[p.stem for p in BROKEN])
def test_broken_subject_is_rejected_by_an_expected_property(path: Path) -> None:
    wanted = expected(path)
    if wanted <= CUDA_ONLY and not torch.cuda.is_available():
        pytest.skip(f"{path.stem} breaks only {sorted(wanted)}, which needs a CUDA device")
    # The ci profile is derandomized: the same examples on every run.
    report = attnspec.verify(str(path), profile="ci", database=False)
    failed = {p.id for p in report.failures}
    assert not report.ok, f"{path.stem} passed every property:\n{report.summary()}"
    assert failed & wanted, (f"{path.stem}: expected one of {sorted(wanted)} to fail, but the "
                             f"failures were {sorted(failed)}:\n{report.summary()}")


@pytest.mark.parametrize("path", GOOD, ids=[p.stem for p in GOOD])
def test_correct_subject_passes_every_property(path: Path) -> None:
    report = attnspec.verify(str(path), profile="ci", database=False)
    assert report.ok, report.summary()
