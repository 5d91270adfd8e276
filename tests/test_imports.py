"""Importing attnspec: what it pulls in, and what it exports."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import attnspec

PROBE = """
import json, sys
import attnspec
print(json.dumps({
    "heavy": sorted(m for m in sys.modules if m.split(".")[0] in ("hypothesis", "matplotlib")),
    "version": attnspec.__version__,
}))
"""

def test_import_does_not_pull_in_hypothesis_or_matplotlib() -> None:
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, f"import attnspec failed: {result.stderr[-2000:]}"
    probe = json.loads(result.stdout)
    assert probe["heavy"] == [], (
        f"import attnspec imported {probe['heavy']}; the engine and plots must load lazily"
    )
    assert isinstance(probe["version"], str) and probe["version"], (
        f"attnspec.__version__={probe['version']!r}, but should be a non-empty string"
    )


def test_version_is_a_string() -> None:
    assert isinstance(attnspec.__version__, str), (
        f"attnspec.__version__={attnspec.__version__!r} is a {type(attnspec.__version__).__name__}"
    )


def test_errors_are_named_where_users_import_them_from() -> None:
    for name in ("AttnspecError", "ConfigError", "DivisibilityError", "ShapeError", "TargetError",
                 "UsageError"):
        error = getattr(attnspec, name)
        assert f"{error.__module__}.{error.__qualname__}" == f"attnspec.{name}"


def test_the_command_line_starts_without_torch() -> None:
    # `attnspec verify` starts its worker (which imports torch) before it imports torch itself.
    probe = "import sys, attnspec.frontends.cli; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "False", "importing attnspec.frontends.cli imported torch"


def test_the_runner_does_not_import_beartype_until_a_checked_call() -> None:
    # The runner judges with the plain reference; beartype's import and decoration cost ~0.3 s.
    probe = ("import sys, torch, attnspec.session.engine; print('beartype' in sys.modules); "
             "attnspec.CausalSelfAttention(4, 2)(torch.zeros(1, 3, 4)); "
             "print('beartype' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=120, check=False, env={**os.environ, "ATTNSPEC_TYPECHECK": "1"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["False", "True"], (
        f"beartype in sys.modules after importing the engine, then after a checked call: "
        f"{result.stdout.split()}; want False, then True")


def test_the_dtype_names_agree() -> None:
    from attnspec.common import options as _options
    from attnspec.runner import subject as _subject

    assert tuple(_subject.DTYPE_NAMES) == _options.DTYPE_NAMES
