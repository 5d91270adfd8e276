"""What the worker does with a kernel subject: each call of attention(q, k, v, ...) or
attention_with_cache(...) as the runner's step says (in place, strided, with a zero stride,
alongside a second thread, with gradients), its outputs checked to be tensors of their own and
sent. Nothing is judged here."""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import torch
from torch import Tensor

from ..common.grad import vjp
from ..common.protocol import tensor_limit
from .calls import (
    Executed,
    _call,
    _Fault,
    _sendable,
    _sent,
    _shown,
    _Unsupported,
    answer_bool,
    reset_torch_state,
)

_T = TypeVar("_T")

# Outputs smaller than this get 8 poisoned blocks, not 1: the allocator hands a small block back
# from one of several free lists (aligned allocations), and one NaN block was found by
# torch.empty in only about half the calls (64 KiB bounds the extra filling to 0.5 MiB a call).
_FEW_POISONED = 1 << 16


class Case(dict[str, Any]):
    """What a kernel's supports(case) is given: the documented dict (B, H, G, Tq, Tk, D,
    dtype, device, causal, window, ...), whose keys read as attributes too (`case.Tq`); a
    dict still, so that supports written against `case["Tq"]` answers as it did."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"supports(case): the case has no {name!r}; it has "
                                 f"{', '.join(self)}") from None


def _build_kernel(state: Executed, case: Mapping[str, Any]) -> None:
    """A kernel has nothing to build: the example's seed for its randomness, and supports."""
    state.module, state.device, state.kernel_inputs = None, str(case["device"]), None
    state.kernel_outputs = ()
    reset_torch_state()
    torch.default_generator.manual_seed(int(case["seed"]))
    supports = state.subject.supports
    if supports is not None:
        shown = ", ".join(f"{k}={v!r}" for k, v in case.items() if k != "seed")
        if not answer_bool(f"supports({{{shown}}})",
                           _call("supports(case) raised", supports, Case(case)), _Fault):
            raise _Unsupported(f"{{{shown}}}")


def _same_memory(a: Tensor, b: Tensor) -> bool:
    """Whether two tensors' storages overlap anywhere (not only at the same start)."""
    try:
        sa, sb = a.untyped_storage(), b.untyped_storage()
        if sa.device != sb.device or not sa.nbytes() or not sb.nbytes():
            return False
        a0, b0 = sa.data_ptr(), sb.data_ptr()
        return a0 < b0 + sb.nbytes() and b0 < a0 + sa.nbytes()
    except (RuntimeError, NotImplementedError):
        return False


def _not_kept(state: Executed, call: str, outputs: Mapping[str, Tensor | None]) -> None:
    """Refuse an output in the memory of the last call's, which this worker still holds (so the
    allocator cannot have handed it out again): a buffer the kernel keeps and rewrites changes
    the caller's earlier result under it."""
    for name, t in outputs.items():
        if t is None:
            continue
        for before in state.kernel_outputs:
            if _same_memory(t, before):
                raise _Fault(f"{call} returned {name} in the memory of an output of its previous "
                             "call, which the caller still holds: the earlier result changes "
                             "under it (a buffer kept and rewritten by each call); return a "
                             "tensor of its own each call.")
    state.kernel_outputs = tuple(t.detach() for t in outputs.values() if t is not None)


def _in_wider_storage(t: Tensor) -> Tensor:
    """t's values as a view into storage 3 elements wider in the last dimension and offset by
    one: not contiguous, the last dimension still dense (stride 1)."""
    wide = torch.full((*t.shape[:-1], t.shape[-1] + 3), float("nan"), dtype=t.dtype,
                      device=t.device)
    view = wide[..., 1:1 + t.shape[-1]]
    view.copy_(t)
    return view


def _poison(shapes: Sequence[tuple[int, ...]], dtype: torch.dtype, device: str) -> None:
    """NaN blocks of the outputs' sizes (8 of each small one), freed at once: memory a kernel
    takes with torch.empty and returns unwritten then holds NaN, not an earlier answer (best
    effort: large CPU blocks come back from the OS as zeros, which the oracle rejects all the
    same)."""
    blocks = [torch.full(shape, float("nan"), dtype=dtype, device=device) for shape in shapes
              for _ in range(8 if math.prod(shape) * dtype.itemsize < _FEW_POISONED else 1)]
    del blocks


def _at_once(what: str, first: Callable[[], _T], second: Callable[[], _T]) -> tuple[_T, _T]:
    """first() here and second() in another thread, released together and with the GIL handed
    over often, so that a kernel sharing scratch memory between calls races with itself; a
    hang in either is the runner's timeout, as any call's."""
    gate = threading.Barrier(2)
    done: dict[str, Any] = {}

    def go() -> None:
        try:
            gate.wait()
            done["value"] = second()
        except BaseException as error:  # noqa: BLE001 - the subject's, raised again below
            done["error"] = error

    interval = sys.getswitchinterval()
    thread = threading.Thread(target=go, name="attnspec-alongside", daemon=True)
    sys.setswitchinterval(1e-5)
    try:
        thread.start()
        gate.wait()
        value = _call(what, first)
    finally:  # joined however the first call ends: nothing of it runs into the next step
        thread.join()
        sys.setswitchinterval(interval)

    def again() -> _T:
        if "error" in done:
            raise done["error"]
        return done["value"]  # type: ignore[no-any-return]

    return value, _call(f"{what} (the call made at the same time from a second thread)", again)


def _given(state: Executed, step: Mapping[str, Any]) -> tuple[list[Tensor], list[str]]:
    """q, k, v as the step wants them passed: new tensors, or new values in the last call's
    (the same addresses), as strided views, or with one batch row expanded (stride 0 along B,
    for the names returned)."""
    given = [step[t].to(state.device) for t in "qkv"]
    if step.get("in_place"):  # new values into the last call's tensors: the same addresses
        if state.kernel_inputs is None:
            raise RuntimeError("an in-place kernel step before any kernel call")
        for old, new in zip(state.kernel_inputs, given, strict=True):
            if old.shape != new.shape:
                raise RuntimeError("an in-place kernel step of another shape")
            old.data.copy_(new)  # through .data: no version bump for a cache keyed by _version
        given = list(state.kernel_inputs)
    if step.get("strided"):
        given = [_in_wider_storage(t) for t in given]
    broadcast = [n for n in "kv" if n in step.get("broadcast", ())]
    for n in broadcast:  # the runner made every batch row equal: one row, stride 0 along B
        i = "qkv".index(n)
        given[i] = given[i][:1].expand(given[i].shape)
    return given, broadcast


def _keywords(step: Mapping[str, Any], device: str) -> dict[str, Any]:
    """The call's keywords, as tensors and tuples where the kernel protocol says so."""
    keywords = dict(step.get("keywords", {}))
    for name in ("cu_seqlens_q", "cu_seqlens_k"):
        if name in keywords:
            keywords[name] = torch.tensor(keywords[name], dtype=torch.int32, device=device)
    for name in ("alibi_slopes", "sinks"):
        if step.get(name) is not None:
            keywords[name] = step[name].to(device=device, dtype=torch.float32)
    if isinstance(keywords.get("window"), list):
        keywords["window"] = tuple(keywords["window"])
    return keywords


def _poison_outputs(step: Mapping[str, Any], q: Tensor, device: str) -> None:
    """Just before the call, after this side's own allocations (its messages' strings are
    malloc'd too, and could take the freed block the poison is for)."""
    if step.get("lse"):  # LSEs come back in float32 (float64 for float64 inputs), as libraries do
        _poison([tuple(step["lse_shape"])], torch.float32, device)
    _poison([tuple(q.shape)], q.dtype, device)  # last: the block torch.empty(o) finds first


def _outputs(call: str, result: Any, want_lse: bool, given: Mapping[str, Tensor],
             lse_hint: str = "") -> tuple[Tensor, Tensor | None]:
    """(o, lse) of a call's result, each a plain tensor of its own (not in an input's memory,
    nor in each other's)."""
    if want_lse:
        if not (isinstance(result, tuple | list) and len(result) == 2):
            raise _Fault(f"{call} returned {type(result).__name__}, not (o, lse): the "
                         "subject declares LSE, so it returns both.")
        out, lse = result
    else:
        if isinstance(result, tuple | list):
            raise _Fault(f"{call} returned a {type(result).__name__} of {len(result)}, not o "
                         f"alone: the subject declares no LSE{lse_hint}.")
        out, lse = result, None
    for name, t in (("o", out), ("lse", lse)):
        if t is None:
            continue
        if type(t) is not Tensor:  # a subclass or a lazy tensor computes when read
            raise _Fault(f"{call} returned {name} of type {type(t).__module__}."
                         f"{type(t).__qualname__}, not a plain torch.Tensor.")
        for input_name, t_in in given.items():
            if _same_memory(t, t_in):
                raise _Fault(f"{call} returned {name} in the memory of its input "
                             f"{input_name}: an output must be a tensor of its own.")
    return out, lse


def _alongside_o(result: Any, want_lse: bool, mine: Mapping[str, Tensor | None]) -> Tensor:
    """The o of the call made at once from the second thread: a plain tensor, in memory of
    its own (not the first call's outputs', nor either call's inputs')."""
    other_out = result[0] if want_lse and isinstance(result, tuple | list) and len(
        result) == 2 else result
    if type(other_out) is not Tensor:
        raise _Fault(f"attention, called from a second thread at the same time, returned o "
                     f"of type {type(other_out).__module__}.{type(other_out).__qualname__}, "
                     "not a plain torch.Tensor.")
    for name, t in mine.items():
        if t is not None and _same_memory(other_out, t):
            raise _Fault("attention, called from two threads at the same time, returned "
                         f"the second call's o in the memory of the first call's {name}: "
                         "each call must return tensors of its own.")
    return other_out


def _kernel_grads(grad: Mapping[str, Any], out: Tensor, lse: Tensor | None,
                  given: list[Tensor], device: str) -> dict[str, Any]:
    """dq, dk, dv of sum(o * do) (+ sum(lse * dlse)), as sent."""
    outs, cotangents = [], []
    if grad.get("do") is not None and out.requires_grad:
        outs.append(out)
        cotangents.append(grad["do"].to(device=out.device, dtype=out.dtype))
    if grad.get("dlse") is not None and lse is not None and lse.requires_grad:
        outs.append(lse)
        cotangents.append(grad["dlse"].to(device=lse.device, dtype=lse.dtype))
    _poison([tuple(t.shape) for t in given], given[0].dtype, device)
    grads = _call("backward raised", lambda: vjp(outs, given, cotangents)) if outs else (
        None, None, None)
    return {name: None if g is None else _sendable(f"d/d{name[1]}", g, tensor_limit(t.numel()))
            for name, g, t in zip(("dq", "dk", "dv"), grads, given, strict=True)}


def _kernel(state: Executed, step: Mapping[str, Any]) -> dict[str, Any]:
    """One call of the kernel: attention(q, k, v, causal=..., **keywords); with `grad`, the
    backward of sum(o * do) (+ sum(lse * dlse)); the outputs as plain tensors."""
    device = state.device
    grad = step.get("grad")
    given, broadcast = _given(state, step)
    q, k, v = given
    if grad is not None:
        for t in given:
            t.requires_grad_(True)
    state.kernel_inputs = (q, k, v)
    keywords = _keywords(step, device)
    shapes = ", ".join(f"{n} {tuple(t.shape)}" for n, t in zip("qkv", given, strict=True))
    shown = ", ".join(f"{k}={_shown(v)}" for k, v in keywords.items())
    strides = "".join(f" ({n} with stride 0 along the batch, as expand gives)" for n in broadcast)
    what = f"attention({shapes}, {shown}){strides} raised"

    def run(q: Tensor = q, k: Tensor = k, v: Tensor = v) -> Any:
        with torch.set_grad_enabled(grad is not None):
            return state.subject.build(q, k, v, **keywords)

    versions = [t._version for t in given]  # an in-place write moves it, even if undone
    alongside = step.get("alongside")
    other = None if alongside is None else [alongside[n].to(device) for n in "qkv"]
    if alongside is not None and grad is not None:
        raise RuntimeError("a kernel step with a call alongside takes no gradient")
    _poison_outputs(step, q, device)
    if other is None:
        result = _call(what, run)
    else:  # a second call on other inputs of the same shapes, made at once from another thread
        result, other_result = _at_once(what, run, lambda: run(*other))
    written = ",".join(n for n, t, was in zip("qkv", given, versions, strict=True)
                       if t._version != was)
    want_lse = bool(step.get("lse"))
    out, lse = _outputs("attention", result, want_lse, dict(zip("qkv", given, strict=True)),
                        " (set LSE = 'natural' or 'base2' to have it checked)")
    if lse is not None and _same_memory(out, lse):
        raise _Fault("attention returned o and lse in the same memory: each output must be a "
                     "tensor of its own.")
    if other is not None:
        other_out = _alongside_o(other_result, want_lse,
                                 {"o": out, "lse": lse, **dict(zip("qkv", other, strict=True))})
    _not_kept(state, "attention", {"o": out, "lse": lse})
    sent: dict[str, Any] = {**_sent("attention's o", out, tensor_limit(q.numel())),
                            "lse": None if lse is None else _sendable(
                                "attention's lse", lse, tensor_limit(q.numel())),
                            "lse_grad": bool(lse is not None and lse.requires_grad)}
    if grad is not None:
        sent.update(_kernel_grads(grad, out, lse, given, device))
    if other is not None:
        sent["alongside"] = _sendable("the o of the call made at the same time from a second "
                                      "thread", other_out, tensor_limit(q.numel()))
    if step.get("inputs_after"):
        sent["inputs"] = {n: _sendable(f"{n} after the call", t, tensor_limit(t.numel()))
                          for n, t in zip("qkv", given, strict=True)}
        sent["written"] = written
    return sent


def _kernel_cache(state: Executed, step: Mapping[str, Any]) -> dict[str, Any]:
    """One call of attention_with_cache(q, k_cache, v_cache, cache_seqlens=..., causal=...,
    block_table=..., k=..., v=...): o (and the LSE), and both caches as the call left them
    (the append is in place)."""
    device = state.device
    call = state.subject.cache_attention
    if call is None:
        raise RuntimeError("a cache step for a kernel without attention_with_cache")
    q, k_cache, v_cache = (step[t].to(device) for t in ("q", "k_cache", "v_cache"))
    keywords = dict(step.get("keywords", {}))
    keywords["cache_seqlens"] = torch.tensor(step["cache_seqlens"], dtype=torch.int32,
                                             device=device)
    if step.get("block_table") is not None:
        keywords["block_table"] = torch.tensor(step["block_table"], dtype=torch.int32,
                                               device=device).reshape(
            len(step["cache_seqlens"]), -1)
    given = {"q": q, "k_cache": k_cache, "v_cache": v_cache}
    for name in ("k", "v"):
        if step.get(name) is not None:
            keywords[name] = given[name] = step[name].to(device)
    shapes = ", ".join(f"{n} {tuple(t.shape)}" for n, t in given.items())
    shown = ", ".join(f"{k}={_shown(v)}" for k, v in keywords.items()
                      if k not in ("k", "v"))
    what = f"attention_with_cache({shapes}, {shown}) raised"
    _poison_outputs(step, q, device)
    result = _call(what, lambda: call(q, k_cache, v_cache, **keywords))
    out, lse = _outputs("attention_with_cache", result, bool(step.get("lse")), given)
    _not_kept(state, "attention_with_cache", {"o": out, "lse": lse})
    limit = tensor_limit(q.numel())
    sent: dict[str, Any] = {**_sent("attention_with_cache's o", out, limit),
                            "lse": None if lse is None else _sendable(
                                "attention_with_cache's lse", lse, limit),
                            "lse_grad": False}
    for name in ("k_cache", "v_cache"):
        sent[name] = _sendable(f"{name} after the call", given[name],
                               tensor_limit(given[name].numel()))
    return sent
