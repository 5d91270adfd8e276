"""Loading a TARGET as a subject (the protocol in docs/design.md), with plain errors.

A TARGET is code and runs like a pytest file: its directory goes on sys.path and it is imported.
Weights move only through `export_weights`; no weight file is read and nothing from outside is
unpickled (the worker pipe carries only attnspec's own examples and verdicts).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
import os
import sys
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch

from .._errors import ConfigError, TargetError
from ..common.dtypes import DTYPE_NAMES, declared_dtype_names
from ..common.options import HEAD_DIM_LIMIT, HEADS_LIMIT, MAX_WORLD

__all__ = ["Subject", "check_variants", "clip", "fault_frames", "fault_text",
           "load_subject", "split_target"]

@dataclass
class Subject:
    """A loaded subject: what the protocol provides, looked up once."""

    target: str
    name: str
    build: Callable[..., Any]  # v1: build(n_embd, n_head); v2: build(spec)
    export_weights: Callable[[Any], Mapping[str, Any]] | None
    supports: Callable[..., bool] | None  # v1: supports(n_embd, n_head); v2: supports(spec)
    dtypes: tuple[str, ...] | None
    origin: str
    protocol: int | str = 1  # 1, 2, or "kernel"
    variants: dict[str, Any] | None = None  # v2's VARIANTS, in JSON form (parse_variants)
    revision: str | None = None  # v2's revision (REVISIONS): what its "any" means
    kernel: dict[str, Any] | None = None  # a kernel's conventions (KernelConventions.to_json)
    hooks: dict[str, Callable[..., Any]] = field(default_factory=dict)  # v2: decode, padded, cross
    corner: str = "bottom_right"  # v2: CORNER, where cross's causal diagonal sits
    masked_rows: str = "zero"  # v2: MASKED_ROWS, what a query with no visible key gives
    padding_values: str = "any"  # v2: PADDING_VALUES, "finite" where NaN/inf padding may leak
    world_sizes: tuple[int, ...] = (2, 4)  # v2: WORLD_SIZES, the ranks its sharding hooks take
    cp_layout: str = "head_tail"  # v2: CP_LAYOUT, which positions shard_positions' ranks hold
    cache_attention: Callable[..., Any] | None = None  # a kernel's attention_with_cache
    triton: bool = False  # a kernel that calls Triton (its TRITON, or what its globals hold)


HOOKS = ("decode", "padded", "cross", "shifted", "decode_padded", "shard_heads",
         "shard_positions")
"""Protocol v2's optional hooks (docs/design.md): each turns on its properties."""

SHARD_HOOKS = {"shard_heads": "heads", "shard_positions": "positions"}
"""The sharding hooks and the kind of sharding each does (`_sharding.KINDS`)."""



def split_target(target: str) -> tuple[str, str | None]:
    """`path/or.module[:NAME]` -> (spec, NAME or None)."""
    spec, sep, name = target.rpartition(":")
    if sep and name.isidentifier() and spec:
        return spec, name
    return target, None


def clip(text: str, limit: int = 2000) -> str:
    """A subject's own text, cut to `limit` characters so one huge message cannot flood a run."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit:,} more characters)"


def fault_text(error: BaseException) -> str:
    """`Type: message` for an exception the subject raised, even one whose str() raises."""
    try:
        message = str(error)
    except BaseException as broken:  # noqa: BLE001 - the subject's __str__ is its own code
        message = f"<its str() raised {type(broken).__name__}>"
    name = type(error).__name__
    return clip(f"{name}: {message}" if message else name)


_OWN = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # attnspec's package
_TORCH = os.path.dirname(os.path.abspath(torch.__file__))  # module dispatch: no news to a user
_FRAMES = 4  # the subject's last frames shown with its exception


def _foreign(filename: str) -> bool:
    """attnspec's, torch's or triton's own file: frames no news to a user."""
    triton_file = getattr(sys.modules.get("triton"), "__file__", None)
    skip = [_OWN, _TORCH]
    if isinstance(triton_file, str):
        skip.append(os.path.dirname(os.path.abspath(triton_file)))
    return os.path.abspath(filename).startswith(tuple(d + os.sep for d in skip))


def fault_frames(error: BaseException) -> str:
    """Where the subject raised `error`: its last frames (file, line, function, code), one line
    each and indented, attnspec's, torch's and triton's own frames left out; then, for an error
    raised from another (Triton's interpreter wraps what failed in a kernel's body), where that
    one was raised: the kernel's own line. "" where there are none."""
    lines: list[str] = []
    seen: set[int] = set()
    cause: BaseException | None = error
    try:
        while cause is not None and id(cause) not in seen and len(seen) < 3:
            seen.add(id(cause))
            frames = [f for f in traceback.extract_tb(cause.__traceback__)
                      if not _foreign(f.filename)]
            if cause is not error and frames:
                lines.append(f"\n  raised from {fault_text(cause)}")
            lines += [f"\n  at {f.filename}:{f.lineno} in {f.name}" + (f": {f.line.strip()}"
                                                                       if f.line else "")
                      for f in frames[-_FRAMES:]]
            cause = cause.__cause__
    except Exception:  # noqa: BLE001 - a traceback the subject tampered with: no frames
        return ""
    return clip("".join(lines), 1200)


def is_path(spec: str) -> bool:
    """A file path, not a dotted module; a folder named like a package imports as the package."""
    if spec.endswith(".py") or os.sep in spec or (os.altsep and os.altsep in spec):
        return True
    if os.path.isdir(spec):  # a package has __init__.py; a namespace package has no build
        package = os.path.isfile(os.path.join(spec, "__init__.py"))
        return not (package and all(part.isidentifier() for part in spec.split(".")))
    return os.path.exists(spec)


def _error_location(error: BaseException, files: tuple[str, ...]) -> str:
    """`file:line: Type: message`, at the subject's own frame when there is one."""
    if isinstance(error, SyntaxError):
        return f"{error.filename}:{error.lineno}: SyntaxError: {error.msg}"
    frames = traceback.extract_tb(error.__traceback__)
    own = [f for f in frames if "importlib" not in f.filename
           and os.sep + "attnspec" + os.sep not in f.filename]
    mine = [f for f in own if os.path.abspath(f.filename) in files] or own
    head = f"{mine[-1].filename}:{mine[-1].lineno}: " if mine else ""
    return f"{head}{fault_text(error)}"


def _import(target: str, spec: str) -> tuple[ModuleType, str]:
    if is_path(spec):
        path = os.path.abspath(spec)
        if os.path.isdir(path):
            raise TargetError(f"TARGET {target!r}: {spec!r} is a directory; give a .py file, or "
                              "a package by its dotted name.")
        if not os.path.isfile(path):
            raise TargetError(f"TARGET {target!r}: no such file {spec!r}.")
        directory = os.path.dirname(path)
        if directory not in sys.path:
            sys.path.insert(0, directory)  # like pytest's rootdir-less import: siblings import
        stem = os.path.splitext(os.path.basename(path))[0]
        name = f"attnspec_subject_{stem}"
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise TargetError(f"TARGET {target!r}: {spec!r} cannot be imported as Python.")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        try:
            module_spec.loader.exec_module(module)
        except Exception as error:
            del sys.modules[name]
            hint = _package_hint(path) if isinstance(error, ImportError) else ""
            raise TargetError(f"TARGET {target!r} failed to import: "
                              f"{_error_location(error, (path,))}{hint}") from None
        return module, path
    if "." not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # a dotted TARGET resolves from where the user stands
    try:
        module = importlib.import_module(spec)
    except ModuleNotFoundError as error:
        if error.name and spec.startswith(error.name):
            raise TargetError(f"TARGET {target!r}: no module named {error.name!r} "
                              "(neither a file nor an importable module).") from None
        raise TargetError(f"TARGET {target!r} failed to import: "
                          f"{_error_location(error, ())}") from None
    except Exception as error:
        raise TargetError(f"TARGET {target!r} failed to import: "
                          f"{_error_location(error, ())}") from None
    return module, getattr(module, "__file__", None) or spec


def _package_hint(path: str) -> str:
    """For a file inside a package whose import failed: its dotted name, which imports the
    package first (a path TARGET is imported alone, so `from . import x` or its package's
    siblings cannot resolve)."""
    directory, parts = os.path.dirname(path), [os.path.splitext(os.path.basename(path))[0]]
    while os.path.isfile(os.path.join(directory, "__init__.py")):
        directory, package = os.path.split(directory)
        parts.insert(0, package)
    if len(parts) == 1 or not all(p.isidentifier() for p in parts):
        return ""
    dotted = ".".join(parts)
    return (f". It is inside the package {parts[0]!r}: give it by its dotted name, "
            f"`attnspec verify {dotted}`, from {directory} (or with {directory} on "
            "PYTHONPATH), so that its package's imports resolve.")


def _optional(obj: Any, attr: str, target: str) -> Any:
    value = getattr(obj, attr, None)
    if value is not None and not callable(value):
        raise TargetError(f"TARGET {target!r}: {attr} is of type {type(value).__name__}, "
                          "not a function.")
    return value


REVISIONS = ("2.0", "2.1")
"""Protocol 2's published revisions, each freezing what VARIANTS' "any" draws (docs/guide/
subjects.md): 2.0 (2026-12-01; `PROTOCOL = 2`) and 2.1 (attnspec 0.2: scaled RoPE and given
ALiBi slopes under positions "any")."""


def _frozen_any() -> dict[str, dict[str, list[Any]]]:
    """What "any" drew in earlier revisions where it draws more now, in JSON form: 2.0's
    positions (none, ALiBi with the paper's slopes, RoPE's conventions; no scaling)."""
    from ..reference.spec import ALiBi, RoPE, positions_to_json

    return {"2.0": {"positions": [positions_to_json(p) for p in (
        None, ALiBi(), RoPE(), RoPE(interleaved=True), RoPE(fraction=0.5),
        RoPE(theta=500000.0, fraction=0.25, interleaved=True))]}}


def as_of(variants: Mapping[str, Any], revision: str | None) -> dict[str, Any]:
    """A v2 subject's VARIANTS (JSON form) with each "any" that its revision froze spelt out as
    that revision's values: a subject keeps the meaning "any" had when it was written."""
    frozen = _frozen_any().get(revision or "", {})
    return {name: list(frozen[name]) if values == "any" and name in frozen else values
            for name, values in variants.items()}


def protocol_of(obj: Any, target: str) -> tuple[int, dict[str, Any] | None, str | None]:
    """A subject's PROTOCOL (1 unless it says 2, "2.0" or "2.1"), for 2 its VARIANTS checked and
    its revision (2 is "2.0", as first published); a bad value is a TargetError naming
    `target`."""
    protocol = getattr(obj, "PROTOCOL", 1)
    if protocol not in (1, 2, "kernel", *REVISIONS) or isinstance(protocol, bool):
        raise TargetError(f"TARGET {target}: PROTOCOL = {protocol!r}; attnspec speaks "
                          "protocol 1 (build(n_embd, n_head)), 2 (build(spec); also \"2.1\", "
                          "its revision whose VARIANTS \"any\" draws more) and \"kernel\" "
                          "(attention(q, k, v, *, causal, ...)).")
    if protocol == 1:
        return 1, None, None
    revision = protocol if isinstance(protocol, str) else "2.0"
    from ..reference.spec import parse_variants

    try:
        variants = parse_variants(getattr(obj, "VARIANTS", {}))
    except ConfigError as error:
        raise TargetError(f"TARGET {target}: {error}") from None
    check_variants(variants, target)
    return 2, variants, revision


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive(value: object) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0)


# Why a listed VARIANTS value can make no valid AttentionSpec, per field (None: it can).
_VALUE_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "n_kv_head": (lambda v: v is None or (_whole(v) and 1 <= v <= HEADS_LIMIT),
                  f"a whole number of key/value heads in 1..{HEADS_LIMIT} (it must divide "
                  "n_head), or None"),
    "head_dim": (lambda v: v is None or (_whole(v) and 1 <= v <= HEAD_DIM_LIMIT),
                 f"a whole number of channels per head in 1..{HEAD_DIM_LIMIT}, or None"),
    "window": (lambda v: v is None or _whole(v) and v >= 1,
               "a whole number of keys >= 1 (query i sees key j iff i - window < j <= i), "
               "or None"),
    "scale": (lambda v: v is None or _positive(v), "a finite number > 0, or None"),
    "softcap": (lambda v: v is None or _positive(v), "a finite number > 0, or None"),
    "bias": (lambda v: isinstance(v, bool), "True or False"),
    "sinks": (lambda v: isinstance(v, bool), "True or False"),
}


def _rotates_some_head(fraction: float, fewest: int = 2) -> bool:
    """Whether RoPE's `fraction` turns an even number >= fewest of channels of some D."""
    rotated = (int(D * fraction) for D in range(1, HEAD_DIM_LIMIT + 1))
    return any(r >= fewest and r % 2 == 0 for r in rotated)


def check_variants(variants: Mapping[str, Any], target: str) -> None:
    """Raise TargetError, naming the field, the value and why, for a listed VARIANTS value (in
    `parse_variants`' JSON form) that no AttentionSpec attnspec can draw could take: every
    example with it would be refused, and the property skipped unchecked."""
    from ..reference.spec import ALiBi, DynamicNTK, RoPE, positions_from_json, qk_norm_from_json

    def bad(name: str, value: Any, why: str) -> TargetError:
        if isinstance(value, dict) and value.get("kind") == "rope":  # as the subject wrote it
            value = "RoPE(" + ", ".join(f"{k}={v!r}" for k, v in value.items() if k != "kind") + ")"
        shown = value if isinstance(value, str) and value.startswith("RoPE(") else repr(value)
        return TargetError(f"TARGET {target}: VARIANTS[{name!r}] lists {clip(shown, 200)}, "
                           f"which no attention spec can have: {why}.")

    if not isinstance(variants, Mapping):  # a forged ready message, not parse_variants' form
        raise TargetError(f"TARGET {target}: VARIANTS arrived as {type(variants).__name__}, not "
                          "a dict of spec field -> 'any' or a list of values.")
    for name, values in variants.items():
        if values == "any":
            continue
        if not isinstance(values, list):  # a forged ready message, not parse_variants' form
            raise bad(name, values, "give 'any' or a list of values")
        for value in values:
            if name == "positions":
                try:
                    positions = positions_from_json(value)
                except (ConfigError, TypeError) as error:
                    raise bad(name, value, str(error).rstrip(".")) from None
                if isinstance(positions, ALiBi) and positions.slopes is not None and len(
                        positions.slopes) > HEADS_LIMIT:
                    raise bad(name, value, f"ALiBi's {len(positions.slopes)} slopes fix n_head "
                                           f"at {len(positions.slopes)}, and attnspec draws "
                                           f"n_head up to {HEADS_LIMIT}")
                if isinstance(positions, RoPE) and isinstance(positions.scaling, DynamicNTK) \
                        and not _rotates_some_head(positions.fraction, 4):
                    raise bad(name, value, f"dynamic NTK needs at least 4 rotated channels, "
                                           f"and fraction={positions.fraction!r} gives none "
                                           f"for any head_dim up to {HEAD_DIM_LIMIT}")
                if isinstance(positions, RoPE) and not _rotates_some_head(positions.fraction):
                    raise bad(name, value, f"RoPE rotates int(head_dim * fraction) "
                                               f"channels, an even number >= 2, and fraction="
                                               f"{positions.fraction!r} gives none for any "
                                               f"head_dim up to {HEAD_DIM_LIMIT}")
                continue
            if name == "qk_norm":
                try:
                    qk_norm_from_json(value)
                except (ConfigError, TypeError) as error:
                    raise bad(name, value, str(error).rstrip(".")) from None
                continue
            rule = _VALUE_RULES.get(name)
            if rule is not None and not rule[0](value):
                raise bad(name, value, f"{name} must be {rule[1]}")


def _hooks(obj: Any, target: str, protocol: int,
           ) -> tuple[dict[str, Callable[..., Any]], str, str, str]:
    """A v2 subject's inference hooks, CORNER, MASKED_ROWS and PADDING_VALUES, checked."""
    from ..reference.inference import CORNERS, MASKED_ROWS, PADDING_VALUES

    found = {name: _optional(obj, name, target) for name in HOOKS}
    hooks = {name: hook for name, hook in found.items() if hook is not None}
    if hooks and protocol != 2:
        raise TargetError(f"TARGET {target!r} defines {', '.join(hooks)}, which are protocol 2 "
                          "hooks: set PROTOCOL = 2 and build(spec).")
    values = []
    for attr, default, allowed in (("CORNER", "bottom_right", CORNERS),
                                   ("MASKED_ROWS", "zero", MASKED_ROWS),
                                   ("PADDING_VALUES", "any", PADDING_VALUES)):
        value = getattr(obj, attr, default)
        if value not in allowed:
            raise TargetError(f"TARGET {target!r}: {attr} = {value!r}; it must be one of "
                              f"{', '.join(map(repr, allowed))}.")
        values.append(str(value))
    return hooks, values[0], values[1], values[2]


def sharding_of(obj: Any, target: str) -> tuple[tuple[int, ...], str]:
    """A subject's WORLD_SIZES and CP_LAYOUT, checked; a bad value is a TargetError."""
    from ..reference.sharding import LAYOUTS

    sizes = getattr(obj, "WORLD_SIZES", (2, 4))
    try:
        worlds = tuple(sorted(set(sizes)))
    except TypeError:
        worlds = ()
    if not worlds or not all(isinstance(w, int) and not isinstance(w, bool)
                             and 2 <= w <= MAX_WORLD for w in worlds):
        raise TargetError(f"TARGET {target!r}: WORLD_SIZES = {sizes!r}; it must be a sequence of "
                          f"whole numbers of ranks in 2..{MAX_WORLD}, such as (2, 4).")
    layout = getattr(obj, "CP_LAYOUT", "head_tail")
    if layout not in LAYOUTS:
        raise TargetError(f"TARGET {target!r}: CP_LAYOUT = {layout!r}; it must be one of "
                          f"{', '.join(map(repr, LAYOUTS))} (attnspec.shard_positions_of).")
    return worlds, str(layout)


def _dtypes(obj: Any, target: str) -> tuple[str, ...] | None:
    """A subject's DTYPES by name, checked (None: attnspec's defaults): torch dtypes or their
    names, as --dtype takes them."""
    declared = getattr(obj, "DTYPES", None)
    if declared is None:
        return None
    try:
        dtypes = declared_dtype_names(declared)
    except TypeError as error:
        raise TargetError(f"TARGET {target!r}: DTYPES must be a sequence of torch dtypes or "
                          f"their names (torch.float32 or 'float32'), got {declared!r}: "
                          f"{error}.") from None
    if not dtypes:
        raise TargetError(f"TARGET {target!r}: DTYPES is empty; name at least one of "
                          f"{', '.join(DTYPE_NAMES)}, or leave it out for attnspec's defaults.")
    unknown = [d for d in dtypes if d not in DTYPE_NAMES]
    if unknown:
        raise TargetError(f"TARGET {target!r}: DTYPES lists {', '.join(unknown)}; attnspec "
                          f"checks {', '.join(DTYPE_NAMES)}.")
    return dtypes


def _load_kernel(obj: Any, target: str, origin: str) -> Subject:
    """A kernel subject: attention(q, k, v, *, causal, ...) and its conventions, checked."""
    from ..reference.conventions import KernelConventions

    attention = getattr(obj, "attention", None)
    if attention is None and obj is not None and callable(obj) and not isinstance(
            obj, ModuleType):
        attention = obj
    if attention is None or not callable(attention):
        raise TargetError(f"TARGET {target!r} says PROTOCOL = \"kernel\" but has no "
                          "attention(q, k, v, *, causal, ...): define one that returns o, or "
                          "(o, lse) where it declares LSE.")
    try:
        inspect.signature(attention).bind(None, None, None, causal=True)
    except TypeError:
        raise TargetError(f"TARGET {target!r}: attention{inspect.signature(attention)} cannot "
                          "be called as attention(q, k, v, causal=True).") from None
    except ValueError:
        pass
    try:
        conventions = KernelConventions.of(obj)
    except ConfigError as error:
        raise TargetError(f"TARGET {target!r}: {error}") from None
    for stray in HOOKS:
        if getattr(obj, stray, None) is not None:
            raise TargetError(f"TARGET {target!r} is a kernel (PROTOCOL = \"kernel\") and "
                              f"defines {stray}, a module hook: a kernel takes q, k, v only.")
    with_cache = getattr(obj, "attention_with_cache", None)
    if with_cache is not None:
        try:
            inspect.signature(with_cache).bind(None, None, None, cache_seqlens=None, causal=True)
        except TypeError:
            raise TargetError(f"TARGET {target!r}: attention_with_cache"
                              f"{inspect.signature(with_cache)} cannot be called as "
                              "attention_with_cache(q, k_cache, v_cache, cache_seqlens=..., "
                              "causal=True).") from None
        except ValueError:
            pass
    name = getattr(obj, "__name__", None) or type(obj).__name__
    return Subject(target=target, name=str(name), build=attention, export_weights=None,
                   supports=_optional(obj, "supports", target), dtypes=_dtypes(obj, target),
                   origin=str(origin), protocol="kernel", kernel=conventions.to_json(),
                   cache_attention=with_cache, triton=uses_triton(obj, attention, target))


def _tritonic(value: Any) -> bool:
    name = value.__name__ if isinstance(value, ModuleType) else type(value).__module__
    return isinstance(name, str) and (name == "triton" or name.startswith("triton."))


def uses_triton(obj: Any, attention: Any, target: str) -> bool:
    """Whether a kernel calls Triton: its `TRITON = True` or False, else whether its module, or
    the module of a function it holds (a library's wrapper), holds triton or a Triton kernel."""
    declared = getattr(obj, "TRITON", None)
    if declared is not None:
        if not isinstance(declared, bool):
            raise TargetError(f"TARGET {target!r}: TRITON is {declared!r}; say True (the kernel "
                              "calls Triton) or False.")
        return declared
    spaces = [vars(obj) if isinstance(obj, ModuleType) else {},
              getattr(attention, "__globals__", {})]
    held = [v for space in spaces for v in list(space.values())]
    # One step further: the modules it imports and the modules of the functions it holds.
    spaces += [vars(v) for v in held if isinstance(v, ModuleType) and not _tritonic(v)]
    spaces += [v.__globals__ for v in held
               if callable(v) and isinstance(getattr(v, "__globals__", None), dict)]
    unique = {id(space): space for space in spaces}  # a module's functions share its globals
    return any(_tritonic(v) for space in unique.values() for v in list(space.values()))


HF_PREFIX = "hf:"
"""`hf:MODEL_TYPE[@BACKEND]`: a transformers model type through `attnspec.subjects.hf`."""


def _load_hf(target: str) -> tuple[ModuleType, Any, str]:
    """The subject `attnspec.subjects.hf` makes for `hf:MODEL_TYPE[@BACKEND]`."""
    rest = target.strip()[len(HF_PREFIX):]
    try:
        module = importlib.import_module("attnspec.subjects.hf")
        return module, module.from_target(rest), str(module.__file__)
    except ValueError as error:  # AdapterError: the model type, backend or version, and why
        raise TargetError(f"TARGET {target!r}: {error}") from None


def load_subject(target: str) -> Subject:
    """Import TARGET and check that it provides the protocol; `TargetError` says what is wrong."""
    if not isinstance(target, str) or not target.strip():
        raise TargetError(f"TARGET {target!r}: expected a file path or a dotted module name.")
    obj: Any
    if target.strip().startswith(HF_PREFIX):
        module, obj, origin = _load_hf(target)
    else:
        spec, attr = split_target(target.strip())
        module, origin = _import(target, spec)
        obj = module
        if attr is not None:
            if not hasattr(module, attr):
                raise TargetError(f"TARGET {target!r}: {spec} has no attribute {attr!r}.")
            obj = getattr(module, attr)
    if getattr(obj, "PROTOCOL", None) == "kernel":
        return _load_kernel(obj, target, str(origin))
    build = getattr(obj, "build", None)
    if build is None:
        if obj is not module and callable(obj):
            build = obj  # a plain callable TARGET is taken as build
        elif callable(getattr(obj, "attention", None)):
            raise TargetError(f"TARGET {target!r} defines attention(q, k, v, ...) but no "
                              "build: a kernel says PROTOCOL = \"kernel\" at the top level of "
                              "its file (a module subject defines build(n_embd, n_head)).")
        else:
            raise TargetError(f"TARGET {target!r} has no build(n_embd, n_head); "
                              "define one that returns a torch.nn.Module.")
    if not callable(build):
        raise TargetError(f"TARGET {target!r}: build is of type {type(build).__name__}, "
                          "not a function.")
    protocol, variants, revision = protocol_of(obj, repr(target))
    call = "build(n_embd, n_head)" if protocol == 1 else "build(spec)"
    try:
        inspect.signature(build).bind(*((1, 1) if protocol == 1 else (None,)))
    except TypeError:
        raise TargetError(f"TARGET {target!r}: build{inspect.signature(build)} cannot be called "
                          f"as {call}.") from None
    except ValueError:  # builtins without a signature: let the first call tell
        pass
    dtypes = _dtypes(obj, target)
    name = getattr(obj, "__name__", None) or type(obj).__name__
    hooks, corner, masked_rows, padding_values = _hooks(obj, target, protocol)
    world_sizes, cp_layout = sharding_of(obj, target)
    return Subject(hooks=hooks, corner=corner, masked_rows=masked_rows,
                   padding_values=padding_values, world_sizes=world_sizes, cp_layout=cp_layout,
                   target=target,
                   name=str(name), build=build,
                   export_weights=_optional(obj, "export_weights", target),
                   supports=_optional(obj, "supports", target), dtypes=dtypes,
                   origin=str(origin), protocol=protocol, variants=variants,
                   revision=revision)
