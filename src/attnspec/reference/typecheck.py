"""Runtime shape checks: jaxtyping annotations enforced by beartype, behind one switch.

`ATTNSPEC_TYPECHECK` is read once, at import: unset or `1` turns the checks on, `0` removes
them (the undecorated function is used, so they cost nothing). While `torch.compile` traces,
the checks are skipped so that they never break a graph.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import re
import typing
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from jaxtyping import TypeCheckError, jaxtyped

from .._errors import ShapeError

__all__ = ["TYPECHECK", "shapechecked", "typecheck_enabled"]

_F = TypeVar("_F", bound=Callable[..., Any])

_OFF = {"0", "false", "no", "off"}
TYPECHECK: bool = os.environ.get("ATTNSPEC_TYPECHECK", "1").strip().lower() not in _OFF

# Axis letters for the f-string tokens that tie an axis to a configuration value.
_TOKEN_LABELS = {"{n_embd}": "C", "{n_head}": "H", "C//{n_head}": "D", "{n_head}*D": "C"}


def typecheck_enabled() -> bool:
    """Whether runtime shape checks are on (`ATTNSPEC_TYPECHECK`, read at import)."""
    return TYPECHECK


def _describe(value: object) -> str:
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        return f"{dtype} tensor of shape {tuple(value.shape)} on {value.device.type}"
    shown = repr(value)
    return f"{type(value).__name__} {shown if len(shown) <= 60 else shown[:57] + '...'}"


def _explain_one(
    where: str, annotation: Any, value: object, args: dict[str, Any], memo: dict[str, int]
) -> str | None:
    """The reason `value` breaks a jaxtyping `annotation`, or None; binds named axes in memo."""
    spec = getattr(annotation, "dim_str", None)
    if spec is None:
        return None
    shown = f"{where} expected {annotation.__name__}, got {_describe(value)}"
    if not isinstance(value, annotation.array_type):
        return f"{shown}: not a {annotation.array_type.__name__}."
    dtype = str(value.dtype).removeprefix("torch.")
    if dtype not in annotation.dtypes:
        kind = "a floating dtype" if "float32" in annotation.dtypes else str(annotation.dtypes)
        return f"{shown}: dtype {dtype} is not {kind}."
    raw = spec.split()
    shape = tuple(value.shape)
    if len(raw) != len(shape):
        labels = ", ".join(_TOKEN_LABELS.get(token, token) for token in raw)
        return f"{shown}: {len(shape)} axes, but the annotation has {len(raw)} ({labels})."
    for axis, (token, size) in enumerate(zip(raw, shape, strict=True)):
        label = _TOKEN_LABELS.get(token, token)
        resolved = re.sub(r"\{(\w+)\}", lambda m: str(args.get(m.group(1), m.group(0))), token)
        if resolved.isidentifier():
            bound = memo.setdefault(resolved, size)
            if bound != size:
                return f"{shown}: axis {axis} ({label}) has size {size}, but {label}={bound} here."
            continue
        try:
            expected = int(eval(resolved, {"__builtins__": {}}, dict(memo)))  # noqa: S307
        except Exception:  # an expression over an axis that is not bound yet
            continue
        if expected != size:
            tied = ", ".join(f"{k}={v}" for k, v in args.items() if f"{{{k}}}" in token)
            formula = token.replace("{", "").replace("}", "")
            why = "" if not tied else f" ({tied})" if formula in args else f" ({formula}, {tied})"
            return f"{shown}: axis {axis} ({label}) has size {size}, but {label}={expected}{why}."
    return None


def _explain(fn: Callable[..., Any], hints: dict[str, Any], args: tuple[Any, ...],
             kwargs: dict[str, Any], error: TypeCheckError) -> str:
    name = getattr(fn, "__qualname__", repr(fn))
    signature = inspect.signature(fn)
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    scope = {k: v for k, v in arguments.items() if isinstance(v, (int, str))}
    memo: dict[str, int] = {}
    for pname, value in arguments.items():
        reason = _explain_one(f"parameter {pname!r}", hints.get(pname), value, scope, memo)
        if reason:
            return f"Shape check failed in {name}: {reason}"
    if "return value" in str(error):
        # The checked functions are pure, so running fn again shows what it returned.
        reason = _explain_one("the return value", hints.get("return"), fn(*args, **kwargs),
                              scope, memo)
        if reason:
            return f"Shape check failed in {name}: {reason}"
    first = str(error).strip().splitlines()
    return f"Shape check failed in {name}: {first[0] if first else type(error).__name__}"


_KEY_TYPES = (int, float, str, bool, type(None), torch.device, torch.dtype)
_MAX_PASSED = 1024  # signatures remembered per step; past that the memory starts over
_PASSED: list[set[tuple[object, ...]]] = []  # every checked step's memory, for forget_passed


def forget_passed() -> None:
    """Check every step afresh on its next call (benchmarks time the first-call cost)."""
    for passed in _PASSED:
        passed.clear()


def _key_part(value: object) -> object:
    if isinstance(value, torch.Tensor):
        return (type(value), value.shape, value.dtype, value.device)
    if isinstance(value, _KEY_TYPES) or (
            dataclasses.is_dataclass(value) and not isinstance(value, type)
            and type(value).__dataclass_params__.frozen):  # type: ignore[attr-defined]
        return value
    raise TypeError  # anything else could change between calls without changing its key


def _signature(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[object, ...] | None:
    """All that a pure step's shapes can depend on: each tensor's type, shape, dtype and
    device, every other argument's value. None where an argument cannot be part of a key."""
    try:
        key = (tuple(_key_part(a) for a in args),
               tuple((k, _key_part(v)) for k, v in kwargs.items()))
        hash(key)
    except TypeError:
        return None
    return key


def shapechecked(fn: _F) -> _F:
    """Check a pure `fn`'s jaxtyping annotations with beartype, unless switched off.

    A failure raises `ShapeError` whose message names the parameter, the axis and both sizes;
    jaxtyping's own report stays attached as the cause. `fn`'s shapes must depend on nothing
    but its arguments' shapes, dtypes, devices and plain values: a signature that passed once
    is not checked again (jaxtyping's symbolic axes cost two `eval`s per axis and call).
    """
    if not TYPECHECK:
        return fn
    # Built at the first call: beartype's import and decoration cost ~0.3 s, which a process
    # that only imports the reference (verify's runner) never needs to pay.
    built: list[tuple[dict[str, Any], Callable[..., Any]]] = []

    def build() -> tuple[dict[str, Any], Callable[..., Any]]:
        from beartype import beartype

        # Resolve string annotations in fn's own module, for the explanation of a failure.
        built.append((typing.get_type_hints(fn, include_extras=True),
                      jaxtyped(typechecker=beartype)(fn)))
        return built[0]

    passed: set[tuple[object, ...]] = set()
    _PASSED.append(passed)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():
            return fn(*args, **kwargs)
        key = _signature(args, kwargs)
        if key is not None and key in passed:
            return fn(*args, **kwargs)
        hints, checked = built[0] if built else build()
        try:
            out = checked(*args, **kwargs)
        except TypeCheckError as error:
            raise ShapeError(_explain(fn, hints, args, kwargs, error)) from error
        if key is not None:
            if len(passed) >= _MAX_PASSED:
                passed.clear()
            passed.add(key)
        return out

    return wrapper  # type: ignore[return-value]
