"""Consumers' typing: mypy --strict sees attnspec's types, and jaxtyping checks consumers' shapes.

The mypy tests prove the static half (`attn(x)` is a `Tensor`, so misuse is reported); the
runtime tests prove the recipe in docs/consumers.md for turning on shape checks in a consumer's
own package (jaxtyping's import hook, its decorator and its pytest plugin).
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from beartype import beartype
from jaxtyping import Float, TypeCheckError, install_import_hook, jaxtyped
from torch import Tensor

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

# A consumer's head split with the classic bug: a bare view to (B, T, H, D), no transpose.
CONSUMER = '''
from jaxtyping import Float
from torch import Tensor


def split_heads(x: Float[Tensor, "B T C"], n_head: int) -> Float[Tensor, "B H T D"]:
    B, T, C = x.shape
    return x.view(B, T, n_head, C // n_head).transpose(1, 2)


def split_heads_buggy(x: Float[Tensor, "B T C"], n_head: int) -> Float[Tensor, "B H T D"]:
    B, T, C = x.shape
    return x.view(B, T, n_head, C // n_head)
'''

MISUSE = '''
import torch
from attnspec import CausalSelfAttention

bad = CausalSelfAttention("12", 3)
attn = CausalSelfAttention(12, 3)
y = attn(torch.randn(2, 5, 12))
reveal_type(y)
y.shape.foo
width: int = y


def greet(name: str) -> str:
    return name


greet(attn(torch.randn(2, 5, 12)))
'''


def _mypy(*paths: str | Path) -> tuple[str, int]:
    from mypy import api

    # The repository's cache makes a rerun take seconds instead of checking torch again.
    stdout, stderr, status = api.run(["--strict", "--config-file", str(ROOT / "pyproject.toml"),
                                      "--cache-dir", str(ROOT / ".mypy_cache"),
                                      *map(str, paths)])
    return stdout + stderr, status


@pytest.fixture
def consumer_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on sys.path for consumer_* modules, which are forgotten again afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [name for name in sys.modules if name.startswith("consumer_")]:
        del sys.modules[name]


@pytest.mark.slow
def test_mypy_strict_passes_on_the_package_and_the_examples() -> None:
    report, status = _mypy(ROOT / "src", EXAMPLES)
    assert status == 0, f"mypy --strict src examples:\n{report}"


@pytest.mark.slow
def test_mypy_types_the_module_call_as_tensor_and_reports_misuse(tmp_path: Path) -> None:
    misuse = tmp_path / "consumer_misuse.py"
    misuse.write_text(MISUSE)
    report, status = _mypy(misuse)
    assert status == 1, report
    expected = [
        'consumer_misuse.py:5: error: Argument 1 to "CausalSelfAttention" has incompatible type '
        '"str"; expected "int"  [arg-type]',
        # Without attnspec's typed __call__ this would be Any, and the lines below would pass.
        'consumer_misuse.py:8: note: Revealed type is "torch._tensor.Tensor"',
        'consumer_misuse.py:9: error: "Size" has no attribute "foo"  [attr-defined]',
        'consumer_misuse.py:10: error: Incompatible types in assignment (expression has type '
        '"Tensor", variable has type "int")  [assignment]',
        'consumer_misuse.py:17: error: Argument 1 to "greet" has incompatible type "Tensor"; '
        'expected "str"  [arg-type]',
    ]
    # mypy's cache may name the file by an earlier run's folder: compare from the file name on.
    lines = [line[line.find("consumer_misuse.py"):] for line in report.splitlines()
             if "consumer_misuse.py:" in line]
    assert lines == expected, report


def test_import_hook_catches_a_consumers_missing_transpose(consumer_modules: Path) -> None:
    (consumer_modules / "consumer_heads.py").write_text(CONSUMER)
    with install_import_hook("consumer_heads", "beartype.beartype"):
        heads = importlib.import_module("consumer_heads")
    x = torch.randn(2, 5, 12)  # T=5 differs from H=3, so a swapped T and H cannot match
    assert heads.split_heads(x, 3).shape == (2, 3, 5, 4)
    with pytest.raises(TypeCheckError, match="split_heads_buggy"):
        heads.split_heads_buggy(x, 3)


def test_without_the_hook_the_same_bug_runs_silently(consumer_modules: Path) -> None:
    (consumer_modules / "consumer_unchecked.py").write_text(CONSUMER)
    heads = importlib.import_module("consumer_unchecked")
    # (B, T, H, D) where (B, H, T, D) was promised, and nothing complains.
    assert heads.split_heads_buggy(torch.randn(2, 5, 12), 3).shape == (2, 5, 3, 4)


def test_jaxtyped_decorator_checks_one_consumer_function() -> None:
    @jaxtyped(typechecker=beartype)
    def merge_heads_buggy(y: Float[Tensor, "B H T D"]) -> Float[Tensor, "B T C"]:
        B, H, T, D = y.shape
        # Bug under test: flattening (B, H, T, D) without the transpose puts H where T belongs.
        return y.reshape(B, H, T * D)

    with pytest.raises(TypeCheckError, match="merge_heads_buggy"):
        merge_heads_buggy(torch.randn(2, 3, 5, 4))


def test_shape_checks_cannot_see_a_bare_view_that_lands_on_the_right_shape() -> None:
    @jaxtyped(typechecker=beartype)
    def split_heads_scrambled(x: Float[Tensor, "B T C"], n_head: int) -> Float[Tensor, "B H T D"]:
        B, T, C = x.shape
        return x.view(B, n_head, T, C // n_head)

    x = torch.randn(2, 5, 12)
    scrambled = split_heads_scrambled(x, 3)
    right = x.view(2, 5, 3, 4).transpose(1, 2)
    # Same shape, passes the check, wrong contents: values must be compared (attnspec's oracle).
    assert scrambled.shape == right.shape and not torch.equal(scrambled, right)


def test_tiny_gpt_runs_under_the_import_hook_and_rejects_float_tokens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.delitem(sys.modules, "tiny_gpt", raising=False)
    with install_import_hook("tiny_gpt", "beartype.beartype"):
        tiny_gpt = importlib.import_module("tiny_gpt")
    try:
        torch.manual_seed(0)
        model = tiny_gpt.TinyGPT(vocab_size=16, block_size=8, n_embd=12, n_head=3, n_layer=2)
        with torch.no_grad():
            assert model(torch.randint(0, 16, (2, 5))).shape == (2, 5, 16)
            with pytest.raises(TypeCheckError, match="idx"):
                model(torch.randn(2, 5))
    finally:
        sys.modules.pop("tiny_gpt", None)


@pytest.mark.slow
def test_jaxtyping_pytest_plugin_checks_a_consumer_package(consumer_modules: Path) -> None:
    (consumer_modules / "consumer_pkg").mkdir()
    (consumer_modules / "consumer_pkg" / "__init__.py").write_text(CONSUMER)
    (consumer_modules / "test_consumer.py").write_text(textwrap.dedent("""
        import torch
        from consumer_pkg import split_heads_buggy

        def test_split_heads():
            assert split_heads_buggy(torch.randn(2, 5, 12), 3).ndim == 4
    """))

    def run(*flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "--rootdir", str(consumer_modules), *flags, "test_consumer.py"],
            cwd=consumer_modules, capture_output=True, text=True, timeout=300, check=False,
        )

    plain = run()
    assert plain.returncode == 0, plain.stdout[-3000:]
    checked = run("--jaxtyping-packages=consumer_pkg,beartype.beartype")
    assert checked.returncode == 1, checked.stdout[-3000:]
    assert "TypeCheckError" in checked.stdout and "split_heads_buggy" in checked.stdout
