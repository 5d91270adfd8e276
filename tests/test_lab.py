"""The notebook lab (examples/lab.ipynb): stored clean, in step with its builder, and it runs."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
LAB = EXAMPLES / "lab.ipynb"
CELL_TIMEOUT_S = 120


def _builder() -> Any:
    spec = importlib.util.spec_from_file_location("make_lab", EXAMPLES / "make_lab.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_lab_is_stored_without_outputs() -> None:
    nb = nbformat.read(LAB, as_version=4)
    nbformat.validate(nb)
    dirty = [cell.id for cell in nb.cells
             if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None)]
    assert dirty == [], f"cells stored with outputs: {dirty}; rebuild with examples/make_lab.py"


def test_lab_is_what_make_lab_builds() -> None:
    built = json.loads(nbformat.writes(_builder().build()))
    stored = json.loads(LAB.read_text(encoding="utf-8"))
    assert stored == built, "examples/lab.ipynb is stale: run `python examples/make_lab.py`"


@pytest.mark.slow
def test_lab_runs_top_to_bottom_without_errors() -> None:
    from nbclient import NotebookClient

    nb = nbformat.read(LAB, as_version=4)
    client = NotebookClient(nb, kernel_name="python3", timeout=CELL_TIMEOUT_S,
                            resources={"metadata": {"path": str(EXAMPLES)}})
    # A failing cell raises CellExecutionError with the cell's source and traceback.
    client.execute()

    outputs = {cell.id: cell.outputs for cell in nb.cells if cell.cell_type == "code"}
    errors = [cell_id for cell_id, outs in outputs.items()
              if any(out.output_type == "error" for out in outs)]
    assert errors == []
    text = {cell_id: "".join(out.get("text", "") for out in outs)
            for cell_id, outs in outputs.items()}
    assert "(2, 3, 5, 4)" in text["trace"], "the head split of (2, 5, 12) is missing"
    assert text["invalid"].startswith("DivisibilityError: Invalid attention configuration "
                                      "(n_embd=10, n_head=3)")
    assert text["divisors"].count("output (2, 5, 12)") == 6, "one line per divisor of 12"
    assert any("image/png" in out.get("data", {}) for out in outputs["maps"]), (
        "the per-head attention maps were not displayed inline"
    )
