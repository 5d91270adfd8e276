"""The run's environment: what the header records (CPU, installed versions) and the Hypothesis
settings it keeps to itself."""

from __future__ import annotations

import contextlib
import os
import platform
import sys
import tempfile
from collections.abc import Iterator
from typing import Any


def _cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else platform's word for it."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _installed(distribution: str) -> str:
    """A distribution's version from its metadata (1 ms): importing beartype to ask costs 0.1 to
    0.2 s before the first example, and a v1 subject's runner never needs beartype."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "not installed"


# Never the user's code: attnspec's own modules and its pytest entry point, and torch, whose
# torch.ops and torch.classes give a relative __file__ that Hypothesis takes for a local file.
_NOT_THE_USERS = frozenset({"attnspec", "attnspec_pytest", "torch"})

_modules_hidden = 0  # len(sys.modules) when they were last hidden: a cheap "nothing new"


def _hide_own_source_from_hypothesis() -> None:
    """Hypothesis mines each module outside site-packages for constants to try in its draws,
    and caches them in .hypothesis/constants of the working directory. From a source checkout
    (pip install -e) that is attnspec's own 500, parsed anew on every run without a database
    (0.3 s), none of them about the subject; installed, there are none. Called before each
    example too, since attnspec imports some modules (its strategies) only once it draws."""
    global _modules_hidden
    if len(sys.modules) == _modules_hidden:
        return
    try:
        from hypothesis.internal.conjecture import providers

        seen: set[int] = providers._seen_modules
    except (ImportError, AttributeError):  # another Hypothesis: at worst the 0.3 s again
        return
    for name, module in list(sys.modules.items()):
        if name.partition(".")[0] in _NOT_THE_USERS:
            seen.add(id(module))
    _modules_hidden = len(sys.modules)


@contextlib.contextmanager
def _private_hypothesis_home(private: bool) -> Iterator[None]:
    """Without a database, Hypothesis's other files (its constants cache) go to a temporary
    directory, not to .hypothesis/ in the user's working directory."""
    if not private or os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
        yield
        return
    from hypothesis import configuration

    previous = vars(configuration).get("__hypothesis_home_directory")
    with tempfile.TemporaryDirectory(prefix="attnspec-hypothesis-") as home:
        configuration.set_hypothesis_home_dir(home)
        try:
            yield
        finally:
            configuration.set_hypothesis_home_dir(previous)


def _target_name(target: Any) -> str:
    return target if isinstance(target, str) else getattr(target, "__name__", repr(target))
