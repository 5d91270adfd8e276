"""What the runner accepts from a worker or a rank: every answer checked field by field.

The worker's process is the subject's: it may write its own frames into attnspec's pipe, so an
answer that decodes is still only a claim. Each step's result is checked against the step the
runner sent (keys, types, and the shapes, dtypes and devices the runner relies on) before any
comparison; anything else is a `BadAnswer`, which the runner makes the subject's `error`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

from ..reference.module import BIAS_KEYS, WEIGHT_KEYS
from ..reference.spec import EXTRA_WEIGHT_KEYS

__all__ = ["OPERATIONS", "BadAnswer", "Executor", "Operation", "Ranks", "answer_limit",
           "bound_width", "call_name", "check_kind", "check_results", "check_step", "consequence",
           "params_limit", "tensor_limit"]

_KINDS = ("ok", "error", "unsupported")


class Executor(Protocol):
    """What runs a subject's requests (a worker process, or the subject in process): one
    request is a build and its steps; its answer is checked here before it counts."""

    info: Any  # runner.worker.SubjectInfo: what the subject declared at load

    def run(self, request: dict[str, Any]) -> dict[str, Any]: ...

    def submit(self, request: dict[str, Any]) -> None:
        """Start `request`; `collect` gives its answer (the runner works in between)."""

    def collect(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


class Ranks(Protocol):
    """The processes of one sharded world (runner.gang.Gang): one request per rank."""

    probe_futile: bool

    def submit(self, requests: Sequence[dict[str, Any]]) -> None: ...

    def collect(self) -> list[dict[str, Any]]: ...

    def run(self, requests: Sequence[dict[str, Any]]) -> list[dict[str, Any]]: ...

    def restart_later(self) -> None: ...


# What a rank says when a peer, not its own code, failed it (gloo's words, and NCCL's).
_CONSEQUENCES = ("stopped after another rank failed", "Connection closed by peer",
                 "Connection reset by peer", "Timed out waiting", "Socket Timeout",
                 "NCCL communicator was aborted", "Broken pipe", "connection closed",
                 "Connection refused")


def consequence(message: str) -> bool:
    """Whether a rank's error reads as a peer's failure, not its own."""
    return any(c.lower() in message.lower() for c in _CONSEQUENCES)


class BadAnswer(Exception):
    """An answer that is not what the runner asked for; the subject's fault."""


def _shown(value: Any) -> str:
    text = repr(value) if not isinstance(value, Tensor) else "a tensor"
    return text if len(text) <= 80 else text[:77] + "..."


def _kind_name(value: Any) -> str:
    return "a tensor" if isinstance(value, Tensor) else type(value).__name__


def check_kind(answer: Any, who: str = "the worker") -> tuple[str, str]:
    """(kind, message) of an answer: ok, error or unsupported, and a message for the latter."""
    if not isinstance(answer, dict):
        raise BadAnswer(f"{who} answered {_kind_name(answer)} {_shown(answer)}, not an answer "
                        "(did the subject write to attnspec's pipe?).")
    kind = answer.get("kind")
    if kind not in _KINDS:
        raise BadAnswer(f"{who} answered with kind {_shown(kind)}, not one of "
                        f"{', '.join(_KINDS)} (did the subject write to attnspec's pipe?).")
    message = answer.get("message", "")
    if kind != "ok" and not isinstance(message, str):
        raise BadAnswer(f"{who}'s {kind} answer has 'message' of type {_kind_name(message)}, "
                        "not a str.")
    return str(kind), str(message)


def check_results(answer: Mapping[str, Any], steps: Sequence[Mapping[str, Any]], *,
                  device: str | None, layout: bool = True,
                  who: str = "the worker") -> list[dict[str, Any]]:
    """An `ok` answer's results, one per step, each checked against its step.

    `device`: where the module runs (None: not checked). `layout`: whether outputs must have
    their input's shape, dtype and device (False where the property judges that itself)."""
    results = answer.get("results")
    if not (isinstance(results, list) and len(results) == len(steps)
            and all(isinstance(r, dict) for r in results)):
        raise BadAnswer(f"{who} answered {len(steps)} steps with "
                        f"{_kind_name(results)} {_shown(results)}, not one result per step "
                        "(did the subject write to attnspec's pipe?).")
    for step, result in zip(steps, results, strict=True):
        _Result(step, result, who).check(device, layout)
    return results


def call_name(step: Mapping[str, Any]) -> str:
    """The subject's call that a step stands for, as messages name it."""
    op = step["op"]
    if op == "decode":
        return "decode_padded" if step.get("mask") is not None else "decode"
    if op in ("forward", "grad"):
        for key, hook in (("mask", "padded(module, x, key_mask)"),
                          ("x_kv", "cross(module, x_q, x_kv)"),
                          ("offset", "shifted(module, x, offset)")):
            if step.get(key) is not None:
                return hook
    record = OPERATIONS.get(str(op))
    return record.call if record is not None and record.call else str(op)


class _Result:
    """One step's result, checked: each method raises `BadAnswer` naming the step and field."""

    def __init__(self, step: Mapping[str, Any], result: dict[str, Any], who: str) -> None:
        self.step, self.result, self.who = step, result, who
        self.what = f"{who}'s answer to {step['op']}"

    def check(self, device: str | None, layout: bool) -> None:
        getattr(self, OPERATIONS[self.step["op"]].answer)(device, layout)

    def output(self, device: str | None, layout: bool) -> None:
        """A module's output (its input's shape, dtype and device), and for gradients d/dx
        (x's shape) and the parameters'; a sharded one says which were DTensors."""
        op = self.step["op"]
        out = self.tensor("out")
        where = self.plain("device", str)
        if layout or op != "forward":
            self.same_layout(out, where, device)
        if op == "forward" and self.step.get("keep_input"):
            self.tensor("input")
        if op in ("grad", "sharded_grad"):
            grad = self.tensor("grad_x", optional=True)
            x = self.step["x"]
            if grad is not None and tuple(grad.shape) != tuple(x.shape):
                raise BadAnswer(f"{self.what} has 'grad_x' of shape {tuple(grad.shape)}, not "
                                f"its input's {tuple(x.shape)}.")
            self.tensors("params", optional=True)
        if op == "sharded_grad":
            layouts = self.plain("param_layout", dict)
            if not all(isinstance(k, str) and v in ("dtensor", "local")
                       for k, v in layouts.items()):
                raise BadAnswer(f"{self.what} has 'param_layout' {_shown(layouts)}, not "
                                "parameter names -> 'dtensor' or 'local'.")

    def export(self, device: str | None, layout: bool) -> None:
        """The protocol's weight keys (each a floating tensor), the keys left out, and which
        of them carry gradients."""
        weights = self.tensors("weights")
        unknown = sorted(set(weights) - {*WEIGHT_KEYS, *BIAS_KEYS, *EXTRA_WEIGHT_KEYS})
        missing = [k for k in WEIGHT_KEYS if k not in weights]
        if unknown or missing:
            raise BadAnswer(f"{self.what} has weights {sorted(weights)}, not "
                            f"{', '.join(WEIGHT_KEYS)} and optional biases and spec "
                            "extras.")
        named = self.plain("unknown", list, optional=True)
        if named is not None and not all(isinstance(k, str) for k in named):
            raise BadAnswer(f"{self.what} has 'unknown' {_shown(named)}, not a list of "
                            "key names.")
        connected = self.plain("connected", list)
        if not all(isinstance(k, str) and k in weights for k in connected):
            raise BadAnswer(f"{self.what} has 'connected' {_shown(connected)}, not a list "
                            "of the exported keys.")

    def pullback(self, device: str | None, layout: bool) -> None:
        self.tensors("params", optional=True)

    def module_type(self, device: str | None, layout: bool) -> None:
        self.plain("type", str)
        self.plain("mha", bool)

    def find_weights(self, device: str | None, layout: bool) -> None:
        found = self.plain("candidates", list)
        keys = {*WEIGHT_KEYS, *BIAS_KEYS, *EXTRA_WEIGHT_KEYS}
        if len(found) > 8 or not all(
                isinstance(c, dict) and isinstance(c.get("id"), str)
                and isinstance(c.get("describe"), str) and isinstance(c.get("weights"), dict)
                and set(c["weights"]) <= keys and all(
                    isinstance(t, Tensor) and t.is_floating_point()
                    for t in c["weights"].values()) for c in found):
            raise BadAnswer(f"{self.what} has 'candidates' {_shown(found)}, not up to 8 "
                            "guesses of an id, a description and weights by the protocol's "
                            "keys.")

    def refusal(self, device: str | None, layout: bool) -> None:
        """Whether build (or the sharding hook) raised, and its exception's type or message."""
        op = self.step["op"]
        self.plain("raised", bool)
        self.plain("type" if op == "refuses" else "message", str,
                   optional=op == "shard_refuses")

    def _out_and_lse(self) -> tuple[Tensor | None, str, Tensor | None]:
        """A kernel answer's o, its device, and its LSE (a floating tensor) where sent."""
        out = self.tensor("out")
        where = self.plain("device", str)
        lse = self.tensor("lse", optional=True)
        if lse is not None and not lse.is_floating_point():  # tensor() also lets masks through
            raise BadAnswer(f"{self.what} has 'lse' of dtype {lse.dtype}, not a floating "
                            "tensor.")
        self.plain("lse_grad", bool)
        return out, where, lse

    def kernel(self, device: str | None, layout: bool) -> None:
        """A kernel call's o (the declared shape, q's dtype, the device), its LSE where
        declared, gradients of q's, k's and v's shapes, and the inputs as the call left them."""
        out, where, lse = self._out_and_lse()
        step = self.step
        grads = {g: self.tensor(g, optional=True) for g in ("dq", "dk", "dv") if g in self.result}
        if step.get("inputs_after"):
            self.tensors("inputs")
            written = self.plain("written", str, optional=True)
            names = [n for n in (written or "").split(",") if n]
            if len(set(names)) != len(names) or any(n not in ("q", "k", "v") for n in names):
                raise BadAnswer(f"{self.what} has 'written' {written!r:.40}, not a "
                                "comma-separated list of distinct names among q, k and v.")
        if step.get("lse") and lse is None:
            raise BadAnswer(f"{self.what} has no 'lse', though the subject declares one.")
        for (name, g), t in zip(grads.items(), "qkv", strict=False):
            if g is not None and tuple(g.shape) != tuple(step[t].shape):
                raise BadAnswer(f"{self.what} has {name!r} of shape {tuple(g.shape)}, not "
                                f"{t}'s {tuple(step[t].shape)}.")
        if step.get("alongside") is not None:
            self.tensor("alongside")
        if not layout:
            return
        assert out is not None
        q: Tensor = step["q"]
        want = tuple(step["out_shape"])
        problems = []
        if tuple(out.shape) != want:
            problems.append(f"o of shape {tuple(out.shape)}, not {want}")
        if out.dtype != q.dtype:
            problems.append(f"o of dtype {out.dtype}, not q's {q.dtype}")
        if device is not None and where != device:
            problems.append(f"o on {where}, not {device}")
        if lse is not None and step.get("lse") and tuple(lse.shape) != tuple(step["lse_shape"]):
            problems.append(f"an LSE of shape {tuple(lse.shape)}, not "
                            f"{tuple(step['lse_shape'])} (LSE_LAYOUT)")
        if step.get("alongside") is not None:
            other = self.tensor("alongside")
            assert other is not None
            if tuple(other.shape) != want or other.dtype != q.dtype:
                problems.append(f"o {tuple(other.shape)} {other.dtype} from the call made at the "
                                f"same time from a second thread, not {want} {q.dtype}")
        if problems:
            raise BadAnswer(f"attention returned {'; '.join(problems)} for q {tuple(q.shape)}, so "
                            "this property cannot be checked (see width and dtype).")

    def kernel_cache(self, device: str | None, layout: bool = True) -> None:
        """A cache call's o (the declared shape, q's dtype, the device), its LSE where
        declared, and k_cache and v_cache after the call, of the shapes and dtype sent."""
        out, where, lse = self._out_and_lse()
        step = self.step
        assert out is not None
        problems = []
        for name in ("k_cache", "v_cache"):
            after, sent = self.tensor(name), step[name]
            assert after is not None
            if tuple(after.shape) != tuple(sent.shape) or after.dtype != sent.dtype:
                problems.append(f"{name} after the call {tuple(after.shape)} {after.dtype}, "
                                f"not as sent {tuple(sent.shape)} {sent.dtype}")
        q: Tensor = step["q"]
        want = tuple(step["out_shape"])
        if tuple(out.shape) != want or out.dtype != q.dtype:
            problems.append(f"o {tuple(out.shape)} {out.dtype}, not {want} {q.dtype}")
        if device is not None and where != device:
            problems.append(f"o on {where}, not {device}")
        if step.get("lse"):
            if lse is None:
                problems.append("no LSE, though the subject declares one")
            elif tuple(lse.shape) != tuple(step["lse_shape"]):
                problems.append(f"an LSE of shape {tuple(lse.shape)}, not "
                                f"{tuple(step['lse_shape'])} (LSE_LAYOUT)")
        if problems:
            raise BadAnswer(f"attention_with_cache returned {'; '.join(problems)} for q "
                            f"{tuple(q.shape)}, so this property cannot be checked.")

    def field(self, key: str) -> Any:
        if key not in self.result:
            raise BadAnswer(f"{self.what} has no '{key}' (keys: {sorted(self.result)}).")
        return self.result[key]

    def plain(self, key: str, kind: type, optional: bool = False) -> Any:
        if optional and key not in self.result:
            return None
        value = self.field(key)
        if not isinstance(value, kind):
            raise BadAnswer(f"{self.what} has '{key}' of type {_kind_name(value)}, not "
                            f"{kind.__name__}.")
        return value

    def tensor(self, key: str, optional: bool = False) -> Tensor | None:
        value = self.field(key)
        if value is None and optional:
            return None
        if not isinstance(value, Tensor):
            raise BadAnswer(f"{self.what} has '{key}' of type {_kind_name(value)}, not a "
                            "tensor.")
        if not (value.is_floating_point() or value.dtype == torch.bool):
            raise BadAnswer(f"{self.what} has '{key}' of dtype {value.dtype}, not a floating "
                            "tensor.")
        return value

    def tensors(self, key: str, optional: bool = False) -> dict[str, Tensor | None]:
        """A mapping of names to tensors (None allowed where `optional`)."""
        value = self.plain(key, dict)
        for name, item in value.items():
            if item is None and optional:
                continue
            if not (isinstance(name, str) and isinstance(item, Tensor)
                    and item.is_floating_point()):
                raise BadAnswer(f"{self.what} has '{key}' [{_shown(name)}] of type "
                                f"{_kind_name(item)}, not a floating tensor.")
        return value  # type: ignore[no-any-return]

    def same_layout(self, out: Tensor | None, where: str, device: str | None) -> None:
        """The output has its (query) input's shape and dtype, on the module's device."""
        assert out is not None
        x: Tensor = self.step["x"]
        if (tuple(out.shape) == tuple(x.shape) and out.dtype == x.dtype
                and (device is None or where == device)):
            return
        call = call_name(self.step)
        if self.who != "the worker":  # a rank: say which
            call = f"{self.who}: {call}"
        see = ("see width and dtype" if call == "forward" else
               "its output must have its (query) input's shape, dtype and device")
        raise BadAnswer(f"{call} returned {tuple(out.shape)} {out.dtype} on {where} for input "
                        f"{tuple(x.shape)} {x.dtype} on {device or where}, so this property "
                        f"cannot be checked ({see}).")


# ---- the operations: one record each, read by both sides ----------------------------------

# How large an answer may be, from its request's shapes. The worker withholds an output over its
# bound (it sends the shape and dtype alone), and the runner refuses a frame over the answer's.
_SLACK = 4  # an output may have 4 x its input's elements (a wrong shape, still sent whole)
_SMALL = 4096  # elements any output may have, however small its input
_PARAMS = 64  # parameter gradients: 64 x C² + 2^20 elements in all (the reference has 4 x C²)
_HEADER = 1 << 22  # bytes for the JSON header: messages, parameter names, shapes
_ITEM = 8  # bytes per element of the widest dtype sent, float64


def tensor_limit(numel: int) -> int:
    """The elements an output standing for `numel` elements (its input's) may have and still
    be sent whole."""
    return _SLACK * numel + _SMALL


def params_limit(n_embd: int) -> int:
    """The elements a module's parameter gradients may have, for a module of width `n_embd`."""
    return _PARAMS * n_embd * n_embd + (1 << 20)


def _numel(step: Mapping[str, Any], *names: str) -> int:
    return sum(step[n].numel() for n in names if isinstance(step.get(n), Tensor))


_EXPORTED = len(WEIGHT_KEYS + BIAS_KEYS + EXTRA_WEIGHT_KEYS)


@dataclass(frozen=True)
class Operation:
    """One operation the runner asks a worker or a rank for: the fields its step may carry
    (`required` and `optional`, besides "op"), whether it runs on the module built last, the
    `_Result` method that checks its answer, the most elements that answer holds (given the
    step and the module's width), and the subject's call it stands for in messages."""

    name: str
    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    on_module: bool = True
    answer: str = "nothing"
    size: Callable[[Mapping[str, Any], int], int] = lambda step, width: 0
    call: str = ""

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(("op", *self.required, *self.optional))


_HOOKS = ("mask", "x_kv", "offset")  # a forward through padded, cross or shifted
_KERNEL = ("q", "k", "v", "keywords", "lse", "out_shape", "lse_shape")

OPERATIONS: dict[str, Operation] = {op.name: op for op in (
    Operation("refuses", ("n_embd", "n_head"), on_module=False, answer="refusal"),
    Operation("forward", ("x",), ("keep_input", *_HOOKS), answer="output",
              size=lambda s, w: tensor_limit(_numel(s, "x")) + (
                  _numel(s, "x") if s.get("keep_input") else 0), call="forward"),
    Operation("grad", ("x", "cotangent"), ("params", *_HOOKS), answer="output",
              size=lambda s, w: 2 * tensor_limit(_numel(s, "x")) + params_limit(w),
              call="forward"),
    Operation("decode", ("x", "chunks"), ("mask",), answer="output",
              size=lambda s, w: tensor_limit(_numel(s, "x")), call="decode"),
    Operation("sharded_grad", ("x", "cotangent"), answer="output",
              size=lambda s, w: 2 * tensor_limit(_numel(s, "x")) + params_limit(w),
              call="the sharded module"),
    Operation("shard_refuses", ("hook",), answer="refusal"),
    Operation("export", (), ("found",), answer="export",
              size=lambda s, w: _EXPORTED * tensor_limit(w * w)),
    Operation("find_weights", answer="find_weights",  # at most 8 guesses, each an export
              size=lambda s, w: 8 * _EXPORTED * tensor_limit(w * w)),
    Operation("pullback", ("grads",), ("found",), answer="pullback",
              size=lambda s, w: params_limit(w)),
    Operation("module_type", answer="module_type"),
    # o and the LSE, dq, dk, dv, q, k and v as the call left them, the call made alongside's o
    Operation("kernel", _KERNEL, ("alibi_slopes", "sinks", "grad", "inputs_after",
                                  "in_place", "strided", "broadcast", "alongside"),
              on_module=False, answer="kernel",
              size=lambda s, w: 3 * tensor_limit(_numel(s, "q", "k", "v")), call="attention"),
    # o and the LSE, and both caches after the call
    Operation("kernel_cache", ("q", "k_cache", "v_cache", "cache_seqlens", "keywords", "lse",
                               "out_shape", "lse_shape"), ("k", "v", "block_table"),
              on_module=False, answer="kernel_cache",
              size=lambda s, w: 3 * tensor_limit(_numel(s, "q", "k_cache", "v_cache")),
              call="attention_with_cache"),
)}
"""Every operation of the worker protocol, by name: what a step may say, what comes back."""


def check_step(step: Mapping[str, Any]) -> Operation:
    """The operation `step` asks for, its fields checked against the record (the runner's
    own request: a mismatch is attnspec's bug, said as such)."""
    op = OPERATIONS.get(str(step.get("op")))
    if op is None:
        raise ValueError(f"unknown step {step.get('op')!r}; the protocol has "
                         f"{', '.join(OPERATIONS)}")
    missing = [f for f in op.required if f not in step]
    unknown = sorted(set(step) - op.fields)
    if missing or unknown:
        raise ValueError(f"a {op.name} step {'without ' + ', '.join(missing) if missing else ''}"
                         f"{' and ' if missing and unknown else ''}"
                         f"{'with ' + ', '.join(unknown) if unknown else ''}: not the protocol's "
                         f"{op.name} ({', '.join(sorted(op.fields))})")
    return op


def answer_limit(request: Mapping[str, Any], n_embd: int) -> int:
    """The most bytes the answer to `request` can take, its module of width `n_embd`
    (`bound_width`) unless the request builds one: what the runner reads, and the worker
    sends, at most."""
    build = request.get("build")
    if isinstance(build, Mapping) and build.get("n_embd") is not None:
        n_embd = bound_width(build)
    elements = 0
    for step in request.get("steps", ()):
        op = OPERATIONS.get(str(step.get("op")))
        if op is not None:
            elements += op.size(step, n_embd)
    return _HEADER + _ITEM * elements


def bound_width(build: Mapping[str, Any]) -> int:
    """The width that bounds a built module's exports and parameter gradients: C, or the q and
    o width H·D where a spec's head_dim makes it wider (its weights are (H·D, C))."""
    width = int(build["n_embd"])
    spec = build.get("spec")
    if isinstance(spec, Mapping) and spec.get("head_dim") is not None:
        width = max(width, int(spec.get("n_head", 1)) * int(spec["head_dim"]))
    return width
