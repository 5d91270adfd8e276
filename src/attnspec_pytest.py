"""attnspec's pytest entry point (`pytest11`), kept free of torch so that it costs nothing in
test runs that check no attention: it adds the `--attnspec-*` options, and loads the suite
(`attnspec.frontends.pytest_plugin`) only when a run names a subject.

    pytest --attnspec-subject my_pkg.attention        # your implementation (repeatable)
    ATTNSPEC_SUBJECT=path/to/impl.py pytest            # the same, from the environment
    pytest --attnspec-builtins                         # the reference and every built-in subject

or when a test file declares one: `ATTNSPEC_SUBJECT = "my_pkg.attention"` (or a list) at its
top level makes that file's items the suite's tests on it (conformance/ holds attnspec's own).
"""

from __future__ import annotations

import os

import pytest

# attnspec.runner.options.PROFILES and DEVICES, which import torch; a test pins that they agree.
PROFILES = ("smoke", "default", "thorough", "ci")
DEVICES = ("cpu", "cuda", "all")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("attnspec", "attnspec conformance")
    group.addoption("--attnspec-subject", action="append", default=None, metavar="TARGET",
                    help="check TARGET (path/to/impl.py or pkg.module, either with :NAME); "
                         "repeatable; default: $ATTNSPEC_SUBJECT")
    group.addoption("--attnspec-builtins", action="store_true",
                    help="check the reference and every built-in subject")
    group.addoption("--attnspec-profile", default="default", choices=PROFILES,
                    help="examples per property (default; derandomized where CI is set)")
    group.addoption("--attnspec-max-examples", type=int, default=None, metavar="N",
                    help="examples per property")
    group.addoption("--attnspec-device", default="all", choices=DEVICES)
    group.addoption("--attnspec-max-seq", type=int, default=None, metavar="T",
                    help="the longest sequence length drawn (64 for modules, 256 for kernels; "
                         "at most 4096)")
    group.addoption("--attnspec-max-heads", type=int, default=32, metavar="H",
                    help="the most query heads drawn (32, at most 256)")
    group.addoption("--attnspec-max-head-dim", type=int, default=256, metavar="D",
                    help="the largest head size drawn (256, at most 1024)")
    group.addoption("--attnspec-max-width", type=int, default=512, metavar="C",
                    help="the widest C = H x D drawn (512, at most 16384)")
    group.addoption("--attnspec-world-sizes", default=None, metavar="W,...",
                    help="the ranks sharded properties run on, among the subject's WORLD_SIZES "
                         "(default: all of them); each rank is a process")
    group.addoption("--attnspec-timeout", type=float, default=30.0, metavar="SECONDS",
                    help="seconds one example may take before the worker is killed (30)")
    group.addoption("--attnspec-worker-user", default=None, metavar="USER",
                    help="run the subject's worker and ranks as USER (pytest must run as "
                         "root): the subject then cannot reach pytest's memory or files")
    group.addoption("--attnspec-html", default=None, metavar="FILE.html",
                    help="write an HTML report (one file per run: every subject) with a picture "
                         "of each failure (not under xdist's -n)")
    group.addoption("--attnspec-seed", type=int, default=None, metavar="N",
                    help="the same seed draws the same examples")
    group.addoption("--attnspec-black-box", action="store_true", default=None,
                    help="accept a pass without the oracle (the subject exports no weights and "
                         "none are found by name); without it its test fails as incomplete "
                         "(ini: attnspec_black_box = true)")
    group.addoption("--attnspec-require", action="append", default=None, metavar="IDS",
                    help="comma-separated property ids that must run, besides the oracle; a "
                         "skipped one fails as incomplete")
    parser.addini("attnspec_black_box", type="bool", default=False,
                  help="accept a pass without the oracle (as --attnspec-black-box)")


def subject_requested(config: pytest.Config) -> bool:
    return bool(config.getoption("--attnspec-subject") or config.getoption("--attnspec-builtins")
                or os.environ.get("ATTNSPEC_SUBJECT", "").strip())


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if subject_requested(config) and not config.pluginmanager.has_plugin("attnspec-suite"):
        from attnspec.frontends import pytest_plugin

        config.pluginmanager.register(pytest_plugin, "attnspec-suite")


def pytest_pycollect_makeitem(collector: pytest.Collector, name: str,
                              obj: object) -> list[pytest.Item] | None:
    """A test module's top-level `ATTNSPEC_SUBJECT`: one test per property on it, there."""
    if name != "ATTNSPEC_SUBJECT" or not isinstance(collector, pytest.Module):
        return None
    from attnspec.frontends import pytest_plugin

    manager = collector.config.pluginmanager
    if not (manager.has_plugin("attnspec-suite") or manager.has_plugin("attnspec-declared")):
        manager.register(pytest_plugin, "attnspec-declared")  # its pytest_configure runs now
    return pytest_plugin.declared(collector, obj)
