"""Runtime shape checks: ShapeError messages, the signature cache, the switch, torch.compile."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from jaxtyping import Float, TypeCheckError
from torch import Tensor

import attnspec
from attnspec import CausalSelfAttention, ShapeError
from attnspec.reference.module import _MAX_SIGNATURES
from attnspec.reference.typecheck import shapechecked

# In-process checks exist only when ATTNSPEC_TYPECHECK did not switch them off for this run.
requires_checks = pytest.mark.skipif(
    not attnspec.typecheck_enabled(), reason="ATTNSPEC_TYPECHECK switched the runtime checks off"
)

FORWARD = "Shape check failed in CausalSelfAttention.forward: parameter 'x' expected "
ANNOTATION = "Float[Tensor, 'B T {n_embd}']"

# A bad input for CausalSelfAttention(12, 3) and the exact message it must raise.
BAD_INPUTS = {
    "wrong rank": (
        torch.zeros(2, 5),
        f"{FORWARD}{ANNOTATION}, got float32 tensor of shape (2, 5) on cpu: 2 axes, but the "
        "annotation has 3 (B, T, C).",
    ),
    "wrong width": (
        torch.zeros(2, 5, 10),
        f"{FORWARD}{ANNOTATION}, got float32 tensor of shape (2, 5, 10) on cpu: axis 2 (C) has "
        "size 10, but C=12 (n_embd=12).",
    ),
    "integer dtype": (
        torch.zeros(2, 5, 12, dtype=torch.int64),
        f"{FORWARD}{ANNOTATION}, got int64 tensor of shape (2, 5, 12) on cpu: dtype int64 is not "
        "a floating dtype.",
    ),
    "not a tensor": (
        [[[0.5, 1.5]]],
        f"{FORWARD}{ANNOTATION}, got list [[[0.5, 1.5]]]: not a Tensor.",
    ),
}

WRONG_WIDTH = BAD_INPUTS["wrong width"][1]


@shapechecked
def split_heads_without_transpose(
    x: Float[Tensor, "B T C"], n_head: int
) -> Float[Tensor, "B {n_head} T C//{n_head}"]:
    B, T, C = x.shape
    # The classic bug: (B, T, H, D) returned where (B, H, T, D) was promised.
    return x.view(B, T, n_head, C // n_head)


@shapechecked
def split_heads_by_reinterpreting(
    x: Float[Tensor, "B T C"], n_head: int
) -> Float[Tensor, "B {n_head} T C//{n_head}"]:
    B, T, C = x.shape
    # Right shape, wrong axis order: viewing straight to (B, H, T, D) mixes positions into heads.
    return x.view(B, n_head, T, C // n_head)


def raised(fn: object, *args: object) -> ShapeError:
    """The ShapeError that fn(*args) raises."""
    with pytest.raises(ShapeError) as info:
        fn(*args)  # type: ignore[operator]
    return info.value


def run_python(code: str, **env: str | None) -> subprocess.CompletedProcess[str]:
    """Run code in a fresh interpreter (the switch is read once, at import); env None unsets."""
    environ = dict(os.environ)
    for key, value in env.items():
        if value is None:
            environ.pop(key, None)
        else:
            environ[key] = value
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=environ,
                          capture_output=True, text=True, timeout=120, check=False)


SWITCH_PROBE = """
    import torch, attnspec
    print(attnspec.typecheck_enabled())
    try:
        attnspec.CausalSelfAttention(12, 3)(torch.zeros(2, 5, 10))
    except Exception as error:
        print(type(error).__name__, isinstance(error, attnspec.ShapeError))
        print(error)
"""


def test_shape_error_is_a_type_error_and_an_attnspec_error() -> None:
    for base in (TypeError, attnspec.AttnspecError):
        assert issubclass(ShapeError, base), f"ShapeError should subclass {base.__name__}"


@requires_checks
@pytest.mark.parametrize("kernel", ["explicit", "sdpa"])
@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_raises_shape_error_naming_parameter_axis_and_sizes(
    case: str, kernel: str
) -> None:
    x, expected = BAD_INPUTS[case]
    error = raised(CausalSelfAttention(12, 3, kernel=kernel), x)  # type: ignore[arg-type]
    assert str(error) == expected, (
        f"{case} input to CausalSelfAttention(12, 3, kernel={kernel!r}) said\n  {error}\n"
        f"but should say\n  {expected}"
    )


@requires_checks
def test_shape_error_keeps_jaxtypings_report_as_its_cause() -> None:
    error = raised(CausalSelfAttention(12, 3), torch.zeros(2, 5, 10))
    assert isinstance(error.__cause__, TypeCheckError), (
        f"ShapeError.__cause__ should be jaxtyping's TypeCheckError, got {error.__cause__!r}"
    )


@requires_checks
def test_traced_forward_checks_its_input_too() -> None:
    error = raised(CausalSelfAttention(12, 3).traced, torch.zeros(2, 5, 10))
    assert str(error) == WRONG_WIDTH, (
        f"traced() on a wrong-width input said\n  {error}\nbut should say\n  {WRONG_WIDTH}"
    )


@requires_checks
def test_head_split_without_transpose_is_caught_naming_axis_h() -> None:
    x = torch.zeros(2, 5, 12)  # T=5 differs from n_head=3, so the swapped axes show
    error = raised(split_heads_without_transpose, x, 3)
    expected = (
        "Shape check failed in split_heads_without_transpose: the return value expected "
        "Float[Tensor, 'B {n_head} T C//{n_head}'], got float32 tensor of shape (2, 5, 3, 4) on "
        "cpu: axis 1 (H) has size 5, but H=3 (n_head=3)."
    )
    assert str(error) == expected, (
        f"the missing transpose said\n  {error}\nbut should say\n  {expected}"
    )


def test_right_shape_in_the_wrong_axis_order_needs_the_values_to_be_caught() -> None:
    x = torch.arange(2 * 5 * 12, dtype=torch.float32).view(2, 5, 12)
    wrong = split_heads_by_reinterpreting(x, 3)
    right = x.view(2, 5, 3, 4).transpose(1, 2)
    # The shape check passed; only comparing values (the oracle) exposes the mixed positions.
    assert wrong.shape == right.shape and not torch.equal(wrong, right), (
        "view(B, H, T, D) without a transpose should give the right shape but wrong values"
    )


@requires_checks
def test_a_checked_shape_runs_again_with_the_same_result() -> None:
    attn = CausalSelfAttention(12, 3).eval()
    x = torch.randn(2, 5, 12, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        first, second = attn(x), attn(x)
    assert torch.equal(first, second), "the second call on a cached signature changed the output"


@requires_checks
def test_a_new_bad_shape_after_a_good_one_still_raises() -> None:
    attn = CausalSelfAttention(12, 3)
    attn(torch.zeros(2, 5, 12))
    error = raised(attn, torch.zeros(2, 5, 10))
    assert str(error) == WRONG_WIDTH, (
        f"a wrong width after a good call said\n  {error}\nbut should say\n  {WRONG_WIDTH}"
    )
    out = attn(torch.zeros(2, 5, 12))
    assert tuple(out.shape) == (2, 5, 12), "a good shape after a failure should still run"


@requires_checks
def test_a_new_bad_dtype_with_a_checked_shape_still_raises() -> None:
    attn = CausalSelfAttention(12, 3)
    attn(torch.zeros(2, 5, 12))
    # Same shape as the cached call: the cache must key on the dtype too.
    error = raised(attn, torch.zeros(2, 5, 12, dtype=torch.int64))
    expected = BAD_INPUTS["integer dtype"][1]
    assert str(error) == expected, f"said\n  {error}\nbut should say\n  {expected}"


@requires_checks
def test_a_failed_shape_is_not_cached_as_checked() -> None:
    attn = CausalSelfAttention(12, 3)
    for attempt in (1, 2):
        error = raised(attn, torch.zeros(2, 5, 10))
        assert str(error) == WRONG_WIDTH, f"attempt {attempt} said\n  {error}"


@requires_checks
def test_a_signature_checked_by_one_module_is_not_checked_again_by_another(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from attnspec.reference import module as _reference

    checked: list[int] = []
    original = _reference._CHECKED.split_heads

    def counting(x: Tensor, n_head: int) -> Tensor:
        checked.append(n_head)
        return original(x, n_head)  # type: ignore[no-any-return]

    monkeypatch.setattr(_reference._CHECKED, "split_heads", counting)
    x = torch.randn(2, 7, 12)
    with torch.no_grad():
        CausalSelfAttention(12, 3)(x)
        CausalSelfAttention(12, 3)(x)  # verify builds one module per example: same shapes
        CausalSelfAttention(12, 4)(x)  # same weight shapes, other heads: checked afresh
    assert checked == [3, 3, 3, 4, 4, 4], (
        f"checked split_heads ran for n_head {checked}; want 3 x 3 (first module) then 3 x 4 "
        "(new n_head), none for the second module with an already checked signature")


@requires_checks
def test_checks_still_run_after_the_signature_cache_fills_up() -> None:
    attn = CausalSelfAttention(4, 2)
    with torch.no_grad():
        for T in range(1, _MAX_SIGNATURES + 2):  # one more signature than the cache holds
            attn(torch.zeros(1, T, 4))
    error = raised(attn, torch.zeros(1, 3, 5))
    assert "axis 2 (C) has size 5, but C=4 (n_embd=4)." in str(error), (
        f"a wrong width after many cached signatures said: {error}"
    )


def test_checks_are_on_when_the_variable_is_unset() -> None:
    result = run_python(SWITCH_PROBE, ATTNSPEC_TYPECHECK=None)
    lines = result.stdout.splitlines()
    assert result.returncode == 0 and lines[:2] == ["True", "ShapeError True"], (
        f"with ATTNSPEC_TYPECHECK unset, expected checks on and a ShapeError; got "
        f"rc={result.returncode}, stdout={result.stdout!r}, stderr={result.stderr[-2000:]!r}"
    )
    assert lines[2:] == [WRONG_WIDTH], f"the ShapeError said {lines[2:]}, not {WRONG_WIDTH!r}"


@pytest.mark.parametrize("value", ["0", "off"])
def test_switching_checks_off_leaves_torchs_own_error(value: str) -> None:
    result = run_python(SWITCH_PROBE, ATTNSPEC_TYPECHECK=value)
    lines = result.stdout.splitlines()
    assert result.returncode == 0 and lines[:2] == ["False", "RuntimeError False"], (
        f"with ATTNSPEC_TYPECHECK={value}, expected checks off and torch's RuntimeError; got "
        f"rc={result.returncode}, stdout={result.stdout!r}, stderr={result.stderr[-2000:]!r}"
    )
    assert "shapes cannot be multiplied" in result.stdout, (
        f"expected torch's matmul error for a wrong width, got {result.stdout!r}"
    )


def dynamo_supported() -> bool:
    try:
        import torch._dynamo
    except Exception:
        return False
    return bool(torch._dynamo.is_dynamo_supported())


@pytest.mark.skipif(not dynamo_supported(), reason="torch.compile is unsupported on this Python")
@pytest.mark.parametrize("kernel", ["explicit", "sdpa"])
def test_compiled_reference_matches_uncompiled_with_checks_on(kernel: str) -> None:
    attn = CausalSelfAttention(12, 3, kernel=kernel).eval()
    # fullgraph=True: the runtime checks must not break the graph.
    compiled = torch.compile(attn, fullgraph=True, backend="eager")
    x = torch.randn(2, 5, 12, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected, got = attn(x), compiled(x)
    torch.testing.assert_close(
        got, expected, msg=lambda m: f"torch.compile(kernel={kernel!r}) output differs: {m}"
    )


def _counting_checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the functions whose jaxtyping+beartype check runs, in call order."""
    from attnspec.reference import typecheck as _typecheck

    ran: list[str] = []
    original = _typecheck.jaxtyped

    def jaxtyped(**kwargs: object) -> object:
        def decorate(fn: object) -> object:
            checked = original(**kwargs)(fn)  # type: ignore[call-overload]

            def counted(*args: object, **kw: object) -> object:
                ran.append(fn.__name__)  # type: ignore[attr-defined]
                return checked(*args, **kw)
            return counted
        return decorate

    monkeypatch.setattr(_typecheck, "jaxtyped", jaxtyped)
    return ran


@requires_checks
def test_a_step_checks_each_signature_once_and_each_new_one_afresh(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ran = _counting_checks(monkeypatch)

    @shapechecked
    def split(x: Float[Tensor, "B T C"], n_head: int) -> Float[Tensor, "B {n_head} T C//{n_head}"]:
        B, T, C = x.shape
        return x.view(B, T, n_head, C // n_head).transpose(1, 2)

    x = torch.zeros(2, 5, 12)
    split(x, 3)
    split(torch.ones(2, 5, 12), 3)  # same signature: other values change no shape
    assert ran == ["split"], f"checks ran {ran}"
    split(x, 4)  # a plain argument is part of the signature
    split(x.double(), 3)  # so are the dtype and the shape
    split(torch.zeros(1, 5, 12), 3)
    assert ran == ["split"] * 4, f"checks ran {ran}"


@requires_checks
def test_a_step_that_failed_or_cannot_be_keyed_is_checked_every_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ran = _counting_checks(monkeypatch)

    @shapechecked
    def width(x: Float[Tensor, "B T {n_embd}"], n_embd: int, extra: object = None,
              ) -> Float[Tensor, "B T {n_embd}"]:
        return x

    x = torch.zeros(2, 5, 12)
    for _ in range(2):
        with pytest.raises(ShapeError, match=r"axis 2 \(C\) has size 12, but C=10"):
            width(x, 10)
    for _ in range(2):
        width(x, 12, [1])  # a list can change between calls without changing its key
    assert ran == ["width"] * 4, f"checks ran {ran}"
    width(x, 12)
    width(x, 12)
    assert ran == ["width"] * 5, f"checks ran {ran}"


@requires_checks
def test_forget_passed_makes_every_step_check_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from attnspec.reference import module as _reference
    from attnspec.reference.typecheck import forget_passed

    x = torch.zeros(1, 3, 12)
    _reference._CHECKED.split_heads(x, 3)
    ran = _counting_checks(monkeypatch)
    monkeypatch.setattr(_reference, "_CHECKED", _reference.SimpleNamespace(
        split_heads=shapechecked(_reference.split_heads)))
    _reference._CHECKED.split_heads(x, 3)
    _reference._CHECKED.split_heads(x, 3)
    forget_passed()
    _reference._CHECKED.split_heads(x, 3)
    assert ran == ["split_heads", "split_heads"], f"checks ran {ran}"
