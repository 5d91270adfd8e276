"""A failure's replay: the example in a replay JSON, checked field by field so that a typo is a
UsageError and not a verdict, and a failed property's counterexample replayed alone in fresh
workers, where a failure that passes there is one the subject carries from earlier calls."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .._errors import ConfigError, TargetError, UsageError
from ..common.options import MAX_SEQ_LIMIT
from ..common.report import PropertyResult
from ..properties import BY_ID
from ..properties.base import Example
from ..properties.kernel import KernelExample
from ..runner.subject import clip
from ..runner.worker import SubjectCrash

if TYPE_CHECKING:
    from .engine import Session

# Bounds on a replayed example, so that a typo cannot allocate hundreds of GB.
_REPLAY_LIMITS = {"B": 1024, "C": 65536, "H": 4096}
_REPLAY_GIB = 8

Bad = Callable[[str], UsageError]


def parse_replay(session: Session, prop: str, data: Mapping[str, Any]) -> Example | KernelExample:
    """The example in a replay JSON, checked so that a typo is a UsageError, not a verdict."""
    def bad(why: str) -> UsageError:
        try:
            shown = clip(json.dumps(data, separators=(",", ":"), default=repr), 200)
        except (RecursionError, ValueError):
            shown = "<a nested JSON value>"
        return UsageError(option="replay", value=shown, reason=f"{why}.")

    if not isinstance(data, Mapping):
        raise bad("expected a JSON object such as a failure's replay command prints")
    return session.family.parse_replay(session, prop, data, bad)  # type: ignore[no-any-return]


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def module_example(session: Session, prop: str, data: Mapping[str, Any], bad: Bad) -> Example:
    """A module example from a replay JSON: its fields, then its bounds for `prop`."""
    if data.get("kind") == "kernel":
        raise bad("it is a kernel example (kind: kernel), and this subject is a module")
    fields = list(Example.__dataclass_fields__)
    unknown = sorted(map(str, set(data) - set(fields)))
    if unknown:
        raise bad(f"unknown field {', '.join(map(repr, unknown))}; the fields are "
                  f"{', '.join(fields)}")
    missing = [k for k in ("B", "T", "C", "H") if k not in data]
    if missing:
        raise bad(f"missing {', '.join(missing)}")
    for key in ("B", "T", "C", "H", "seed"):
        if not _whole(data.get(key, 0)):
            raise bad(f"{key} must be a whole number, got {data[key]!r}")
    if not 0 <= data.get("seed", 0) < 2**31:
        raise bad(f"seed must be in 0..{2**31 - 1}, as drawn, got {data['seed']}")
    cuts = data.get("cuts", [])
    if not isinstance(cuts, list | tuple) or not all(_whole(t) for t in cuts):
        raise bad(f"cuts must be a list of whole numbers, got {cuts!r}")
    scale = data.get("scale", 1.0)
    if not isinstance(scale, int | float) or isinstance(scale, bool) \
            or not 0 < scale < float("inf"):
        raise bad(f"scale must be a finite number > 0, got {scale!r}")
    for key in ("dtype", "device"):
        if not isinstance(data.get(key, ""), str):
            raise bad(f"{key} must be a string, got {data[key]!r}")
    try:
        ex = Example.from_json(data)
    except ConfigError as error:
        raise bad(f"its spec is not a valid attention spec: {error}") from None
    if ex.spec is not None and (ex.spec.n_embd, ex.spec.n_head) != (ex.C, ex.H):
        raise bad(f"spec says n_embd={ex.spec.n_embd}, n_head={ex.spec.n_head}, but C={ex.C}"
                  f", H={ex.H}")
    if ex.spec is not None and session.info.protocol != 2:
        raise bad("it has a spec, and this subject speaks protocol 1 (build(n_embd, "
                  "n_head)): drop the spec")
    if prop == "divisibility":  # only build(C, H) runs, on a configuration it must refuse
        return ex
    _module_bounds(ex, bad)
    _module_placement(session, prop, ex, data, bad)
    return ex


def _module_bounds(ex: Example, bad: Bad) -> None:
    """A module example's sizes within a replay's bounds."""
    if min(ex.B, ex.T, ex.C, ex.H) < 1:
        raise bad("B, T, C and H must all be >= 1 for this property")
    if ex.T > MAX_SEQ_LIMIT:
        raise bad(f"T must be at most {MAX_SEQ_LIMIT}")
    for axis, most in _REPLAY_LIMITS.items():
        if getattr(ex, axis) > most:
            raise bad(f"{axis} must be at most {most}, got {getattr(ex, axis)}")
    # The largest call: every cut's copy of (B, T, C) and its (B, H, T, T) scores.
    copies = max(1, len(set(ex.cuts)))
    width = max(ex.C, ex.H * ex.D)  # head_dim may make the q and o widths H·D exceed C
    if width > _REPLAY_LIMITS["C"]:
        raise bad(f"H·D = {ex.H * ex.D} must be at most {_REPLAY_LIMITS['C']}")
    gib = copies * ex.B * (ex.H * ex.T * ex.T + 4 * ex.T * width) * 8 / 2**30
    if gib > _REPLAY_GIB:
        raise bad(f"this example needs about {gib:,.0f} GiB for one call ({copies} cut "
                  f"copies of B={ex.B}, H={ex.H}, T={ex.T}, C={ex.C}); at most "
                  f"{_REPLAY_GIB} GiB is replayed")
    if not all(0 <= t < ex.T for t in ex.cuts):
        raise bad(f"cuts must lie in 0..T-1 = 0..{ex.T - 1}, got {list(ex.cuts)}")
    if ex.C % ex.H and (ex.spec is None or ex.spec.head_dim is None):
        raise bad(f"C={ex.C} is not divisible by H={ex.H}; only divisibility draws such "
                  "configurations")


def _module_placement(session: Session, prop: str, ex: Example, data: Mapping[str, Any],
                      bad: Bad) -> None:
    """A module example's world, device and dtype, as this run has them."""
    shards = BY_ID[prop].shards
    if not _whole(data.get("world", 0)):
        raise bad(f"world must be a whole number, got {data['world']!r}")
    if shards is None and ex.world:
        raise bad(f"world={ex.world}, but {prop} runs unsharded: drop the world")
    if shards is not None:
        from ..reference.sharding import ShardError, check_shardable

        worlds = session.worlds(prop)
        if ex.device != "cpu":
            raise bad(f"device {ex.device!r}: sharded examples run on CPU ranks (gloo)")
        if ex.world not in worlds:
            raise bad(f"world={ex.world}; {prop} runs on {', '.join(map(str, worlds)) or 'no'}"
                      " ranks here (the subject's WORLD_SIZES and the run's world_sizes)")
        try:
            check_shardable(ex.attention, ex.world, shards, ex.T, session.info.cp_layout)
        except ShardError as error:
            raise bad(str(error).rstrip(".")) from None
    device = "cuda" if prop == "device_agreement" else ex.device
    if device not in session.dtypes:
        raise bad(f"device {ex.device!r} is not available here; this run has "
                  f"{', '.join(session.devices)}")
    if ex.dtype not in session.dtypes[device]:
        raise bad(f"dtype {ex.dtype!r} is not one this run checks on {device}: "
                  f"{', '.join(session.dtypes[device])}")


def kernel_example(session: Session, prop: str, data: Mapping[str, Any],
                   bad: Bad) -> KernelExample:
    """A kernel example from a replay JSON, checked field by field."""
    fields = [*KernelExample.__dataclass_fields__, "kind"]
    unknown = sorted(map(str, set(data) - set(fields)))
    if {"T", "C"} & set(unknown) and "kind" not in data:
        raise bad("it is a module example (it has T and C, a kernel's has Tq, Tk and D), "
                  "and this subject is a kernel (q, k, v -> o): replay a failure of this "
                  "subject's own report")
    if unknown:
        raise bad(f"unknown field {', '.join(map(repr, unknown))}; a kernel example has "
                  f"{', '.join(fields)}")
    missing = [k for k in ("B", "H", "G", "Tq", "Tk", "D") if k not in data]
    if missing:
        raise bad(f"missing {', '.join(missing)}")
    for key in ("B", "H", "G", "Tq", "Tk", "D", "seed"):
        value = data.get(key, 0)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise bad(f"{key} must be a whole number >= 0, got {value!r}")
    if not 0 <= data.get("seed", 0) < 2**31:
        raise bad(f"seed must be in 0..{2**31 - 1}, as drawn, got {data['seed']}")
    if min(data["B"], data["H"], data["G"], data["D"], data["Tq"]) < 1:
        raise bad("B, H, G, D and Tq must be >= 1")
    if data["H"] % data["G"]:
        raise bad(f"G={data['G']} must divide H={data['H']}")
    for key in ("Tq", "Tk"):
        if data[key] > MAX_SEQ_LIMIT:
            raise bad(f"{key} must be at most {MAX_SEQ_LIMIT}")
    gib = data["B"] * data["H"] * data["Tq"] * max(data["Tk"], 1) * 8 * 4 / 2**30
    if gib > _REPLAY_GIB:
        raise bad(f"this example needs about {gib:,.0f} GiB of scores; at most "
                  f"{_REPLAY_GIB} GiB is replayed")
    scale = data.get("scale", 1.0)
    if not isinstance(scale, int | float) or isinstance(scale, bool) \
            or not 0 < scale < float("inf"):
        raise bad(f"scale must be a finite number > 0, got {scale!r}")
    try:
        ex = KernelExample.from_json(data)
    except (TypeError, ValueError) as error:
        raise bad(f"it is not a kernel example: {error}") from None
    if ex.lengths is not None and (len(ex.lengths) != ex.B or not all(
            isinstance(n, int) and 0 <= n <= T for pair in ex.lengths
            for n, T in zip(pair, (ex.Tq, ex.Tk), strict=True))):
        raise bad(f"lengths must be B={ex.B} pairs (Tq_b, Tk_b) within Tq={ex.Tq} and "
                  f"Tk={ex.Tk}")
    if not all(isinstance(t, int) and 0 <= t < max(ex.Tk, 1) for t in ex.cuts):
        raise bad(f"cuts must lie in 0..Tk-1, got {list(ex.cuts)}")
    _cache_fields(session, prop, ex, bad)
    if ex.device not in session.dtypes:
        raise bad(f"device {ex.device!r} is not available here; this run has "
                  f"{', '.join(session.devices)}")
    if ex.dtype not in session.dtypes[ex.device]:
        raise bad(f"dtype {ex.dtype!r} is not one this run checks on {ex.device}: "
                  f"{', '.join(session.dtypes[ex.device])}")
    return ex



def _cache_fields(session: Session, prop: str, ex: KernelExample, bad: Bad) -> None:
    """A cache example's fields (cache_seqlens, new_tokens, page_size), checked."""
    cache_props = ("paged", "kv_append")
    if ex.cache_seqlens is None:
        if ex.new_tokens or ex.page_size is not None:
            raise bad("new_tokens and page_size need cache_seqlens (the tokens already in "
                      "each row's cache)")
        if prop in cache_props:
            raise bad(f"{prop} replays a cache example: give cache_seqlens (B lengths), "
                      "new_tokens and, for paged, page_size")
        return
    if prop not in cache_props:
        raise bad(f"cache_seqlens is for {' and '.join(cache_props)}, not {prop}")
    lens = ex.cache_seqlens
    if len(lens) != ex.B or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in lens):
        raise bad(f"cache_seqlens must be B={ex.B} whole numbers >= 0, got {list(lens)}")
    new = ex.new_tokens
    if not isinstance(new, int) or isinstance(new, bool) or new < 0:
        raise bad(f"new_tokens must be a whole number >= 0, got {new!r}")
    if ex.Tk != max(lens) + new:
        raise bad(f"Tk must be max(cache_seqlens) + new_tokens = {max(lens) + new}, got "
                  f"Tk={ex.Tk}")
    if ex.lengths is not None or ex.window is not None or ex.alibi or ex.sinks:
        raise bad("a cache example takes no lengths, window, alibi or sinks")
    paged = session.conventions.paged if session.conventions is not None else None
    want = paged if prop == "paged" else None
    if ex.page_size != want:
        raise bad(f"page_size must be {want!r} for {prop} (the kernel's PAGED = {paged!r}), "
                  f"got {ex.page_size!r}")


def in_fresh_workers(session: Session, prop: str, result: PropertyResult,
                     raced: bool) -> PropertyResult:
    """A failure that the same example does not show in fresh processes is one the subject
    carries from earlier calls (a cache, a global, a buffer), or (`raced`: its failing call ran
    beside another) a race: the message says so. Replayed once, in a new worker (and twin),
    only where a property failed."""
    workers, family = session.workers, session.family
    if (not workers.isolated or result.verdict not in ("fail", "error")
            or result.counterexample is None or workers.rank_target is None
            or not family.replayable_fresh(prop)):
        return result
    try:
        ex = parse_replay(session, prop, result.counterexample)
    except UsageError:  # a counterexample beyond a replay's bounds: not replayed
        return result
    try:
        with workers.fresh(session.info) as start:
            twin = start if prop in family.twinned else None
            with workers.judging():
                outcome = family.check(session, start(), prop, ex, twin, fresh=True)
    except (TargetError, SubjectCrash):
        return result  # no fresh worker to be had, or it crashed: nothing to add
    if outcome.kind == "pass" and raced:
        said = ("replayed alone, in a fresh worker, the same example passed: a race between "
                "calls made at once shows only now and then")
        result.message = f"{result.message.rstrip('.')}; {said}."
    elif outcome.kind == "pass":
        said = ("this failure depends on earlier calls: the same example replayed alone, in "
                "a fresh worker, passes, so the subject carries state from call to call (a "
                "cache, a global, a buffer) and an earlier call set it")
        result.message = f"{result.message.rstrip('.')}; {said}."
        result.notes.append(said)
    return result
