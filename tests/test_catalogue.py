"""The suite proves its power: every broken implementation in tests/broken/ is rejected by a
property its author expected to catch it, every property rejects at least one of them, and every
correct implementation in tests/good/ passes.

CI runs the smallest share that still shows this: each broken subject against its expected
properties only, stopping at the first that fails. `ATTNSPEC_CATALOGUE=full` (`nox -s
catalogue`) runs every entry on every property with the ci profile.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from _catalogue import expected

import attnspec

HERE = Path(__file__).parent
BROKEN = sorted(p for p in (HERE / "broken").glob("*.py") if not p.name.startswith("_"))
GOOD = sorted(p for p in (HERE / "good").glob("*.py") if not p.name.startswith("_"))
CUDA_ONLY = {"device_agreement"}
FULL = os.environ.get("ATTNSPEC_CATALOGUE", "") == "full"

pytestmark = pytest.mark.slow


EXPECTED = {path: expected(path, attnspec.PROPERTIES, "catalogue") for path in BROKEN}


def attnspec_sharded(prop: str) -> bool:
    from attnspec.properties import BY_ID

    return BY_ID[prop].shards is not None


def _verify(path: Path, only: list[str] | None = None, **options: object) -> attnspec.Report:
    # The ci profile is derandomized: the same examples on every run. The catalogue checks the
    # properties' power, not isolation, so it runs in this process (ranks are still processes);
    # CI's share shards over 2 ranks only, the full catalogue over 2 and 4.
    options.setdefault("world_sizes", (2, 4) if FULL else (2,))
    return attnspec.verify(str(path), only=only, profile="ci", database=False, isolate=False,
                           **options)  # type: ignore[arg-type]


def test_catalogue_is_large_enough() -> None:
    assert len(BROKEN) >= 20, [p.name for p in BROKEN]
    assert len(GOOD) >= 3, [p.name for p in GOOD]


@pytest.mark.parametrize("prop", attnspec.PROPERTIES)
def test_every_property_rejects_a_broken_witness(prop: str) -> None:
    witnesses = [path for path in BROKEN if prop in EXPECTED[path]]
    assert witnesses, f"no implementation in tests/broken/ expects {prop} to catch it"
    if prop in CUDA_ONLY and not torch.cuda.is_available():
        pytest.skip(f"{prop} needs a CUDA device")
    sole = [p for p in witnesses if EXPECTED[p] == {prop}]
    if not FULL and attnspec_sharded(prop) and sole:  # the same verify, with ranks to start
        pytest.skip(f"{prop} is proved by test_broken_subject_is_rejected_by_an_expected_"
                    f"property[{sole[0].stem}], which runs this very check")
    summaries = []
    for path in witnesses:  # the first usually suffices; each is a witness its author named
        report = _verify(path, only=[prop])
        if report.result(prop).verdict == "fail":
            return
        summaries.append(f"{path.stem}:\n{report.summary()}")
    pytest.fail(f"{prop} rejected none of its witnesses:\n" + "\n\n".join(summaries))


@pytest.mark.parametrize("path", BROKEN, ids=[p.stem for p in BROKEN])
def test_broken_subject_is_rejected_by_an_expected_property(path: Path) -> None:
    wanted = EXPECTED[path]
    if wanted <= CUDA_ONLY and not torch.cuda.is_available():
        pytest.skip(f"{path.stem} breaks only {sorted(wanted)}, which needs a CUDA device")
    if FULL:
        report = _verify(path)
    else:  # its expected properties only, in the order verify runs them, until one fails
        report = _verify(path, only=[p for p in attnspec.PROPERTIES if p in wanted],
                         exitfirst=True)
    failed = {p.id for p in report.failures}
    assert not report.ok, f"{path.stem} passed every property:\n{report.summary()}"
    assert failed & wanted, (f"{path.stem}: expected one of {sorted(wanted)} to fail, but the "
                             f"failures were {sorted(failed)}:\n{report.summary()}")


@pytest.mark.parametrize("path", GOOD, ids=[p.stem for p in GOOD])
def test_correct_subject_passes_every_property(path: Path) -> None:
    # CI's share: 8 examples a property (the v2 ones draw every variant and hook: 70 s at 20);
    # the soak (docs/soak.md) and `nox -s catalogue` carry the weight.
    report = _verify(path, **({} if FULL else {"max_examples": 8}))
    assert report.ok, report.summary()
