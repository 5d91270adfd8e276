"""CHANGELOG's rule for breaking changes: nothing is under a "Breaking" heading without a version
bump (a released section, the newest of them the package's `__version__`) and, for each entry,
a migration line."""

from __future__ import annotations

import re
from pathlib import Path

import attnspec

CHANGELOG = Path(__file__).parents[1] / "CHANGELOG.md"


def _sections(text: str) -> list[tuple[str, str]]:
    """(heading, body) for each `## [...]` section, newest first."""
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return list(zip(parts[1::2], parts[2::2], strict=True))


def _breaking_entries(body: str) -> list[str]:
    match = re.search(r"^### Breaking\n(.*?)(?=^### |\Z)", body, flags=re.M | re.S)
    if match is None:
        return []
    return [e for e in re.split(r"^- ", match.group(1), flags=re.M)[1:]]


def test_the_newest_release_is_the_package_version() -> None:
    released = [h for h, _ in _sections(CHANGELOG.read_text()) if not h.startswith("[Unreleased]")]
    newest = re.match(r"\[([^\]]+)\]", released[0])
    assert newest is not None and newest.group(1) == attnspec.__version__, (
        f"CHANGELOG's newest release is {released[0]!r}, but attnspec.__version__ is "
        f"{attnspec.__version__!r}")


def test_breaking_changes_come_with_a_version_and_a_migration() -> None:
    sections = _sections(CHANGELOG.read_text())
    assert any(_breaking_entries(body) for _, body in sections), "no Breaking heading at all"
    for heading, body in sections:
        entries = _breaking_entries(body)
        assert not (heading.startswith("[Unreleased]") and entries), (
            "a breaking change under [Unreleased]: bump the version and move it to its section")
        for entry in entries:
            assert "Migration:" in entry, (
                f"{heading}: the breaking entry {entry[:60]!r}... has no 'Migration:' line")


def test_the_rule_sees_an_entry_without_a_migration() -> None:
    body = "### Breaking\n\n- A renamed flag.\n  Migration: use --new.\n- A removed export.\n"
    entries = _breaking_entries(body)
    assert len(entries) == 2 and "Migration:" not in entries[1]
