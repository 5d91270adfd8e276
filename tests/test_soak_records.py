"""The soak records behind docs/soak.md: what they claim, and that the table flags a bad one.

The records are pinned for what they measured (their subjects, seeds, dtypes and examples), not
against today's property list: a new property does not need a multi-hour soak before CI passes.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from attnspec.subjects import BUILTIN

ROOT = Path(__file__).resolve().parents[1]
SOAK = ROOT / "docs" / "soak"
SUBJECTS = (*BUILTIN, "batch_position_rounding")

spec = importlib.util.spec_from_file_location("soak_table", ROOT / "scripts" / "soak_table.py")
assert spec is not None and spec.loader is not None
soak_table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(soak_table)


def _merged() -> dict[str, dict[str, Any]]:
    by_subject: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(SOAK.glob("*.seed*.json")):
        by_subject.setdefault(path.name.split(".seed")[0], []).append(json.loads(path.read_text()))
    return {name: soak_table.merge(reports) for name, reports in by_subject.items()}


def test_every_builtin_subject_and_the_rounding_double_soaked_clean(
        capsys: pytest.CaptureFixture[str]) -> None:
    merged = _merged()
    assert sorted(merged) == sorted(SUBJECTS)
    for name, report in merged.items():
        assert not report["partial"] and len(report["seeds"]) >= 3, name
        ran = [p for p in report["properties"] if p["verdict"] != "skip"]
        # Skipped here: device_agreement (no CUDA), window (no window: v1 subjects, Llama,
        # BLOOM) and divisibility (v2 subjects get only valid specs); all else must have run.
        assert len(ran) >= 11, name
        skipped = {p["id"] for p in report["properties"] if p["verdict"] == "skip"}
        # A property that needs a hook the subject does not define skips, saying so.
        hooked = {p["id"] for p in report["properties"] if p["verdict"] == "skip"
                  and "the subject defines no" in p["message"]}
        assert skipped - hooked <= {"device_agreement", "window", "divisibility"}, (
            name, skipped)
        for prop in ran:
            assert prop["verdict"] == "pass", (name, prop["id"])
            assert prop["examples"] >= 2000, (name, prop["id"], prop["examples"])
            if prop["id"] != "divisibility":  # only build() runs there: no dtype
                # Every CPU dtype the subject claims (HF's v2 models claim no float64).
                claimed = set(report["dtypes"]["cpu"])
                assert claimed >= {"float32", "bfloat16"}, name
                assert set(prop["drawn"]["dtype"]) == claimed, name
    assert soak_table.main(str(SOAK)) == 0
    assert capsys.readouterr().out.count("| **0** |") == len(SUBJECTS)


@pytest.mark.parametrize("spoil", ["fail", "partial", "not_run"])
def test_the_soak_table_exits_1_on_a_report_that_is_not_clean(
    spoil: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    for path in SOAK.glob("reference.seed*.json"):
        shutil.copy(path, tmp_path / path.name)
    spoilt = tmp_path / "reference.seed0.json"
    report = json.loads(spoilt.read_text())
    if spoil == "partial":
        report["partial"] = True
    else:
        report["properties"][3]["verdict"] = spoil
    spoilt.write_text(json.dumps(report))
    assert soak_table.main(str(tmp_path)) == 1
    if spoil == "fail":
        assert "| **1** (causality fail) |" in capsys.readouterr().out


def test_the_soak_table_exits_1_when_there_is_nothing_to_read(tmp_path: Path) -> None:
    assert soak_table.main(str(tmp_path)) == 1


INFERENCE = ("decode", "padding_invariance", "masked_rows", "causal_corner")
HOOKED = {"variants": INFERENCE, "sdpa_lower_right": INFERENCE,
          "batch_position_rounding_v2": INFERENCE,
          "hf_llama": ("decode", "padding_invariance", "masked_rows"),  # no cross hook
          "hf_mistral": ("decode", "padding_invariance", "masked_rows")}


def _soaked_clean(folder: str, wanted: dict[str, tuple[str, ...]]) -> None:
    """The records in docs/soak/FOLDER: exactly `wanted`'s subjects, 3 seeds or more, and each
    of its properties passed on 2,000 examples or more in every CPU dtype the subject claims."""
    by_subject: dict[str, list[dict[str, Any]]] = {}
    for path in sorted((SOAK / folder).glob("*.seed*.json")):
        by_subject.setdefault(path.name.split(".seed")[0], []).append(
            json.loads(path.read_text()))
    assert sorted(by_subject) == sorted(wanted)
    for name, reports in by_subject.items():
        report = soak_table.merge(reports)
        assert not report["partial"] and len(report["seeds"]) >= 3, name
        verdicts = {p["id"]: p for p in report["properties"]}
        for prop in wanted[name]:
            assert verdicts[prop]["verdict"] == "pass", (name, prop)
            assert verdicts[prop]["examples"] >= 2000, (name, prop)
            assert set(verdicts[prop]["drawn"]["dtype"]) == set(report["dtypes"]["cpu"]), name
    assert soak_table.main(str(SOAK / folder)) == 0


def test_the_inference_properties_soaked_clean_on_every_subject_with_hooks() -> None:
    _soaked_clean("inference", HOOKED)


SPEC_PROPERTIES = ("gqa_grouping", "relative_position")
SPEC_SOAKED = ("variants", "hf_llama", "hf_mistral", "batch_position_rounding_v2")


def test_gqa_grouping_and_relative_position_soaked_clean() -> None:
    _soaked_clean("spec", dict.fromkeys(SPEC_SOAKED, SPEC_PROPERTIES))


SIZES_SOAKED = ("reference", "reference_sdpa", "torch_mha", "sdpa", "hf_gpt2", "variants",
                "hf_llama", "hf_mistral", "hf_bloom", "sdpa_lower_right",
                "batch_position_rounding")


def test_the_default_sizes_soaked_clean_on_every_subject() -> None:
    # The soak of the sizes drawn by default (H up to 32, D up to 256, C up to 512): wide
    # examples ran on every subject, and nothing failed.
    by_subject: dict[str, list[dict[str, Any]]] = {}
    for path in sorted((SOAK / "sizes").glob("*.seed*.json")):
        by_subject.setdefault(path.name.split(".seed")[0], []).append(
            json.loads(path.read_text()))
    # Pinned as measured (issue 12): the built-ins of then, before the sharded ones.
    assert sorted(by_subject) == sorted((*SIZES_SOAKED, "batch_position_rounding_v2"))
    for name, reports in by_subject.items():
        report = soak_table.merge(reports)
        assert not report["partial"] and len(report["seeds"]) >= 3, name
        ran = [p for p in report["properties"] if p["verdict"] != "skip"]
        assert ran and all(p["verdict"] == "pass" for p in ran), name
        for p in ran:
            assert p["examples"] >= 750, (name, p["id"])
            if p["id"] != "divisibility":
                assert p["drawn"]["size"].get("wide", 0) > 0, (name, p["id"])
    assert soak_table.main(str(SOAK / "sizes")) == 0


def test_the_sharded_properties_soaked_clean_on_the_rounding_double() -> None:
    # The built-in sharded subjects are in the main records; this is the double that rounds
    # by batch position, unsharded and on every rank (tests/good/_sharded_rounding.py).
    _soaked_clean("sharded", {"sharded_rounding": ("tp_equivalence", "cp_equivalence")})
