"""Examples, outcomes and the context a check runs in; inputs and messages every family uses."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor

from ..common.dtypes import dtype_from_name
from ..common.protocol import BadAnswer, Executor, Ranks, check_kind, check_results
from ..reference.module import WEIGHT_KEYS, reference_attention
from ..reference.spec import AttentionSpec
from ..reference.variants import extra_weights, spec_attention
from . import tolerance as tol


@dataclass(frozen=True)
class Example:
    """One generated example: the shape, dtype, device, input seed and cut points."""

    B: int
    T: int
    C: int
    H: int
    dtype: str = "float32"
    device: str = "cpu"
    seed: int = 0
    cuts: tuple[int, ...] = ()
    scale: float = 1.0
    spec: AttentionSpec | None = None  # protocol v2: the attention drawn (C and H are its own)
    world: int = 0  # tp/cp_equivalence: the ranks the module is sharded over (0: not sharded)

    @property
    def D(self) -> int:
        if self.spec is not None:
            return self.spec.D
        return self.C // self.H if self.H > 0 else 0

    @property
    def attention(self) -> AttentionSpec:
        """The spec this example checks: its own, or plain attention of (C, H)."""
        return self.spec if self.spec is not None else AttentionSpec(self.C, self.H)

    def to_json(self) -> dict[str, Any]:
        data = {k: v for k, v in asdict(self).items() if k != "spec"}
        data["cuts"] = list(self.cuts)
        if not self.world:  # unsharded examples replay as they always have
            del data["world"]
        if self.spec is not None:
            data["spec"] = self.spec.to_json()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Example:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        known["cuts"] = tuple(known.get("cuts", ()))
        if known.get("spec") is not None:
            known["spec"] = AttentionSpec.from_json(known["spec"])
        return cls(**known)

    def describe(self) -> str:
        cuts = f", cuts={list(self.cuts)}" if self.cuts else ""
        shape = (self.spec.describe() + f", D={self.D}" if self.spec is not None
                 else f"C={self.C}, H={self.H}, D={self.D}")
        world = f", world={self.world}" if self.world else ""
        return (f"B={self.B}, T={self.T}, {shape}, "
                f"dtype={self.dtype}, device={self.device}, seed={self.seed}{cuts}{world}")

    def build(self) -> dict[str, Any]:
        """The worker's build request for this example."""
        request = {"n_embd": self.C, "n_head": self.H, "seed": self.seed, "dtype": self.dtype,
                   "device": self.device}
        if self.spec is not None:
            request["spec"] = self.spec.to_json()
        return request


@dataclass
class Outcome:
    """One example's verdict: pass, fail (the property is violated), error (the subject raised
    or returned something unusable) or skip; with the measured and allowed error and where."""

    kind: str
    message: str = ""
    measured: float | None = None
    allowed: float | None = None
    where: dict[str, int] | None = None
    notes: list[str] = field(default_factory=list)
    forwards: int = 0
    raced: bool = False  # its failing call ran beside another call of the subject's, at once

    @property
    def failed(self) -> bool:
        return self.kind in ("fail", "error")


PASS = "pass"


class SubjectFault(Exception):
    """The subject raised or returned something unusable; becomes an `error` outcome."""


class Unsupported(Exception):
    """A protocol v2 subject's supports(spec) declined the example's spec: no example at all."""


class Unfound(Exception):
    """The weights found by name at the run's probe are not in this example's module."""


class Requested(Protocol):
    """What a request is built for: a module example or a kernel example."""

    @property
    def device(self) -> str: ...

    def build(self) -> dict[str, Any]: ...


class Context:
    """What a check uses to run the subject: one executor, with the forward calls counted."""

    def __init__(self, executor: Executor, gangs: Callable[[int], Ranks] | None = None,
                 twin: Callable[[], Executor | None] | None = None) -> None:
        self.executor = executor
        self.gangs = gangs  # world -> the ranks that run sharded examples
        self.forwards = 0
        self.notes: list[str] = []
        self._steps: list[dict[str, Any]] = []  # the steps awaiting collect()
        self._layout = True  # whether collect() holds outputs to their inputs' layout
        self._device: str | None = None  # where the module last built runs
        self._twin_of = twin  # a second process that never sees this one's inputs
        self._twin: Context | None = None
        self._apart: tuple[Requested, list[dict[str, Any]]] | None = None
        self.exports: dict[str, dict[str, Tensor]] = {}  # by build: one export per example

    def request(self, ex: Requested | None, steps: Sequence[dict[str, Any]], *,
                check_layout: bool = True) -> list[Any]:
        """Build for `ex` (None: keep the module built last) and run `steps`; the results.
        Outputs must have their inputs' shape, dtype and device unless not `check_layout`
        (a property that judges the layout itself)."""
        self.submit(ex, steps, check_layout=check_layout)
        return self.collect()

    def submit(self, ex: Requested | None, steps: Sequence[dict[str, Any]], *,
               check_layout: bool = True) -> None:
        """`request`'s first half: the worker starts while the runner computes its side."""
        self.forwards += sum(1 for s in steps if s["op"] in ("forward", "grad", "kernel"))
        found = getattr(getattr(self.executor, "info", None), "found", None)
        if found is not None:  # the weights found by name stand in for export_weights
            steps = [{**s, "found": found} if s["op"] in ("export", "pullback") else s
                     for s in steps]
        self._steps, self._layout = list(steps), check_layout
        if ex is not None:
            self._device = ex.device
        self.executor.submit({"build": None if ex is None else ex.build(), "steps": list(steps)})

    def collect(self) -> list[Any]:
        """The results of the steps last submitted, each checked against its step."""
        answer = self.executor.collect()
        try:
            kind, message = check_kind(answer)
            if kind == "unsupported" and answer.get("unfound") is True:
                raise Unfound(message)
            if kind == "unsupported":
                raise Unsupported(message)
            if kind != "ok":
                raise SubjectFault(message or "the worker gave no answer")
            return check_results(answer, self._steps, device=self._device,
                                 layout=self._layout)
        except BadAnswer as bad:
            # The worker's process is the subject's: after a forged answer its next one cannot
            # be matched to a request, so the next request gets a fresh worker.
            restart = getattr(self.executor, "restart_later", None)
            if callable(restart):
                restart()
            raise SubjectFault(str(bad)) from None

    def submit_apart(self, ex: Requested, mine: Sequence[dict[str, Any]],
                     theirs: Sequence[dict[str, Any]]) -> None:
        """`mine` to this worker and `theirs` to its twin, each on a module built for `ex`, so
        that no process sees both: a subject that remembers what it saw (a cache keyed by a
        prefix or a row, in its module or its process) cannot make the two sides agree. Without
        a twin (in process) both go to this executor, in two requests."""
        if self._twin_of is not None:  # asked once: every call of one example alike
            twin, self._twin_of = self._twin_of(), None
            self._twin = None if twin is None else Context(twin)
        self.submit(ex, mine)
        self._apart = (ex, list(theirs))
        if self._twin is not None:
            self._twin.submit(ex, theirs)
            self.forwards += self._twin.forwards
            self._twin.forwards = 0

    def collect_apart(self) -> tuple[list[Any], list[Any]]:
        """`submit_apart`'s results: this worker's, then the twin's."""
        assert self._apart is not None
        (ex, theirs), self._apart = self._apart, None
        mine = self.collect()
        try:
            if self._twin is None:
                return mine, self.request(ex, theirs)
            return mine, self._twin.collect()
        except Unsupported as declined:  # no draw to skip: this worker has just run it
            side = ("the twin (the worker that runs the other side of this self-comparison)"
                    if self._twin is not None else "the other side's request")
            raise SubjectFault(
                f"{side} was declined by supports, where this worker accepted and ran the same "
                f"example: a subject must answer the same spec alike in every process and call "
                f"({declined})") from None

    def forwards_of(self, ex: Example, xs: Sequence[Tensor], *,
                    check_shape: bool = True) -> list[Tensor]:
        """The subject's outputs on each input, from one module built for `ex`."""
        self.submit(ex, [{"op": "forward", "x": x} for x in xs], check_layout=check_shape)
        return self.collect_forwards(ex, xs, check_shape=check_shape)

    def collect_forwards(self, ex: Example, xs: Sequence[Tensor], *,
                         check_shape: bool = True) -> list[Tensor]:
        """`forwards_of`'s second half, after `submit` of one forward per input (their layout
        was checked in `collect` unless the submit said not to)."""
        return [result["out"] for _, result in zip(xs, self.collect(), strict=True)]


def seeded_normal(seed: int, shape: tuple[int, ...], *, salt: int = 0, scale: float = 1.0,
                  dtype: torch.dtype = torch.float32) -> Tensor:
    """float64 N(0, 1) x scale from a generator seeded seed * 7919 + salt, then cast to dtype:
    every example's inputs, and attnspec.strategies.inputs' (the same seed, the same tensor)."""
    gen = torch.Generator().manual_seed(seed * 7919 + salt)
    x = torch.randn(shape, generator=gen, dtype=torch.float64) * scale
    return x.to(dtype=dtype)


def _inputs(ex: Example, salt: int = 0, shape: tuple[int, ...] | None = None) -> Tensor:
    return seeded_normal(ex.seed, shape or (ex.B, ex.T, ex.C), salt=salt, scale=ex.scale,
                         dtype=dtype_from_name(ex.dtype))


def _reference_weights(ex: Example) -> dict[str, Tensor]:
    """Weights for the reference where the subject exports none (prefix's yardstick)."""
    gen = torch.Generator().manual_seed(ex.seed + 17)
    shapes = ex.attention.weight_shapes()
    return {key: (torch.rand(shapes[key], generator=gen, dtype=torch.float64) * 2 - 1)
            / math.sqrt(shapes[key][1]) for key in WEIGHT_KEYS} | extra_weights(ex.attention, gen)


def _reference(x: Tensor, weights: Mapping[str, Tensor], ex: Example,
               dtype: torch.dtype | None = None, device: str | None = None) -> Tensor:
    """The reference on `x`, computed in `dtype` on `device` (the example's by default)."""
    dtype = dtype or x.dtype
    device = device or ex.device
    with torch.no_grad():
        out = _oracle(x.to(device=device, dtype=dtype), _cast(weights, dtype, device), ex)
    return out.cpu()


def _oracle(x: Tensor, weights: Mapping[str, Tensor], ex: Example) -> Tensor:
    """The reference's math for the example's attention (v1: plain MHA of (C, H))."""
    if ex.spec is None:
        return reference_attention(x, weights, ex.H)
    return spec_attention(x, weights, ex.spec)


def _cast(weights: Mapping[str, Tensor], dtype: torch.dtype, device: str) -> dict[str, Tensor]:
    return {k: v.detach().to(device=device, dtype=dtype) for k, v in weights.items()}


def _where(index: tuple[int, ...] | None, cut: int | None = None) -> dict[str, int] | None:
    if index is None:
        return None
    where = dict(zip(("b", "t", "c"), index, strict=False))
    if cut is not None:
        where["cut"] = cut
    return where


def _fail(message: str, measured: float | None = None, allowed: float | None = None,
          index: tuple[int, ...] | None = None, cut: int | None = None) -> Outcome:
    return Outcome("fail", message, measured, allowed, _where(index, cut))


def _at(index: tuple[int, ...] | None) -> str:
    return "" if index is None else " at (B, T, C) index " + str(tuple(index))


def _cuts(ex: Example) -> list[int]:
    """Cut points t with something after them: 0 <= t < T - 1."""
    return sorted({t for t in ex.cuts if 0 <= t < ex.T - 1})


def _jitter(*pairs: tuple[Tensor, Tensor]) -> float:
    """The subject's run-to-run difference: the largest over pairs of identical calls."""
    return max(tol.max_abs_diff(a, b)[0] for a, b in pairs)


def _outputs(xs: Sequence[Tensor], results: Sequence[Mapping[str, Any]]) -> list[Tensor]:
    """The outputs of one forward (or `call`) per input (`Context.collect` checked that each
    has its input's layout)."""
    return [result["out"] for _, result in zip(xs, results, strict=True)]


def _finite(prop: str, call: str, *outs: Tensor) -> None:
    """Non-finite outputs prove nothing in a self-comparison (NaN equals NaN there): the
    subject's fault, named, pointing at `finite`."""
    for out in outs:
        bad = ~torch.isfinite(out)
        if bool(bad.any()):
            index = tuple(int(i) for i in bad.nonzero()[0])
            raise SubjectFault(f"{call} gave {int(bad.sum())} non-finite values in an output "
                               f"of shape {tuple(out.shape)} (first {float(out[index]):g}"
                               f"{_at(index)}) for finite input, so {prop} cannot compare its "
                               "outputs (see finite).")


def _steady(prop: str, ex: Example, change: str, jitter: float, scale: float) -> None:
    """A change within the jitter of identical calls that differ by more than rounding (weights
    that drift between calls, say) is no evidence either way: the subject's fault, pointing at
    `determinism`, never a leak."""
    floor = tol.floor(ex.dtype, scale)
    if jitter > floor:
        raise SubjectFault(f"{change}, but the same input gave outputs {jitter:.3g} apart in "
                           f"two calls, more than rounding ({floor:.3g}): the outputs differ "
                           f"between identical calls, so {prop} cannot tell a leak from that "
                           "(see determinism).")


# Each property's twin-side inputs have their own base salt: one whose rows the twin sees in
# one property are never another's main-side rows, even for the same seed and shape.
_BASE = {"batch_independence": 20_000, "decode": 21_000, "padding_invariance": 22_000,
         "masked_rows": 23_000, "causal_corner": 24_000, "relative_position": 25_000,
         "window": 26_000, "mixing": 27_000}


def _probe(ex: Example, like: Tensor, salt: int) -> list[dict[str, Any]]:
    """A forward of fresh input shaped like `like`, made in both processes: their outputs
    differ only if identical calls do (drift, or a process that counts its calls)."""
    return [{"op": "forward", "x": _inputs(ex, salt=salt, shape=tuple(like.shape))}]


def _only_float32_accurate(ex: Example, err: float, yard32: Callable[[], float],
                           scale: float) -> str | None:
    """For float64: the message when an error float64 cannot explain is one float32 makes."""
    if ex.dtype != "float64":
        return None
    measured32 = yard32()
    if err > tol.allowed(measured32, "float32", scale):
        return None
    return (f"the subject's float64 results are only float32-accurate: the error {err:.3g} is "
            f"what float32 arithmetic gives (the reference computed in float32 is off by "
            f"{measured32:.3g} here) but far beyond float64's. It computes in float32 somewhere "
            "(scores or softmax, say): declare DTYPES without float64, or compute in float64.")


def _rng(ex: Example, salt: int) -> random.Random:
    """The example's own draws beyond its shape (replays repeat them: they follow the seed)."""
    return random.Random(ex.seed * 7919 + salt)


def _info(ctx: Context, name: str, default: str) -> str:
    info = getattr(ctx.executor, "info", None)
    return str(getattr(info, name, default))


def weights_in(weights: Mapping[str, Tensor], x: Tensor) -> dict[str, Tensor]:
    return {k: v.to(device=x.device, dtype=x.dtype) for k, v in weights.items()}
