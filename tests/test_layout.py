"""The package's layers, in one direction: reference (the math) <- common (the ground floor:
options, the report's schema, the worker protocol, the dtype table) <- properties (the judging)
<- session (one verify: the run loop, lanes, draws) <- frontends (CLI, API, plugin), with
runner/ the process layer (worker, wire, zygote, isolation, ranks) that only the session and the
front ends use; no import circle between modules or packages, and no private name imported
across packages."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "attnspec"
BELOW = {"reference": {"_errors"},
         "common": {"reference", "_errors"},
         "properties": {"common", "reference", "_errors"},
         "runner": {"common", "reference", "_errors", "subjects"},
         "session": {"runner", "properties", "common", "reference", "_errors", "subjects"},
         "frontends": {"session", "runner", "properties", "common", "reference", "_errors",
                       "subjects"}}
# What each layer may import from attnspec: itself and what lies below it (subjects/ are
# built-ins, loaded by name in the worker: anything below the session).
LAYERS = {layer: {layer, *below} for layer, below in BELOW.items()}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """The attnspec modules `path` imports, wherever in the file (function bodies too), except
    under `if TYPE_CHECKING:`, which never runs."""
    tree = ast.parse(path.read_text())
    here = _module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(n) for n in ast.walk(node)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("attnspec"):
                continue
            for alias in node.names:  # `from . import core` imports a module
                sub = f"{target}.{alias.name}"
                found.add(sub if _exists(sub) else target)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("attnspec")}
    return found


def _exists(dotted: str) -> bool:
    path = PACKAGE.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


GRAPH = {_module_name(p): _imports(p) for p in PACKAGE.rglob("*.py")}


def test_no_module_imports_itself_back() -> None:
    circles = []
    for start in GRAPH:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in GRAPH.get(node, ()):
                if nxt == start:
                    circles.append(" -> ".join([*path, start]))
                elif nxt not in seen and nxt in GRAPH:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    assert not circles, "import circles:\n" + "\n".join(sorted(set(circles)))


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_each_layer_imports_only_the_layers_below_it(layer: str) -> None:
    wrong = []
    for module, imported in GRAPH.items():
        if module.split(".")[1:2] != [layer]:
            continue
        for target in imported:
            top = target.split(".")[1] if "." in target else ""
            if top and top not in LAYERS[layer]:
                wrong.append(f"{module} imports {target}")
    assert not wrong, "\n".join(wrong)


def test_the_graph_is_read() -> None:
    # The test above cannot pass by reading nothing: the core is imported by every reference.
    assert "attnspec.reference.core" in GRAPH["attnspec.reference.module"]
    assert "attnspec.reference.core" in GRAPH["attnspec.reference.pieces"]


def test_no_package_imports_another_back() -> None:
    edges = {(module.split(".")[1], target.split(".")[1])
             for module, imported in GRAPH.items() if module.count(".") >= 1
             for target in imported if target.count(".") >= 1}
    packages = {a for a, _ in edges if a in LAYERS}
    back = sorted(f"{a} <-> {b}" for a, b in edges
                  if a < b and (b, a) in edges and {a, b} <= packages)
    assert not back, back


def test_properties_never_reach_the_process_layer() -> None:
    assert not [f"{m} imports {t}" for m, imported in GRAPH.items()
                if m.startswith("attnspec.properties") for t in imported
                if t.startswith(("attnspec.runner", "attnspec.session"))]


def test_no_private_name_is_imported_across_packages() -> None:
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        here = _module_name(path).split(".")
        package = here if path.name == "__init__.py" else here[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.level):
                continue
            base = package[:len(package) - node.level + 1]
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if private and target.split(".")[1:2] != package[1:2]:
                    wrong.append(f"{'.'.join(here)} imports {target}.{alias.name}")
    assert not wrong, "\n".join(sorted(wrong))


# Third-party code kept verbatim (subjects/_vendor) is not ours to size.
SOURCES = {_module_name(p): p for p in PACKAGE.rglob("*.py") if "_vendor" not in p.parts}


def test_no_module_is_over_800_lines() -> None:
    long = {m: n for m, p in SOURCES.items() if (n := len(p.read_text().splitlines())) > 800}
    assert not long, long


def test_no_function_is_over_100_lines() -> None:
    long = [f"{m}.{node.name}: {node.end_lineno - node.lineno + 1}"  # type: ignore[operator]
            for m, p in SOURCES.items() for node in ast.walk(ast.parse(p.read_text()))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.end_lineno - node.lineno + 1 > 100]  # type: ignore[operator]
    assert not long, long


# A softmax, a log-sum-exp or q @ k^T outside the core re-spells attention; the only ones
# allowed are a wrong normalisation on purpose (a diagnosis hypothesis) and the ring's LSE of
# the core's own scores, taken in the merge dtype.
_ALLOWED_MATH = {("attnspec.properties.diagnose", "torch.softmax(masked, dim=-2)"),
                 ("attnspec.reference.sharding", "torch.logsumexp(kept['scores']")}


def _attention_math(tree: ast.AST) -> list[str]:
    """The softmax and log-sum-exp calls, and products with a key transposed, in `tree`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            if name in ("softmax", "logsumexp", "log_softmax"):
                found.append(ast.unparse(node))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult) \
                and "transpose(-2, -1)" in ast.unparse(node.right):
            found.append(ast.unparse(node))
    return found


def test_attention_is_computed_in_the_core_alone() -> None:
    found = [f"{module}: {code}" for module, path in SOURCES.items()
             # subjects are attention written by others (the adapters' own, and the lesson's)
             if module != "attnspec.reference.core" and not module.startswith("attnspec.subjects")
             for code in _attention_math(ast.parse(path.read_text()))
             if not any(module == m and code.startswith(a) for m, a in _ALLOWED_MATH)]
    assert not found, "\n".join(found)


def test_the_math_finder_finds_a_softmax() -> None:
    # The test above cannot pass by finding nothing: the core itself is full of it.
    assert len(_attention_math(ast.parse((PACKAGE / "reference" / "core.py").read_text()))) >= 3


def test_the_session_asks_its_family_not_which_it_is() -> None:
    # One choice, FAMILIES[protocol]; what differs between modules and kernels is the family's.
    engine = (PACKAGE / "session" / "engine.py").read_text()
    assert "self.kernel" not in engine.replace("def kernel(self)", ""), "ask self.family"
    from attnspec.session.families import FAMILIES, KERNELS, MODULES

    assert FAMILIES == {1: MODULES, 2: MODULES, "kernel": KERNELS}
    assert set(MODULES.ids).isdisjoint({"fresh_results", "lse_grad"})
    assert "fresh_results" in KERNELS.ids
