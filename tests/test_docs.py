"""The docs site's promises that need no mkdocs: every property has its reference page and
entry, and the README stays a short front page whose links and test command are real.
(`nox -s docs` builds the site itself, strict, with every internal link checked.)"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from attnspec.properties import PROPERTY_IDS
from attnspec.properties.kernel import KERNEL_PROPERTY_IDS

ROOT = Path(__file__).resolve().parent.parent


def _generator() -> ModuleType:
    pytest.importorskip("tomllib", reason="the entries are TOML; Python 3.10 has no tomllib")
    path = ROOT / "scripts" / "property_reference.py"
    spec = importlib.util.spec_from_file_location("property_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_reference_lists_every_property_in_catalogue_order() -> None:
    entries = _generator().read_entries()
    kernel_ids = KERNEL_PROPERTY_IDS
    parsed = {family: tuple(e.id for e in items) for family, items in entries.items()}
    assert parsed == {"module": PROPERTY_IDS, "kernel": kernel_ids}, (
        f"scripts/property_reference.py read the ids {parsed} from the source, but the imported "
        f"catalogues are module={PROPERTY_IDS}, kernel={kernel_ids}: the parser missed a change")


def test_every_property_has_a_complete_entry_and_a_witness() -> None:
    gen = _generator()
    broken = gen.problems(gen.read_entries())
    assert not broken, "the property reference is incomplete:\n" + "\n".join(broken)


def test_every_property_gets_a_page_in_the_nav() -> None:
    gen = _generator()
    pages = gen.pages()
    nav = str(gen.nav_section())
    for family, ids in (("module", PROPERTY_IDS),
                        ("kernel", KERNEL_PROPERTY_IDS)):
        for prop in ids:
            page = f"reference/properties/{family}/{prop}.md"
            assert page in pages and page in nav, f"{family} property {prop} has no page {page}"
            assert f"`{prop}`" in pages[page].splitlines()[0]


def test_a_missing_entry_is_named(tmp_path: Path) -> None:
    gen = _generator()
    text = (ROOT / "docs" / "reference" / "_properties.toml").read_text()
    cut = re.sub(r"\[module\.prefix\]\n(?:(?!\n\[).)*", "", text, flags=re.S)
    assert cut != text
    (tmp_path / "_properties.toml").write_text(cut)
    gen.ENTRIES = tmp_path / "_properties.toml"
    broken = gen.problems(gen.read_entries())
    assert any("`prefix` says nowhere what it checks" in line for line in broken), broken


def test_readme_is_a_front_page() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; the docs site takes the rest"
    first_screen = "\n".join(lines[:40])
    for way in ("attnspec verify", "--attnspec-subject", "attnspec.verify("):
        assert way in first_screen, f"{way!r} is not in README.md's first 40 lines"


def test_readme_links_resolve() -> None:
    text = (ROOT / "README.md").read_text()
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" in target:
            continue
        assert (ROOT / target).exists(), f"README.md links to {target}, which does not exist"


def test_readme_test_command_is_what_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    command = "python3 -m nox -s tests"
    assert f"python3 -m pip install nox && {command}" in readme
    assert command in ci, f".ci/run no longer runs {command!r}, the README's test command"
