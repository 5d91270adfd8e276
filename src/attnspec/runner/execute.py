"""What the worker does with a subject: build, run, export its weights. Nothing is judged here.

The runner sends a request: an optional build (the configuration, seed, dtype and device) and a
list of steps, with every input tensor it wants run. The worker answers with the tensors the
subject produced, or with the subject's fault. The reference, the tolerance and every comparison
stay in the runner (docs/design.md, trust model), so a subject that monkeypatches torch or
attnspec in its own process changes only its own outputs, never a verdict.
"""

from __future__ import annotations

import difflib
import math
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch import Tensor

from ..common.dtypes import dtype_from_name
from ..common.grad import vjp
from ..common.protocol import (
    bound_width,
    call_name,
    check_step,
    params_limit,
    tensor_limit,
)
from ..reference.module import BIAS_KEYS, WEIGHT_KEYS
from ..reference.spec import EXTRA_WEIGHT_KEYS
from .subject import Subject, fault_frames, fault_text

__all__ = ["HANDLERS", "Executed", "answer_bool", "execute", "reset_torch_state"]

_T = TypeVar("_T")

# Outputs smaller than this get 8 poisoned blocks, not 1: the allocator hands a small block back
# from one of several free lists (aligned allocations), and one NaN block was found by
# torch.empty in only about half the calls (64 KiB bounds the extra filling to 0.5 MiB a call).
_FEW_POISONED = 1 << 16
_UNKNOWN_KEYS = 16  # export keys outside the protocol's named back, each cut to 100 characters


class _Fault(Exception):
    """The subject raised or returned something unusable; the answer is an `error`."""


class _Unsupported(Exception):
    """A protocol v2 subject's supports(spec) declined the drawn spec: not an example."""


class _Unfound(Exception):
    """The weights found by name at the probe are not in this build (another structure)."""


def _subject_error(error: BaseException) -> bool:
    """Whether the subject may be blamed for `error`: anything its code raised, except Ctrl-C
    where Ctrl-C belongs to this process (in the worker SIGINT is ignored, so it is its own)."""
    if isinstance(error, KeyboardInterrupt):
        return signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    return True


@dataclass
class Executed:
    """The worker's state between requests: the module built for the current example."""

    subject: Subject
    module: torch.nn.Module | None = None
    device: str = "cpu"
    mesh: Any = None  # a rank's device mesh, handed to the sharding hooks
    n_embd: int = 0  # bound_width of the module built last: it bounds exports and gradients
    spec: Any = None  # the AttentionSpec the module was built for (v1: plain, of (C, H))
    kernel_inputs: tuple[Tensor, ...] | None = None  # a kernel's q, k, v of its last call
    # Its outputs of the last call, held: memory a later call returns again is the kernel's own.
    kernel_outputs: tuple[Tensor, ...] = ()


def reset_torch_state() -> None:
    """Undo global torch state a subject may have changed at import or in a previous example,
    so that one subject's side effects cannot make the next example fail."""
    torch.set_grad_enabled(True)
    torch.set_default_dtype(torch.float32)
    if hasattr(torch, "set_default_device"):
        torch.set_default_device(None)


def _call(what: str, fn: Callable[..., _T], *args: Any) -> _T:
    """fn(*args), the subject's code; what it raises becomes a fault that starts with `what`."""
    try:
        return fn(*args)
    except _Fault:  # already the subject's fault, said in full
        raise
    except BaseException as error:
        if not _subject_error(error):
            raise
        raise _Fault(f"{what}: {fault_text(error)}{fault_frames(error)}") from None


def answer_bool(call: str, value: Any, error: type[Exception]) -> bool:
    """A yes-or-no answer of the subject's: a bool or a numpy bool, nothing else (a tensor's
    truth raises, and a None or a number is more likely a bug than an answer)."""
    kind = type(value)
    if kind is bool or (kind.__module__ == "numpy" and kind.__name__ in ("bool_", "bool")):
        return bool(value)
    raise error(f"{call} returned {kind.__name__} {_shown(value)}, not a bool (True or "
                "False).")


def _shown(value: Any) -> str:
    try:
        text = repr(value)
    except BaseException:  # noqa: BLE001 - the subject's repr: show none
        return "(unprintable)"
    return text if len(text) <= 60 else text[:57] + "..."


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
                           _call("supports(case) raised", supports, dict(case)), _Fault):
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


def _kernel(state: Executed, step: Mapping[str, Any]) -> dict[str, Any]:
    """One call of the kernel: attention(q, k, v, causal=..., **keywords); with `grad`, the
    backward of sum(o * do) (+ sum(lse * dlse)); the outputs as plain tensors."""
    device = state.device
    grad = step.get("grad")
    given = [step[t].to(device) for t in "qkv"]
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
    q, k, v = given
    if grad is not None:
        for t in given:
            t.requires_grad_(True)
    state.kernel_inputs = (q, k, v)
    keywords = dict(step.get("keywords", {}))
    for name in ("cu_seqlens_q", "cu_seqlens_k"):
        if name in keywords:
            keywords[name] = torch.tensor(keywords[name], dtype=torch.int32, device=device)
    for name in ("alibi_slopes", "sinks"):
        if step.get(name) is not None:
            keywords[name] = step[name].to(device=device, dtype=torch.float32)
    if isinstance(keywords.get("window"), list):
        keywords["window"] = tuple(keywords["window"])
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
    # Just before the call, after this side's own allocations (its messages' strings above
    # are malloc'd too, and could take the freed block the poison is for).
    if step.get("lse"):  # LSEs come back in float32 (float64 for float64 inputs), as libraries do
        _poison([tuple(step["lse_shape"])], torch.float32, device)
    _poison([tuple(q.shape)], q.dtype, device)  # last: the block torch.empty(o) finds first
    if other is None:
        result = _call(what, run)
    else:  # a second call on other inputs of the same shapes, made at once from another thread
        result, other_result = _at_once(what, run, lambda: run(*other))
    written = ",".join(n for n, t, was in zip("qkv", given, versions, strict=True)
                       if t._version != was)
    want_lse = bool(step.get("lse"))
    if want_lse:
        if not (isinstance(result, tuple | list) and len(result) == 2):
            raise _Fault(f"attention returned {type(result).__name__}, not (o, lse): the "
                         "subject declares LSE, so it returns both.")
        out, lse = result
    else:
        if isinstance(result, tuple | list):
            raise _Fault(f"attention returned a {type(result).__name__} of "
                         f"{len(result)}, not o alone: the subject declares no LSE "
                         "(set LSE = 'natural' or 'base2' to have it checked).")
        out, lse = result, None
    for name, t in (("o", out), ("lse", lse)):
        if t is None:
            continue
        if type(t) is not Tensor:  # a subclass or a lazy tensor computes when read
            raise _Fault(f"attention returned {name} of type {type(t).__module__}."
                         f"{type(t).__qualname__}, not a plain torch.Tensor.")
        for input_name, t_in in zip("qkv", given, strict=True):
            if _same_memory(t, t_in):
                raise _Fault(f"attention returned {name} in the memory of its input "
                             f"{input_name}: an output must be a tensor of its own.")
    if lse is not None and _same_memory(out, lse):
        raise _Fault("attention returned o and lse in the same memory: each output must be a "
                     "tensor of its own.")
    if alongside is not None:
        other_out = other_result[0] if want_lse and isinstance(
            other_result, tuple | list) and len(other_result) == 2 else other_result
        if type(other_out) is not Tensor:
            raise _Fault(f"attention, called from a second thread at the same time, returned o "
                         f"of type {type(other_out).__module__}.{type(other_out).__qualname__}, "
                         "not a plain torch.Tensor.")
        for name, t in (("o", out), ("lse", lse), *zip("qkv", other or (), strict=False)):
            if t is not None and _same_memory(other_out, t):
                raise _Fault("attention, called from two threads at the same time, returned "
                             f"the second call's o in the memory of the first call's {name}: "
                             "each call must return tensors of its own.")
    _not_kept(state, "attention", {"o": out, "lse": lse})
    sent: dict[str, Any] = {**_sent("attention's o", out, tensor_limit(q.numel())),
                            "lse": None if lse is None else _sendable(
                                "attention's lse", lse, tensor_limit(q.numel())),
                            "lse_grad": bool(lse is not None and lse.requires_grad)}
    if grad is not None:
        outs, cotangents = [], []
        if grad.get("do") is not None and out.requires_grad:
            outs.append(out)
            cotangents.append(grad["do"].to(device=out.device, dtype=out.dtype))
        if grad.get("dlse") is not None and lse is not None and lse.requires_grad:
            outs.append(lse)
            cotangents.append(grad["dlse"].to(device=lse.device, dtype=lse.dtype))
        _poison([tuple(t.shape) for t in given], q.dtype, device)
        grads = _call("backward raised", lambda: vjp(outs, given, cotangents)) if outs else (
            None, None, None)
        for name, g, t in zip(("dq", "dk", "dv"), grads, given, strict=True):
            sent[name] = None if g is None else _sendable(f"d/d{name[1]}", g,
                                                          tensor_limit(t.numel()))
    if alongside is not None:
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
    if step.get("lse"):  # just before the call, as _kernel's
        _poison([tuple(step["lse_shape"])], torch.float32, device)
    _poison([tuple(q.shape)], q.dtype, device)
    result = _call(what, lambda: call(q, k_cache, v_cache, **keywords))
    if step.get("lse"):
        if not (isinstance(result, tuple | list) and len(result) == 2):
            raise _Fault(f"attention_with_cache returned {type(result).__name__}, not (o, lse): "
                         "the subject declares LSE, so it returns both.")
        out, lse = result
    else:
        if isinstance(result, tuple | list):
            raise _Fault(f"attention_with_cache returned a {type(result).__name__} of "
                         f"{len(result)}, not o alone: the subject declares no LSE.")
        out, lse = result, None
    for name, t in (("o", out), ("lse", lse)):
        if t is None:
            continue
        if type(t) is not Tensor:
            raise _Fault(f"attention_with_cache returned {name} of type "
                         f"{type(t).__module__}.{type(t).__qualname__}, not a plain "
                         "torch.Tensor.")
        for input_name, t_in in given.items():
            if _same_memory(t, t_in):
                raise _Fault(f"attention_with_cache returned {name} in the memory of its "
                             f"input {input_name}: an output must be a tensor of its own.")
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


def _build(state: Executed, spec: Mapping[str, Any]) -> None:
    if spec.get("kernel"):
        _build_kernel(state, spec)
        return
    C, H = int(spec["n_embd"]), int(spec["n_head"])
    dtype, device = dtype_from_name(spec["dtype"]), str(spec["device"])
    state.module, state.device, state.n_embd = None, device, bound_width(spec)
    reset_torch_state()
    args: tuple[Any, ...] = (C, H)
    call = f"build({C}, {H})"
    from ..reference.spec import AttentionSpec

    if spec.get("spec") is not None:
        attention: AttentionSpec | None = AttentionSpec.from_json(spec["spec"])
    else:  # v1: plain attention of (C, H), for the weights found by name
        try:
            attention = AttentionSpec(C, H)
        except ValueError:
            attention = None
    state.spec = attention
    if state.subject.protocol == 2:
        assert attention is not None
        args, call = (attention,), f"build(AttentionSpec({attention.describe()}))"
        supports = state.subject.supports
        if supports is not None and not answer_bool(
                f"supports(AttentionSpec({attention.describe()}))",
                _call("supports(spec) raised", supports, attention), _Fault):
            raise _Unsupported(call)
    with torch.random.fork_rng(devices=[]):
        # The same example builds the same weights on replay. The CPU generator alone: seeding
        # CUDA's too costs a queued call with a formatted stack each time CUDA is not yet up.
        torch.default_generator.manual_seed(int(spec["seed"]))
        try:
            module = state.subject.build(*args)
        except BaseException as error:
            if not _subject_error(error):
                raise
            raise _Fault(f"{call} raised for a valid configuration: "
                         f"{fault_text(error)}{fault_frames(error)}") from None
    if not isinstance(module, torch.nn.Module):
        raise _Fault(f"{call} returned {type(module).__name__}, not a torch.nn.Module.")
    _call(f".eval().to({device}, {spec['dtype']}) raised",
          lambda: module.eval().to(device=device, dtype=dtype))
    if spec.get("shard") is not None:
        module = _shard(state, module, str(spec["shard"]))
    state.module = module


def _shard(state: Executed, module: torch.nn.Module, kind: str) -> torch.nn.Module:
    """The sharding hook of `kind` applied to the module just built, on this rank's mesh."""
    from .subject import SHARD_HOOKS

    name = next(hook for hook, its in SHARD_HOOKS.items() if its == kind)
    if state.mesh is None:
        raise RuntimeError(f"the runner asked for {name} outside a gang")
    rank, world = state.mesh.get_local_rank(), state.mesh.size()
    call = f"{name}(module, mesh) on rank {rank} of {world}"
    sharded = _call(f"{call} raised", _hook(state, name), module, state.mesh)
    if sharded is None:  # changed in place
        return module
    if not isinstance(sharded, torch.nn.Module):
        raise _Fault(f"{call} returned {type(sharded).__name__}, not a torch.nn.Module (the "
                     "module to call) or None (the module it was given, changed in place).")
    return sharded


def _plain(value: Tensor) -> Tensor:
    """A sharded module's output as one ordinary tensor: a DTensor gathered in full, an
    AsyncCollectiveTensor waited for."""
    from torch.distributed.tensor import DTensor

    if isinstance(value, DTensor):
        value = value.full_tensor()
    wait = getattr(value, "wait", None)  # AsyncCollectiveTensor: the all-reduce in flight
    if callable(wait) and type(value) is not Tensor:
        value = wait()
    return value


def _tensor_out(out: Any, x: Tensor) -> Tensor:
    if isinstance(out, Tensor):
        return out
    hint = ""
    if isinstance(out, tuple):
        hint = (" (a tuple, as nn.MultiheadAttention returns (output, weights): return only "
                "the output tensor)")
    raise _Fault(f"forward returned {type(out).__name__}{hint}, not a Tensor.")


def _sendable(what: str, value: Tensor, limit: int | None = None) -> Tensor:
    """The subject's tensor as a plain CPU tensor to send; reading it (a subclass may raise
    anywhere) is the subject's business, so what it raises is its fault. Past `limit` elements,
    a meta tensor of its shape and dtype (the runner's shape checks name it; its values would
    only cost memory twice over)."""
    if type(value) not in (Tensor, torch.nn.Parameter):
        # Its methods answer .shape, .dtype and copies: a shape it lies about is broadcast.
        raise _Fault(f"{what} is a {type(value).__module__}.{type(value).__qualname__}, a "
                     "subclass of torch.Tensor, not a plain torch.Tensor: its own methods would "
                     "report its shape, dtype and values (return t.as_subclass(torch.Tensor) "
                     "if the data are right).")
    try:
        device, dtype = value.device.type, value.dtype
        shape = tuple(value.shape)
        if device == "meta":
            raise _Fault(f"{what} is on the meta device (shape {shape}): it holds no values to "
                         "compare.")
        if value.is_complex() or not (value.is_floating_point() or dtype == torch.bool):
            raise _Fault(f"{what} is a {dtype} tensor; attnspec compares floating tensors.")
        if limit is not None and value.numel() > limit:
            return torch.empty(shape, dtype=dtype, device="meta")
        # A copy: a view would let the subject rewrite what it returned before it is sent.
        plain = value.detach().to("cpu", copy=True)
        if type(plain) is not Tensor or tuple(plain.shape) != shape:
            raise _Fault(f"{what}: its copy is a {type(plain).__qualname__} of shape "
                         f"{tuple(plain.shape)}, though it reports shape {shape}.")
        return plain
    except _Fault:
        raise
    except BaseException as error:
        if not _subject_error(error):
            raise
        raise _Fault(f"{what}: reading it raised {fault_text(error)}") from None


def _sent(what: str, out: Tensor, limit: int | None = None) -> dict[str, Any]:
    """An output as the runner gets it: the values (past `limit` elements, the shape alone),
    and the device it was on."""
    plain = _sendable(what, out, limit)
    return {"out": plain, "device": _call(f"{what}: reading its device raised",
                                          lambda: str(out.device.type))}


def _unchanged(given: Mapping[str, Tensor]) -> Callable[[str], None]:
    """A check, for after each call, that the tensors given are as they were now (the
    caller's hidden states and masks: a hook that writes into them corrupts the model)."""
    before = {name: t.detach().clone() for name, t in given.items()}

    def check(call: str) -> None:
        for name, t in given.items():
            was = before[name]
            same = _call(f"{call}: comparing {name} after the call raised",
                         lambda t=t, was=was: t.shape == was.shape and t.dtype == was.dtype
                         and (torch.equal(t, was)  # one pass; NaN padding needs the second
                              or bool(((t == was) | (t != t) & (was != was)).all())))
            if not same:
                raise _Fault(f"{call} wrote into its input {name}: a hook must leave the "
                             "tensors it is given unchanged.")
    return check


def _param_grads(state: Executed, params: Sequence[tuple[str, Tensor]],
                 grads: Sequence[Tensor | None]) -> dict[str, Tensor | None]:
    """The parameters' gradients to send, by name; a fault past what a module of width C may
    hold (`answer_limit` counts the same)."""
    total, limit = sum(p.numel() for _, p in params), params_limit(state.n_embd)
    if total > limit:
        raise _Fault(f"the module's {len(params)} parameters hold {total} elements, more than "
                     f"the {limit} (64 x W² + 2^20, W={state.n_embd}: C or H·D) whose gradients "
                     "attnspec takes back; their gradients were not sent.")
    return {n: None if g is None else _sendable(f"d(output)/d({n})", g)
            for (n, _), g in zip(params, grads, strict=True)}


def _forward(module: torch.nn.Module, x: Tensor, grad: bool, state: Executed | None = None,
             step: Mapping[str, Any] | None = None) -> Tensor:
    """module(x); with a step's `mask`, the padded hook; with its `x_kv`, the cross hook; with
    its `offset`, the shifted hook. A hook must leave its inputs as they were."""
    what = f"forward raised on input of shape {tuple(x.shape)}"
    call: Callable[[], Any] = lambda: module(x)  # noqa: E731
    given: dict[str, Tensor] = {}
    if step is not None and state is not None and step.get("mask") is not None:
        mask = step["mask"].to(device=x.device, dtype=torch.bool)
        name, given = "padded(module, x, key_mask)", {"x": x, "key_mask": mask}
        call = lambda: _hook(state, "padded")(module, x, mask)  # noqa: E731
    elif step is not None and state is not None and step.get("x_kv") is not None:
        x_kv = step["x_kv"].to(x.device)
        name, given = "cross(module, x_q, x_kv)", {"x_q": x, "x_kv": x_kv}
        call = lambda: _hook(state, "cross")(module, x, x_kv)  # noqa: E731
    elif step is not None and state is not None and step.get("offset") is not None:
        offset = int(step["offset"])
        name, given = f"shifted(module, x, offset={offset})", {"x": x}
        call = lambda: _hook(state, "shifted")(module, x, offset)  # noqa: E731
    if given:
        shapes = ", ".join(f"{k} of shape {tuple(t.shape)}" for k, t in given.items()
                           if k != "key_mask")
        what = f"{name} raised on {shapes}"
        unchanged = _unchanged(given)

    def run() -> Any:
        with torch.set_grad_enabled(grad):
            return call()

    out = _tensor_out(_call(what, run), x)
    if given:
        unchanged(f"{name} on {shapes}")
    return out


def _hook(state: Executed, name: str) -> Any:
    hook = state.subject.hooks.get(name)
    if hook is None:
        raise RuntimeError(f"the runner asked for the {name} hook, which the subject lacks")
    return hook


def _decode(state: Executed, module: torch.nn.Module, x: Tensor, chunks: list[int],
            mask: Tensor | None = None) -> Tensor:
    """The decode hook over x, chunk by chunk, each against the cache the last one returned;
    with a key mask, the decode_padded hook, given the mask up to the chunk's end. Each
    chunk's output has the chunk's shape, dtype and device, and the inputs stay unchanged."""
    hook = _hook(state, "decode" if mask is None else "decode_padded")
    cache, offset, outs = None, 0, []
    # All of x and the mask: a chunk's call may reach past its own view into later tokens.
    unchanged = _unchanged({"x": x} if mask is None else {"x": x, "key_mask": mask})
    B, _, C = x.shape
    for size in chunks:
        piece = x[:, offset:offset + size]
        seen = None if mask is None else mask[:, :offset + size]
        call = (f"decode(module, x[:, {offset}:{offset + size}], cache, offset={offset})"
                if seen is None else f"decode_padded(module, x[:, {offset}:{offset + size}], "
                f"key_mask[:, :{offset + size}], cache, offset={offset})")

        def run(piece: Tensor = piece, seen: Tensor | None = seen, cache: Any = cache,
                offset: int = offset) -> Any:
            with torch.no_grad():
                if seen is None:
                    return hook(module, piece, cache, offset)
                return hook(module, piece, seen, cache, offset)

        result = _call(f"{call} raised", run)
        pair = _call(f"{call}: unpacking its result raised",
                     lambda result=result: tuple(result) if isinstance(result, tuple) else None)
        if pair is None or len(pair) != 2:
            raise _Fault(f"{call} returned {type(result).__name__}, not (output, cache).")
        out, cache = pair
        out = _tensor_out(out, piece)
        layout = _call(f"{call}: reading its output's shape, dtype and device raised",
                       lambda out=out: (tuple(out.shape), out.dtype, out.device))
        if layout != ((B, size, C), piece.dtype, piece.device):
            raise _Fault(f"{call} returned output of shape {layout[0]} {layout[1]} on "
                         f"{layout[2]}, not {(B, size, C)} {piece.dtype} on {piece.device} "
                         "like its input.")
        unchanged(call)
        outs.append(out)
        offset += size
    return _call("joining the decoded chunks (torch.cat) raised",  # subclasses may refuse
                 lambda: torch.cat(outs, dim=1))


def _parameters(module: torch.nn.Module) -> list[tuple[str, Tensor]]:
    return _call("module.named_parameters() raised", lambda: [  # its own tensors' flags too
        (n, p) for n, p in module.named_parameters() if isinstance(p, Tensor) and p.requires_grad])


def _export(subject: Subject, module: torch.nn.Module,
            unknown: list[str] | None = None, found: str | None = None,
            spec: Any = None) -> dict[str, Tensor]:
    """The exported tensors, still attached to the module (for pullbacks); the names of keys
    outside the protocol's are added to `unknown` (the runner names them against the spec).
    `found`: the weights the runner confirmed by name (runner/finder.py), for a subject with no
    export_weights."""
    if found is not None and subject.export_weights is None:
        from .finder import candidates

        guesses = _call("looking for the module's projections by name raised", candidates,
                        module, spec)
        chosen = next((c for c in guesses if c.id == found), None)
        if chosen is None:
            raise _Unfound(found)
        return _call(f"reading {chosen.describe} raised", chosen.weights)
    if subject.export_weights is None:
        raise _Fault("the subject has no export_weights")
    exported = _call("export_weights raised", subject.export_weights, module)
    if not isinstance(exported, Mapping):
        raise _Fault(f"export_weights returned {type(exported).__name__}, not a mapping of "
                     f"{', '.join(WEIGHT_KEYS)} to tensors.")
    weights = _call("iterating export_weights' mapping raised", lambda: dict(exported.items()))
    if unknown is not None:
        known = (*WEIGHT_KEYS, *BIAS_KEYS, *EXTRA_WEIGHT_KEYS)
        unknown += sorted(str(k)[:100] for k in weights if k not in known)
    return _call("reading export_weights' mapping raised", _exported, weights)


def _exported(weights: dict[Any, Any]) -> dict[str, Tensor]:
    """The protocol's keys of the mapping export_weights returned (its keys are its own)."""
    missing = [k for k in WEIGHT_KEYS if k not in weights]
    if missing:
        keys = sorted(map(str, weights))
        # A misspelt key is missing under its own name: say which of the others it may be.
        odd = [k for k in keys if k not in (*WEIGHT_KEYS, *BIAS_KEYS)]
        guess = {k: difflib.get_close_matches(k, missing, n=1) for k in odd}
        typos = "".join(f" {k!r} is no key of the protocol's; did you mean {g[0]!r}?"
                        for k, g in guess.items() if g)
        raise _Fault(f"export_weights returned keys {keys}; missing {', '.join(missing)}."
                     + typos)
    out = {}
    for key in (*WEIGHT_KEYS, *BIAS_KEYS, *EXTRA_WEIGHT_KEYS):
        value = weights.get(key)
        if value is None:
            continue
        if not isinstance(value, Tensor):
            raise _Fault(f"export_weights: {key} is {type(value).__name__}, not a Tensor.")
        out[key] = value
    return out


def _refuses(state: Executed, step: Mapping[str, Any]) -> dict[str, Any]:
    """Divisibility: build alone, on a configuration it must refuse."""
    C, H = int(step["n_embd"]), int(step["n_head"])
    reset_torch_state()
    with torch.random.fork_rng(devices=[]):
        try:
            built = state.subject.build(C, H)
        except BaseException as error:
            if not _subject_error(error):
                raise
            return {"raised": True, "type": type(error).__name__}
    return {"raised": False, "type": type(built).__name__}


def _decode_step(state: Executed, step: Mapping[str, Any]) -> dict[str, Any]:
    module = _module(state, step)
    tokens: Tensor = step["x"].to(state.device)
    mask = step.get("mask")
    out = _decode(state, module, tokens, [int(n) for n in step["chunks"]],
                  None if mask is None else mask.to(device=tokens.device, dtype=torch.bool))
    return _sent("decode's output", out, tensor_limit(tokens.numel()))


def _forward_step(state: Executed, step: Mapping[str, Any]) -> dict[str, Any]:
    module = _module(state, step)
    x: Tensor = step["x"].to(state.device)
    out = _forward(module, x, grad=False, state=state, step=step)
    result = _sent("forward's output", out, tensor_limit(x.numel()))
    if step.get("keep_input"):
        result["input"] = x
    return result


def _grad(state: Executed, step: Mapping[str, Any]) -> dict[str, Any]:
    module = _module(state, step)
    x = step["x"].to(state.device).requires_grad_(True)
    params = _parameters(module) if step.get("params") else []
    out = _forward(module, x, grad=True, state=state, step=step)
    sent = _sent("forward's output", out, tensor_limit(x.numel()))
    if not _call("reading the output's requires_grad raised", lambda: bool(out.requires_grad)):
        return {**sent, "grad_x": None, "params": {}}
    if sent["out"].shape != step["cotangent"].shape:  # else backward's own, obscure error
        raise _Fault(f"{call_name(step)} returned {tuple(sent['out'].shape)} for input "
                     f"{tuple(x.shape)}: its backward needs an output of the input's shape.")
    cotangent = _call("moving the cotangent to the output's device raised",
                      lambda: step["cotangent"].to(device=out.device, dtype=out.dtype))
    grads = _call("backward raised", lambda: vjp([out], [x, *(p for _, p in params)],
                                                 [cotangent]))
    return {**sent,
            "grad_x": None if grads[0] is None else _sendable("d(output)/d(input)", grads[0],
                                                              tensor_limit(x.numel())),
            "params": _param_grads(state, params, grads[1:])}


def _shard_refuses(state: Executed, step: Mapping[str, Any]) -> dict[str, Any]:
    """The sharding hook, on a spec the world does not divide."""
    module = _module(state, step)
    name = str(step["hook"])
    try:
        _hook(state, name)(module, state.mesh)
    except BaseException as error:
        if not _subject_error(error):
            raise
        return {"raised": True, "message": fault_text(error)}
    return {"raised": False}


def _sharded_grad(state: Executed, step: Mapping[str, Any]) -> dict[str, Any]:
    """One rank's share of a sharded forward and backward."""
    module = _module(state, step)
    x = step["x"].to(state.device).requires_grad_(True)
    params = _parameters(module)
    out = _forward(module, x, grad=True)
    from torch.distributed.tensor import DTensor

    if isinstance(out, DTensor):  # gathered before the backward, which then scatters
        out = _tensor_out(_call("gathering the output (full_tensor()) raised",
                                lambda: out.full_tensor()), x)
    if _call("reading the output's requires_grad raised", lambda: bool(out.requires_grad)):
        cotangent = _call("moving the cotangent to the output's device raised",
                          lambda: step["cotangent"].to(device=out.device, dtype=out.dtype))
        grads = _call("backward raised", lambda: vjp([out], [x, *(p for _, p in params)],
                                                     [cotangent]))
    else:
        grads = (None,) * (1 + len(params))
    full = _tensor_out(_call("gathering the output raised", lambda: _plain(out.detach())), x)
    shared: dict[str, Any] = _sent("forward's output", full, tensor_limit(x.numel()))
    gx = grads[0]
    shared["grad_x"] = None if gx is None else _sendable(
        "d(output)/d(input)", _call("gathering d(output)/d(input) raised", _plain, gx),
        tensor_limit(x.numel()))
    layouts, gathered = {}, {}
    _param_grads(state, params, [None] * len(params))  # the bound, before any gathering
    for (name, _), g in zip(params, grads[1:], strict=True):
        from torch.distributed.tensor import DTensor

        layouts[name] = "dtensor" if isinstance(g, DTensor) else "local"
        gathered[name] = None if g is None else _sendable(
            f"d(output)/d({name})", _call(f"gathering d(output)/d({name}) raised",
                                          lambda g=g: _plain(g)))
    return {**shared, "params": gathered, "param_layout": layouts}


def _module_type(state: Executed, step: Mapping[str, Any]) -> dict[str, Any]:
    """What build returned, for the runner's protocol hints."""
    module = _module(state, step)
    return {"type": type(module).__name__[:200],
            "mha": isinstance(module, torch.nn.MultiheadAttention)}


def _find_weights(state: Executed, step: Mapping[str, Any]) -> dict[str, Any]:
    """Guesses by name, for the runner to confirm or drop."""
    module = _module(state, step)
    from .finder import candidates

    found = _call("looking for the module's projections by name raised", candidates,
                  module, state.spec)
    return {"candidates": [
        {"id": c.id[:200], "describe": c.describe[:400],
         "weights": {k: _sendable(f"{c.id}'s {k}", v.detach(),
                                  tensor_limit(state.n_embd * state.n_embd))
                     for k, v in _call(f"reading {c.describe} raised", c.weights).items()}}
        for c in found]}


def _export_step(state: Executed, step: Mapping[str, Any]) -> dict[str, Any]:
    module = _module(state, step)
    unknown: list[str] = []
    weights = _export(state.subject, module, unknown, step.get("found"), state.spec)
    return {"weights": {k: _sendable(f"export_weights' {k}", v,
                                     tensor_limit(state.n_embd * state.n_embd))
                        for k, v in weights.items()},
            "unknown": unknown[:_UNKNOWN_KEYS],
            "connected": _call("reading export_weights' requires_grad raised", lambda: [
                k for k, v in weights.items() if v.requires_grad])}


def _pullback(state: Executed, step: Mapping[str, Any]) -> dict[str, Any]:
    """The reference's weight gradients, mapped onto the parameters."""
    module = _module(state, step)
    given: dict[str, Tensor] = step["grads"]
    params = _parameters(module)

    def pull() -> Any:
        with torch.enable_grad():
            weights = _export(state.subject, module, None, step.get("found"), state.spec)
            keys = [k for k in given if k in weights and weights[k].requires_grad]
            outs = [weights[k] for k in keys]
            return vjp(outs, [p for _, p in params],
                       [given[k].to(device=o.device, dtype=o.dtype)
                        for k, o in zip(keys, outs, strict=True)])

    mapped = _call("mapping the reference's weight gradients through export_weights "
                   "raised", pull)
    return {"params": _param_grads(state, params, mapped)}


def _module(state: Executed, step: Mapping[str, Any]) -> torch.nn.Module:
    assert state.module is not None, step["op"]  # _step: an operation on_module needs a build
    return state.module


HANDLERS: dict[str, Callable[[Executed, Mapping[str, Any]], dict[str, Any]]] = {
    "refuses": _refuses, "kernel": _kernel, "kernel_cache": _kernel_cache, "decode": _decode_step,
    "forward": _forward_step, "grad": _grad, "shard_refuses": _shard_refuses,
    "sharded_grad": _sharded_grad, "module_type": _module_type, "find_weights": _find_weights,
    "export": _export_step, "pullback": _pullback}
"""The worker's side of each operation of the protocol (common/protocol.py OPERATIONS)."""


def _step(state: Executed, step: Mapping[str, Any]) -> dict[str, Any]:
    op = check_step(step)
    if op.on_module and state.module is None:
        raise RuntimeError(f"step {op.name!r} before any build")
    return HANDLERS[op.name](state, step)


def execute(state: Executed, request: Mapping[str, Any]) -> dict[str, Any]:
    """Answer one request: `{"kind": "ok", "results": [...]}` or the subject's fault."""
    try:
        if request.get("build") is not None:
            _build(state, request["build"])
        results = []
        for step in request["steps"]:
            reset_torch_state()
            results.append(_step(state, step))
        return {"kind": "ok", "results": results}
    except _Fault as fault:
        return {"kind": "error", "message": str(fault)}
    except _Unsupported as unsupported:
        which = "supports(case)" if state.subject.protocol == "kernel" else "supports(spec)"
        return {"kind": "unsupported", "message": f"{which} is False for {unsupported}"}
    except _Unfound as unfound:
        return {"kind": "unsupported", "unfound": True, "message": (
            f"the weights found by name ({unfound}) are not in the module built for this "
            "example: its projections are laid out otherwise here")}
