"""The property reference of the docs site, generated from the code's catalogue.

Reads, without importing attnspec (so the docs build needs no torch):
- the catalogues, `PROPERTIES` in src/attnspec/properties/__init__.py and `KERNEL_PROPERTIES`
  in src/attnspec/properties/kernel/__init__.py, with each check function's docstring and
  draw settings;
- the witnesses, the broken implementations in tests/broken/ and tests/kernels/broken/ whose
  `EXPECTED` names the property;
- the hand-written halves, docs/reference/_properties.toml (what must hold, how, tolerance).

As an mkdocs hook (mkdocs.yml `hooks:`) it adds one page per property under
reference/properties/ and puts them in the nav; `python scripts/property_reference.py OUT`
writes the same pages into OUT. tests/test_docs.py checks it against the imported catalogue.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parent.parent
PROPS = ROOT / "src" / "attnspec" / "properties"
ENTRIES = ROOT / "docs" / "reference" / "_properties.toml"
PAGES = "reference/properties"  # under docs/
FAMILIES = {
    "module": ("Module properties", PROPS / "__init__.py", "PROPERTIES", ROOT / "tests" / "broken"),
    "kernel": ("Kernel properties", PROPS / "kernel" / "__init__.py", "KERNEL_PROPERTIES",
               ROOT / "tests" / "kernels" / "broken"),
}
# Property(...) keywords that are flags, in words for the "runs when" line.
SETTINGS = {
    "needs_export": "the subject defines `export_weights`",
    "uses_cuts": "draws cut points",
    "needs_cuda": "a CUDA device (skipped without one)",
    "invalid_configs": "draws configurations `build` must refuse",
    "needs_window": "specs with a window (protocol v2)",
    "needs_groups": "specs with 1 < n_kv_head < n_head (protocol v2)",
    "needs_rope": "specs with rotary positions (protocol v2)",
    "cuts": "draws cut points",
}


@dataclass
class Entry:
    """One property of one family, as the code and docs/reference/_properties.toml say."""

    family: str
    id: str
    check: str
    docstring: str | None
    settings: dict[str, Any]
    holds: str = ""
    how: str = ""
    tolerance: str = ""
    witnesses: list[tuple[str, str]] = field(default_factory=list)  # (file stem, its summary)

    @property
    def page(self) -> str:
        return f"{PAGES}/{self.family}/{self.id}.md"


class CatalogueError(RuntimeError):
    """The catalogue or the entries could not be read the way this script expects."""


def _docstrings(tree: ast.Module) -> dict[str, str | None]:
    return {n.name: ast.get_docstring(n) for n in tree.body if isinstance(n, ast.FunctionDef)}


def _constants(tree: ast.Module) -> dict[str, Any]:
    """Module-level NAME = literal assignments (TRAINED, KERNEL_TRAINED)."""
    found: dict[str, Any] = {}
    for node in tree.body:
        target = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        if isinstance(target, ast.Name):
            try:
                found[target.id] = ast.literal_eval(value)
            except ValueError:
                pass
    return found


def _check_docstrings(path: Path, tree: ast.Module) -> dict[str, str | None]:
    """Every check function's docstring, from the module itself and its `from .x import`s."""
    docs = _docstrings(tree)
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            source = path.parent / (node.module.replace(".", "/") + ".py")
            if source.exists():
                theirs = _docstrings(ast.parse(source.read_text()))
                for alias in node.names:
                    if alias.name in theirs:
                        docs[alias.asname or alias.name] = theirs[alias.name]
    return docs


def read_catalogue(family: str) -> list[Entry]:
    """The family's properties in catalogue order, parsed from the source."""
    _, path, name, _ = FAMILIES[family]
    tree = ast.parse(path.read_text())
    consts, docs = _constants(tree), _check_docstrings(path, tree)
    for node in tree.body:
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and node.target.id == name and isinstance(node.value, ast.Tuple)):
            calls = node.value.elts
            break
    else:
        raise CatalogueError(f"reading {path.name} for the property reference: no `{name}: "
                             f"tuple[...] = (...)` assignment found, so the ids cannot be listed")
    entries = []
    for call in calls:
        if not (isinstance(call, ast.Call) and len(call.args) >= 2
                and isinstance(call.args[0], ast.Constant) and isinstance(call.args[1], ast.Name)):
            raise CatalogueError(f"reading {path.name}'s {name}: the item "
                                 f"`{ast.unparse(call)}` is not Property(\"id\", check_fn, ...)")
        settings = {}
        for kw in call.keywords:
            value = kw.value
            if isinstance(value, ast.Name) and value.id in consts:
                settings[kw.arg] = consts[value.id]
            else:
                settings[kw.arg] = ast.literal_eval(value)
        check = call.args[1].id
        entries.append(Entry(family, call.args[0].value, check, docs.get(check), settings))
    return entries


def read_witnesses(family: str) -> dict[str, list[tuple[str, str]]]:
    """property id -> the broken implementations that expect it to catch them."""
    folder = FAMILIES[family][3]
    found: dict[str, list[tuple[str, str]]] = {}
    for path in sorted(folder.glob("*.py")):
        if path.name.startswith("_"):
            continue
        tree = ast.parse(path.read_text())
        summary = (ast.get_docstring(tree) or "").split("\n\n")[0].replace("\n", " ")
        for node in tree.body:
            if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id == "EXPECTED"):
                ids = ast.literal_eval(node.value.args[0]) if isinstance(node.value, ast.Call) \
                    else ast.literal_eval(node.value)
                for prop in ids:
                    found.setdefault(prop, []).append((path.stem, summary))
    return found


def read_entries() -> dict[str, list[Entry]]:
    """Both families, with the hand-written halves and the witnesses filled in."""
    written = tomllib.loads(ENTRIES.read_text())
    result = {}
    for family in FAMILIES:
        witnesses = read_witnesses(family)
        entries = read_catalogue(family)
        for e in entries:
            text = written.get(family, {}).get(e.id, {})
            e.holds, e.how, e.tolerance = (text.get(k, "") for k in ("holds", "how", "tolerance"))
            e.witnesses = witnesses.get(e.id, [])
        result[family] = entries
    return result


def problems(entries: dict[str, list[Entry]]) -> list[str]:
    """What keeps the reference from being complete: each a sentence naming the property."""
    out = []
    written = tomllib.loads(ENTRIES.read_text())
    for family, items in entries.items():
        ids = {e.id for e in items}
        for stale in sorted(set(written.get(family, {})) - ids):
            out.append(f"{family} property `{stale}` has an entry in {ENTRIES.name} but is not "
                       f"in the catalogue: remove the entry or add the property")
        for e in items:
            where = f"[{family}.{e.id}] in docs/reference/{ENTRIES.name}"
            if not e.holds:
                out.append(f"{family} property `{e.id}` says nowhere what it checks: add "
                           f"`holds` to {where}")
            if not (e.docstring or e.how):
                out.append(f"{family} property `{e.id}` says nowhere how it checks: give "
                           f"`{e.check}` a docstring or add `how` to {where}")
            if not e.tolerance:
                out.append(f"{family} property `{e.id}` has no tolerance: add `tolerance` to "
                           f"{where}")
            if not e.witnesses:
                out.append(f"{family} property `{e.id}` has no witness: no file in "
                           f"{FAMILIES[family][3].relative_to(ROOT)} lists it in EXPECTED")
    return out


def _settings_line(e: Entry) -> str:
    parts = []
    for key, value in e.settings.items():
        if key in SETTINGS and value:
            parts.append(SETTINGS[key])
        elif key == "input_scales":
            parts.append("inputs drawn at " + ", ".join(f"x{s:g}" for s in value))
        elif key == "min_batch":
            parts.append(f"B >= {value}")
        elif key == "needs_hook":
            parts.append(f"the `{value}` hook")
        elif key == "shards":
            parts.append(f"sharded over {value} (a world of ranks)")
        elif key == "needs":
            parts.append("the kernel declares " + ", ".join(f"`{n}`" for n in value))
    return "; ".join(parts) or "every subject of the family, inputs drawn at x1"


def render_page(e: Entry) -> str:
    title = "Module" if e.family == "module" else "Kernel"
    holds = e.holds[:1].upper() + e.holds[1:] + ("" if e.holds.endswith(".") else ".")
    lines = [f"# `{e.id}` ({title.lower()} property)", "",
             f"**What it checks.** {holds}", "",
             f"**Runs with.** {_settings_line(e)}.", ""]
    lines += ["## How", ""]
    if e.docstring:
        lines += [f"From `{e.check}`'s docstring:", "", *(f"> {line}" if line else ">"
                                                         for line in e.docstring.splitlines()), ""]
    if e.how:
        lines += [e.how, ""]
    lines += ["## Tolerance", "", e.tolerance, "",
              "The rule and its yardsticks: [Tolerances](../../../tolerances.md); "
              + ("every module property side by side: [the design as built, section 4]"
                 "(../../../design.md#4-properties)." if e.family == "module" else
                 "every kernel property side by side: [Kernels, the properties]"
                 "(../../../kernels.md#the-properties)."), "",
              "## Witness", "",
              f"The broken implementations that expect `{e.id}` to reject them "
              f"(`{FAMILIES[e.family][3].relative_to(ROOT)}/`):", ""]
    lines += [f"- `{stem}`: {summary}" if summary else f"- `{stem}`"
              for stem, summary in e.witnesses]
    lines += ["", f"Run one: `attnspec verify {FAMILIES[e.family][3].relative_to(ROOT)}/"
              f"{e.witnesses[0][0] if e.witnesses else 'NAME'}.py --only {e.id}`.", ""]
    return "\n".join(lines)


def render_index(entries: dict[str, list[Entry]]) -> str:
    lines = ["# Properties", "",
             "Every property attnspec checks, one page each, generated from the catalogues "
             "(`attnspec.properties.PROPERTIES` and `attnspec.KERNEL_PROPERTIES`), the check "
             "functions' docstrings and the broken implementations that witness each one. "
             "Ids are stable and run in this order; `--only` and `--skip` take them.", ""]
    for family, items in entries.items():
        lines += [f"## {FAMILIES[family][0]}", "", "| id | what it checks | witnesses |",
                  "|---|---|---|"]
        for e in items:
            holds = e.holds.replace("|", "\\|")
            lines.append(f"| [`{e.id}`]({family}/{e.id}.md) | {holds} | {len(e.witnesses)} |")
        lines.append("")
    return "\n".join(lines)


def pages() -> dict[str, str]:
    """Path under docs/ -> markdown, for every generated page."""
    entries = read_entries()
    out = {f"{PAGES}/index.md": render_index(entries)}
    for items in entries.values():
        for e in items:
            out[e.page] = render_page(e)
    return out


def nav_section() -> list[Any]:
    entries = read_entries()
    section: list[Any] = [f"{PAGES}/index.md"]
    for family, items in entries.items():
        section.append({FAMILIES[family][0]: [{e.id: e.page} for e in items]})
    return section


# mkdocs hooks -----------------------------------------------------------------------------


def _expand(nav: list[Any]) -> bool:
    """Replace the nav item whose value is reference/properties/index.md with the section."""
    for i, item in enumerate(nav):
        if isinstance(item, dict):
            ((title, value),) = item.items()
            if value == f"{PAGES}/index.md":
                nav[i] = {title: nav_section()}
                return True
            if isinstance(value, list) and _expand(value):
                return True
    return False


def on_config(config: Any) -> Any:
    if not _expand(config["nav"]):
        raise CatalogueError(f"building the docs: mkdocs.yml's nav has no item "
                             f"`{PAGES}/index.md`, so the property pages have nowhere to go")
    return config


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    broken = problems(read_entries())
    if broken:
        raise CatalogueError("building the property reference: " + "; ".join(broken))
    for path, text in pages().items():
        files.append(File.generated(config, path, content=text))
    return files


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/property_reference.py OUT_DIR", file=sys.stderr)
        return 2
    broken = problems(read_entries())
    for line in broken:
        print(f"property reference: {line}", file=sys.stderr)
    for path, text in pages().items():
        target = Path(argv[0]) / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
