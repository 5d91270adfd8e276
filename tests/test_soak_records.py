"""The soak records behind docs/soak.md: what they claim, and that the table flags a bad one."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from attnspec.subjects import BUILTIN

ROOT = Path(__file__).resolve().parents[1]
SOAK = ROOT / "docs" / "soak"

spec = importlib.util.spec_from_file_location("soak_table", ROOT / "scripts" / "soak_table.py")
assert spec is not None and spec.loader is not None
soak_table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(soak_table)


def _reports(directory: Path) -> dict[str, dict[str, Any]]:
    return {path.stem: json.loads(path.read_text()) for path in sorted(directory.glob("*.json"))}


@pytest.mark.parametrize(("directory", "at_least"), [(SOAK, 2000), (SOAK / "long", 400)])
def test_every_builtin_subject_soaked_clean_in_float32_and_bfloat16(
    directory: Path, at_least: int, capsys: pytest.CaptureFixture[str],
) -> None:
    reports = _reports(directory)
    assert sorted(reports) == sorted(BUILTIN)
    for name, report in reports.items():
        assert not report["partial"], name
        ran = [p for p in report["properties"] if p["verdict"] != "skip"]
        assert len(ran) == 12, name
        for prop in ran:
            assert prop["verdict"] == "pass", (name, prop["id"])
            assert prop["examples"] >= at_least, (name, prop["id"])
            if prop["id"] != "divisibility":
                assert set(prop["drawn"]["dtype"]) == {"float32", "bfloat16"}, (name, prop["id"])
    assert soak_table.main(str(directory)) == 0
    assert capsys.readouterr().out.count("| **0** |") == len(BUILTIN)


@pytest.mark.parametrize("spoil", ["fail", "partial", "not_run"])
def test_the_soak_table_exits_1_on_a_report_that_is_not_clean(
    spoil: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    report = json.loads((SOAK / "reference.json").read_text())
    if spoil == "partial":
        report["partial"] = True
    else:
        report["properties"][3]["verdict"] = spoil
    (tmp_path / "reference.json").write_text(json.dumps(report))
    assert soak_table.main(str(tmp_path)) == 1
    if spoil == "fail":
        assert "| **1** (causality fail) |" in capsys.readouterr().out


def test_the_soak_table_exits_1_when_there_is_nothing_to_read(tmp_path: Path) -> None:
    assert soak_table.main(str(tmp_path)) == 1
