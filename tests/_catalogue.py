"""Reading a catalogue entry's EXPECTED without running the engine (tests/broken, tests/kernels)."""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections.abc import Collection
from pathlib import Path


def expected(path: Path, ids: Collection[str], prefix: str = "catalogue") -> frozenset[str]:
    """The module's EXPECTED: a frozenset of property ids among `ids`."""
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location(f"{prefix}_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    value = module.EXPECTED
    assert isinstance(value, frozenset) and value <= set(ids), path
    return value



def literal(path: Path, name: str) -> object:
    """A module-level literal of a catalogue file, read without running the file (a hostile
    subject attacks whatever process imports it)."""
    tree = ast.parse(path.read_text(), str(path))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{path} has no {name} = <literal>")
