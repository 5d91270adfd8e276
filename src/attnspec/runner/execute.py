"""What the worker does with a subject: build, run, export its weights. Nothing is judged here.

The runner sends a request: an optional build (the configuration, seed, dtype and device) and a
list of steps, with every input tensor it wants run. The worker answers with the tensors the
subject produced, or with the subject's fault. The reference, the tolerance and every comparison
stay in the runner (docs/design.md, trust model), so a subject that monkeypatches torch or
attnspec in its own process changes only its own outputs, never a verdict.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
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
from .calls import (
    Executed,
    _call,
    _Fault,
    _plain,
    _sendable,
    _sent,
    _subject_error,
    _tensor_out,
    _Unfound,
    _Unsupported,
    answer_bool,
    reset_torch_state,
)
from .kernel_calls import _build_kernel, _kernel, _kernel_cache
from .subject import Subject, fault_frames, fault_text

__all__ = ["HANDLERS", "Executed", "answer_bool", "execute", "reset_torch_state"]

_T = TypeVar("_T")

_UNKNOWN_KEYS = 16  # export keys outside the protocol's named back, each cut to 100 characters


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
