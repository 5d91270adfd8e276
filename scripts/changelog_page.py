"""mkdocs hook: the site's changelog.md is the repository's CHANGELOG.md, read at build time
(one file to keep; `docs/` holds no copy to fall behind)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHANGELOG = Path(__file__).resolve().parents[1] / "CHANGELOG.md"


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    files.append(File.generated(config, "changelog.md", content=CHANGELOG.read_text()))
    return files
