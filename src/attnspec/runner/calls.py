"""The ground of the worker's execution: the subject's faults, the worker's state between
requests, a call of the subject's code, and its tensors made plain to send. Nothing is judged
here (execute.py and kernel_calls.py use these)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch import Tensor

from .subject import Subject, fault_frames, fault_text

_T = TypeVar("_T")


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
