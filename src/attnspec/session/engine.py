"""The engine: Hypothesis drives examples, a worker runs the subject, a Report comes out.

The CLI, the Python API (`verify`) and the pytest suite in conformance/ are front ends over
`Session`. A session picks its subject's family once (families.py), keeps its processes in
`Workers` (workers.py), assembles verdicts in verdicts.py and parses replays in replay.py; what
is here is one property's search: the examples drawn, each one checked, why the search stopped.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import re
import shlex
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

import torch

from .._errors import TargetError, UsageError
from ..common.dtypes import default_dtypes
from ..common.options import (
    INTERPRETED_BF16,
    INTERPRETED_EXAMPLES,
    INTERPRETED_MAX_HEAD_DIM,
    INTERPRETED_MAX_HEADS,
    INTERPRETED_MAX_SEQ,
    INTERPRETED_TIMEOUT,
    MAX_HEAD_DIM,
    MAX_HEADS,
    PROFILES,
    RunOptions,
)
from ..common.protocol import Executor
from ..common.report import Progress, PropertyResult
from ..common.users import resolve_worker_user
from ..properties import BY_ID
from ..properties.base import Context, Example, Outcome
from ..properties.found import Found
from ..properties.kernel import KernelExample
from ..runner.isolation import is_dumpable
from ..runner.subject import check_variants
from ..runner.worker import SubjectCrash
from . import verdicts
from .coverage import _size
from .environment import (
    _cpu_model,
    _hide_own_source_from_hypothesis,
    _installed,
    _private_hypothesis_home,
    _target_name,
)
from .families import FAMILIES, Family
from .replay import in_fresh_workers, parse_replay
from .selection import KERNEL_PROPERTIES, PROPERTIES
from .verdicts import HALTED, State, StopReason
from .workers import Workers

__all__ = ["KERNEL_PROPERTIES", "PROFILES", "PROPERTIES", "RunOptions", "Session"]

# Shrinking stops after this many further examples (a count, so a seed replays exactly), or
# after _SHRINK_SECONDS on a very slow subject; the smallest failure seen is reported.
_SHRINK_EXAMPLES = 64
_SHRINK_SECONDS = 20.0
# Shrinking crashes restarts the worker each try: one run spends at most this much on it, so a
# subject that crashes in every property is not shrunk in every one.
_CRASH_SHRINK_SECONDS = 30.0
# A first pass over every property with this many examples: most broken subjects fail it, so a
# verdict comes in seconds instead of after the properties before the failing one.
_QUICK_EXAMPLES = 5
_MAX_WORKERS = 16  # runners at once: each is a process with a worker (and a twin) of its own

FRONT_END_FLAGS: ContextVar[Mapping[str, str] | None] = ContextVar("FRONT_END_FLAGS",
                                                                   default=None)
"""verify()'s parameters as the front end calling it spells them (the command line sets its
own); None: verify()'s own names, `timeout=30`."""
# The process layer's messages name an option as verify() does (timeout=30); a front end's
# flags (Session.flags) rename it, as frontends.verify_cli.in_flags does a UsageError's.
_NAMED_OPTION = re.compile(r"\b(timeout)=(\S+)")

AnyExample = Example | KernelExample


def _stream_seed(seed: int, prop: str, stream: str) -> int:
    """One Hypothesis seed per (seed, property, pass), so the properties (and the quick pass)
    each see their own examples rather than all replaying the same sequence."""
    digest = hashlib.sha256(f"{seed}\0{prop}\0{stream}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


class _Abort(BaseException):
    """Stops Hypothesis at once (it lets BaseException through without shrinking)."""

    def __init__(self, reason: StopReason) -> None:
        super().__init__(reason.value)
        self.reason = reason


class _Halted(BaseException):
    """The run stopped at another property's failure (-x, with lanes): end this pass now."""


class _PropertyFailed(Exception):
    pass


class _Declined(Exception):
    """supports(spec) declined the example drawn: Hypothesis draws another."""


class _Counted:
    """The executor as one example's check sees it, counting the answers in which the subject
    ran a request: an example whose check ended without one (T = 1 in causality) proved nothing
    about the subject."""

    def __init__(self, executor: Executor) -> None:
        self._executor = executor
        self.ran = 0

    def __getattr__(self, name: str) -> Any:  # info and the rest, as the executor has them
        return getattr(self._executor, name)

    def submit(self, request: dict[str, Any]) -> None:
        self._executor.submit(request)

    def collect(self) -> dict[str, Any]:
        answer = self._executor.collect()
        if not (isinstance(answer, Mapping) and answer.get("kind") == "unsupported"):
            self.ran += 1
        return answer

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        self.submit(request)
        return self.collect()

    def close(self) -> None:
        self._executor.close()


def _devices(options: RunOptions) -> list[str]:
    cuda = torch.cuda.is_available()
    if options.device == "cuda" and not cuda:
        raise UsageError(option="device", value=options.device,
                         reason="torch sees no CUDA device on this machine "
                                "(torch.cuda.is_available() is False).")
    if options.device == "all":
        return ["cpu", "cuda"] if cuda else ["cpu"]
    return [options.device]


class Session:
    """One subject, loaded once (in a worker process unless `isolate=False`), checked property by
    property. Use as a context manager so the worker is stopped."""

    def __init__(self, target: Any, options: RunOptions | None = None, *,
                 isolate: bool | None = None, flags: Mapping[str, str] | None = None,
                 twin_ahead: bool = False) -> None:
        options = options or RunOptions()
        self.options = options
        # How this front end spells the options its messages name (None: verify()'s names).
        self.flags = FRONT_END_FLAGS.get() if flags is None else flags
        self.devices = _devices(options)
        self.requested_dtypes = list(options.dtypes) if options.dtypes else None
        self.profile = options.profile
        self.max_examples = options.examples
        self.seed = options.seed
        self.timeout = options.timeout
        self._crash_shrink_left = _CRASH_SHRINK_SECONDS
        self._passed: dict[str, tuple[State, float]] = {}  # quick passes the full pass continues
        self.declined: dict[str, int] = {}  # per property, the specs supports(spec) declined
        self._strategies: dict[tuple[str, bool], Any] = {}  # per (property, narrow), built once
        # Set (from another thread, or a lane's signal) when the run stops at a failure found
        # elsewhere: the pass under way ends at its next example, none starts.
        self.halted = False
        self.lane_notes: list[str] = []  # what went wrong with another runner (lanes.Passes)
        # CI services set CI: derandomized and no database, as --profile ci. A --seed still wins.
        ci, database = options.ci, options.database
        self.derandomize = (ci and options.seed is None) if options.derandomize is None \
            else options.derandomize
        self.database = None if (database is False or ci) else (
            database if isinstance(database, str) else os.path.join(".hypothesis", "attnspec"))
        self.target = _target_name(target)
        isolate = isinstance(target, str) if isolate is None else isolate
        if isolate and not isinstance(target, str):
            raise UsageError("isolate=True needs a TARGET string (a path or a dotted module); "
                             f"got {type(target).__name__}.")
        self.isolated = isolate
        self.sizes = options.sizes
        self.user = (resolve_worker_user(options.worker_user)
                     if options.worker_user is not None else None)
        if self.user is not None and not isolate:
            raise UsageError(option="worker_user", value=options.worker_user,
                             reason="the subject runs in this process (a Python object as "
                                    "TARGET, or isolate=False), so it cannot run as another "
                                    "user; give a TARGET string.")
        self.workers = Workers(target, isolate=isolate, timeout=options.timeout,
                               sizes=self.sizes, user=self.user, twin_ahead=twin_ahead)
        self.info = self.executor.info
        self.family: Family = FAMILIES[self.info.protocol]
        self.conventions = self.family.conventions(self.info)
        # How the worker's first call differed from the same call again (kernels; determinism).
        self.first_call: str | None = None
        self.max_seq = options.max_seq or self.family.max_seq
        # A Triton kernel in the interpreter: fewer, smaller examples (common/options.py).
        self.interpreted = self.info.triton == "interpreter"
        self.scaled: dict[str, Any] = self._for_the_interpreter(options) if self.interpreted \
            else {}
        try:
            self._take_declarations(options)
        except BaseException:
            self.close()
            raise
        self._protocol_hints()
        self.found = self._find_weights()

    @property
    def executor(self) -> Executor:
        return self.workers.executor

    @property
    def kernel(self) -> bool:
        return self.family.name == "kernel"

    @property
    def ids(self) -> tuple[str, ...]:
        return self.family.ids

    @property
    def twinned(self) -> frozenset[str]:
        return self.family.twinned

    @property
    def swept(self) -> int | None:
        return self.workers.swept

    def _take_declarations(self, options: RunOptions) -> None:
        """The run's options against what the subject declared: the required ids, a v2
        subject's VARIANTS as of its revision, the sizes and dtypes it supports."""
        strays = [p for p in options.require or () if p not in self.ids]
        if strays:
            raise UsageError(option="require", value=",".join(options.require or ()),
                             reason=f"{', '.join(strays)} {'is' if len(strays) == 1 else 'are'} "
                                    f"no property of a {self.family.name} subject; its ids are "
                                    f"{', '.join(self.ids)}.")
        # Properties that must run: a pass without them would not say the subject is attention.
        self.required = frozenset(p for p in options.required if p in self.ids)
        if self.info.protocol == 2:  # again here: the worker's process is the subject's
            check_variants(self.info.variants or {}, repr(self.target))
            from ..runner.subject import as_of

            # "any" as the subject's revision meant it: a subject keeps its verdict.
            self.info = self.executor.info = dataclasses.replace(
                self.info, variants=as_of(self.info.variants or {}, self.info.revision))
        if self.info.supported is not None and not self.info.supported:
            raise UsageError(
                option="max_head_dim", value=options.max_head_dim,
                reason=f"the subject supports none of the configurations attnspec draws (H "
                       f"1..{options.max_heads}, D 1..{options.max_head_dim}, C = H x D <= "
                       f"{options.max_width}); raise max_heads, max_head_dim or max_width to "
                       "reach the sizes it handles.")
        self.dtypes = {dev: self._dtypes_for(dev) for dev in self.devices}
        if not any(self.dtypes.values()):
            requested = self.requested_dtypes or []
            offered = "; ".join(f"{dev}: {', '.join(self._claimed(dev)) or 'none'}"
                                for dev in self.devices)
            whose = "the subject's DTYPES" if self.info.dtypes else "attnspec's defaults"
            half = (" (float16 is checked on CUDA only, unless the subject's DTYPES name it)"
                    if "float16" in requested else "")
            if self.interpreted and "bfloat16" in requested:
                half += f"; {INTERPRETED_BF16}"
            raise UsageError(option="dtypes", value=",".join(requested),
                             reason=f"no such dtype to check on {', '.join(self.devices)}; "
                                    f"{whose} offer {offered}{half}.")

    def _for_the_interpreter(self, options: RunOptions) -> dict[str, Any]:
        """Where the run left them at their defaults, the examples, sizes and timeout of a
        kernel that runs in Triton's interpreter; what was changed, for the header."""
        if options.profile == "thorough":
            return {}
        heads, dim, width = self.sizes
        scaled: dict[str, Any] = {}
        if options.max_examples is None:
            self.max_examples = scaled["max_examples"] = INTERPRETED_EXAMPLES[options.profile]
        if options.max_seq is None:
            self.max_seq = scaled["max_seq"] = INTERPRETED_MAX_SEQ
        if options.max_heads == MAX_HEADS:
            heads = scaled["max_heads"] = INTERPRETED_MAX_HEADS
        if options.max_head_dim == MAX_HEAD_DIM:
            dim = scaled["max_head_dim"] = INTERPRETED_MAX_HEAD_DIM
        self.sizes = (heads, dim, width)
        if options.timeout == RunOptions.timeout:
            self.timeout = scaled["timeout"] = options.timeout * INTERPRETED_TIMEOUT
            self.workers.timeout = self.timeout
            self.executor.timeout = self.timeout  # type: ignore[attr-defined]
        return scaled

    def probe_dtype(self) -> tuple[str, str]:
        """(device, dtype) for the load's probes: the CPU in float64 where the subject takes
        it, else float32, else what it takes."""
        device = "cpu" if self.dtypes.get("cpu") else next(d for d, ts in self.dtypes.items()
                                                            if ts)
        claimed = self.dtypes[device]
        return device, next((d for d in ("float64", "float32") if d in claimed), claimed[0])

    def run_probe(self, ex: AnyExample, steps: list[dict[str, Any]]) -> list[Any]:
        return Context(self.executor).request(ex, steps)

    def probes(self) -> Iterator[Example]:
        """A module subject's probe examples (properties/found.py)."""
        from ..properties.found import probe_examples

        device, dtype = self.probe_dtype()
        return probe_examples(self.info.protocol, self.info.variants, self.info.supported,
                              dtype, device, self.sizes)

    def _protocol_hints(self) -> None:
        """A subject written against the protocol in a common wrong way is told so now, in
        one line (a TargetError: exit 2), not by a failure in every property."""
        try:
            with self.workers.judging():
                hint = self.family.probe(self)
        except SubjectCrash:
            return  # the properties meet the crash themselves, each with its example
        if hint is not None:
            self.close()
            raise TargetError(f"TARGET {self.target!r}: {hint}.")

    def _find_weights(self) -> Found | None:
        """For a module subject without export_weights: its weights by the names the field
        uses, kept only where the reference with them reproduces it (properties/found.py);
        then export and pullback steps use them, and the oracle runs. None for kernels and
        subjects that export their own."""
        if not self.family.weighted or self.info.has_export:
            return None
        from ..properties.found import find_weights

        examples = self.probes()
        try:
            with self.workers.judging():
                found = find_weights(self.run_probe, examples)
        except SubjectCrash as crash:
            found = Found(why="the probe's module could not be run "
                                f"({self.in_flags(str(crash))})")
        if found.ident is not None:
            self.info = self.executor.info = dataclasses.replace(
                self.info, has_export=True, found=found.ident)
        return found

    def _claimed(self, device: str) -> list[str]:
        """The subject's DTYPES, or attnspec's defaults for the device."""
        return list(self.info.dtypes or default_dtypes(device))

    def _dtypes_for(self, device: str) -> list[str]:
        return [d for d in self._claimed(device)
                if (self.requested_dtypes is None or d in self.requested_dtypes)
                and not (self.interpreted and d == "bfloat16")]

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.workers.close()

    def start_twin(self) -> None:
        """Start loading the twin worker beside the passes that need none (workers.py)."""
        self.workers.start_twin()

    def worlds(self, prop: str | None = None) -> list[int]:
        """The world sizes sharded examples of `prop` are drawn over: the subject's and the
        run's, where one fits the run's bounds (W <= max_heads and a listed n_kv_head W divides,
        for heads; 2W or W <= max_seq, for positions)."""
        chosen = self.options.world_sizes
        worlds = sorted(set(self.info.world_sizes) & set(chosen or self.info.world_sizes))
        shards = None if prop is None else BY_ID[prop].shards
        if shards == "heads":
            listed = (self.info.variants or {}).get("n_kv_head")
            worlds = [w for w in worlds if w <= self.sizes[0] and (
                not isinstance(listed, list) or any(g % w == 0 for g in listed))]
        elif shards == "positions":
            chunks = 2 if self.info.cp_layout == "head_tail" else 1
            worlds = [w for w in worlds if chunks * w <= self.max_seq]
        return worlds

    def header(self) -> dict[str, Any]:
        import hypothesis

        from .. import __version__

        return {
            "subject": self.info.name, "origin": self.info.origin,
            "versions": {"attnspec": __version__, "python": platform.python_version(),
                         "torch": torch.__version__, "hypothesis": hypothesis.__version__,
                         "jaxtyping": _installed("jaxtyping"), "beartype": _installed("beartype")},
            "devices": self.devices, "dtypes": self.dtypes, "profile": self.profile,
            "max_examples": self.max_examples, "seed": self.seed,
            "derandomize": self.derandomize, "timeout": self.timeout,
            "max_seq": self.max_seq, "max_heads": self.sizes[0],
            "max_head_dim": self.sizes[1], "max_width": self.sizes[2],
            "world_sizes": list(self.options.world_sizes or self.info.world_sizes),
            "isolated": self.isolated,
            "host": {"cpu": _cpu_model(), "cores": os.cpu_count(),
                     "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())},
            "isolation": {"subreaper": self.workers.subreaper, "dumpable": is_dumpable(),
                          "worker_user": None if self.user is None else self.user.name},
            "protocol": self.info.revision or self.info.protocol,
            "black_box": self.options.black_box, "required": sorted(self.required),
            **({} if self.info.triton is None else {"triton": self._triton_header()}),
            **({} if not self.family.weighted else {"weights": (
                {"source": "export_weights"} if self.found is None else self.found.header())}),
        }

    def _triton_header(self) -> dict[str, Any]:
        """How the kernel's Triton ran: natively, or in the interpreter (and what that changed)."""
        if not self.interpreted:
            return {"mode": "native"}
        claimed = {d for dev in self.devices for d in self._claimed(dev)}
        wanted = self.requested_dtypes is None or "bfloat16" in self.requested_dtypes
        return {"mode": "interpreter", "device": "cpu", "scaled": self.scaled,
                **({"bfloat16": INTERPRETED_BF16} if "bfloat16" in claimed and wanted else {})}

    def replay_command(self, prop: str, ex: AnyExample) -> str:
        example = json.dumps(ex.to_json(), separators=(",", ":"))
        return (f"attnspec verify {shlex.quote(self.target)} --only {prop} "
                f"--replay {shlex.quote(example)}")

    def replay_example(self, prop: str, data: Mapping[str, Any]) -> Example | KernelExample:
        """The example in a replay JSON, checked so that a typo is a UsageError (replay.py)."""
        return parse_replay(self, prop, data)

    def skip_reason(self, prop: str) -> str | None:
        """Why the subject has nothing for `prop` to check (None: it has)."""
        return self.family.skip_reason(self, prop)

    # ---- verdicts ----------------------------------------------------------------------

    def _result(self, prop: str, state: State, seconds: float) -> PropertyResult:
        return verdicts.result_of(prop, state, seconds, self.family, self.replay_command,
                                  self._unreached)

    def judge_coverage(self, prop: str, result: PropertyResult, state: State,
                       total: int) -> None:
        """A pass earned on degenerate examples is incomplete (verdicts.judge_coverage)."""
        verdicts.judge_coverage(result, state, total, self.family, self.dtypes)

    def _unreached(self, state: State) -> str:
        heads, dim, width = self.sizes
        return verdicts.unreached(state, self.family, f"max_heads={heads}, max_head_dim={dim}, "
                                  f"max_width={width}, max_seq={self.max_seq}")

    def in_flags(self, message: str) -> str:
        """`message` with the options it names spelled as this run's front end spells them."""
        def named(match: re.Match[str]) -> str:
            flag = (self.flags or {}).get(match[1])
            return f"{flag} {match[2]}" if flag else f"{match[1]}={match[2]}"

        return _NAMED_OPTION.sub(named, message)

    def nothing_checked(self, results: Sequence[PropertyResult]) -> str | None:
        """Why a run whose properties were all skipped checked nothing (verdicts.py)."""
        return verdicts.nothing_checked(self.target, results, self.declined)

    def settled(self, prop: str, result: PropertyResult) -> PropertyResult:
        """`result` as this run counts it: a required property that did not run (skip) is
        incomplete, saying why and how to opt out; no pass, no failure."""
        if result.verdict == "skip" and prop in self.required:
            result.verdict = "incomplete"
            result.message = f"required, but it did not run: {result.message}{self._opt_out(prop)}"
        return result

    def _opt_out(self, prop: str) -> str:
        """How this front end says a pass without `prop` is wanted."""
        if prop in (self.options.require or ()):
            return ""
        flag = (self.flags or {}).get("black_box")
        return (f". A pass without it says less: {flag or 'black_box=True'} accepts one "
                "(\"conforms (black-box)\")" if prop == "oracle" else "")

    # ---- one example -------------------------------------------------------------------

    def _draw(self, data: Any, prop: str, narrow: bool = False) -> AnyExample:
        """One example for `prop`; `narrow`: H <= 8 and D <= 16 only (verify's quick pass,
        where most bugs show at a fraction of a wide example's cost)."""
        strategy = self._strategies.get((prop, narrow))
        if strategy is None:
            strategy = self._strategies[(prop, narrow)] = self.family.strategy(self, prop,
                                                                               narrow)
        return data.draw(strategy, label="example")  # type: ignore[no-any-return]

    def _one(self, prop: str, ex: AnyExample, state: State) -> Outcome | None:
        """Check `ex`, recording what it showed in `state`; its failure, if it failed."""
        state.examples += 1
        counted = _Counted(self.executor)
        try:
            outcome = self.family.check(self, counted, prop, ex, self.workers.twins())
        except SubjectCrash as bare:
            self._crashed(prop, ex, bare, state)
            return None
        state.forwards += outcome.forwards
        state.notes.update(outcome.notes)
        if outcome.kind == "unsupported":  # the subject's supports(spec) said no: not an example
            state.examples -= 1
            state.declined += 1
            raise _Declined(outcome.message)
        if outcome.kind == "skip":
            state.skip = outcome.message or "skipped"
            state.examples -= 1
            return None
        state.drawn.add(prop, ex)
        state.reached += counted.ran > 0
        if outcome.failed:
            state.failures.append((ex, outcome))
            if outcome.measured is not None and (
                    state.largest is None or outcome.measured > (state.largest[1].measured or 0)):
                state.largest = (ex, outcome)
            return outcome
        return None

    def _crashed(self, prop: str, ex: AnyExample, bare: SubjectCrash, state: State) -> None:
        crash = SubjectCrash(bare.kind, f"{self.in_flags(str(bare))} (on {ex.describe()})",
                             ran=bare.ran)
        crash.rank = getattr(bare, "rank", None)  # type: ignore[attr-defined]
        state.crashes += 1
        # Smaller tries after a timeout could each cost a whole --timeout; after a failed
        # restart they cannot run at all.
        state.stop_shrinking |= crash.kind == "timeout" or not crash.ran
        if state.crash is None or (crash.ran and _size(ex) < _size(state.crash[0])):
            state.crash = (ex, crash)  # the smallest crash seen is the one reported
        state.drawn.add(prop, ex)

    def replay(self, prop: str, example: AnyExample | dict[str, Any]) -> PropertyResult:
        """Run exactly one example of one property (what a failure's replay command does)."""
        self.workers.twin_wait = True
        with self.workers.judging():
            return self.settled(prop, self._replay(prop, example))

    def _replay(self, prop: str, example: AnyExample | dict[str, Any]) -> PropertyResult:
        ex = example if isinstance(example, Example | KernelExample) else \
            self.replay_example(prop, example)
        state = State()
        start = time.perf_counter()
        try:
            self._one(prop, ex, state)
        except _Declined as declined:
            return PropertyResult(id=prop, verdict="skip", message=str(declined))
        if state.failures:
            state.last = state.failures[-1]
        return self._result(prop, state, time.perf_counter() - start)

    def picture(self, prop: str, example: AnyExample | dict[str, Any]) -> dict[str, Any]:
        """A failure's picture data (properties/pictures.py): the example replayed against the
        subject in its worker (and its twin, for the self-comparisons)."""
        from ..properties.pictures import picture

        ex = example if isinstance(example, Example | KernelExample) else \
            self.replay_example(prop, example)
        self.workers.twin_wait = True
        if prop in self.twinned:
            self.start_twin()
        with self.workers.judging():
            return picture(Context(_Counted(self.executor), None, self.workers.twins()), prop,
                           ex)

    # ---- one property's search ---------------------------------------------------------

    def run(self, prop: str, progress: Progress | None = None,
            max_examples: int | None = None, stream: str = "full") -> PropertyResult:
        """Check one property with Hypothesis; the failure, if any, is shrunk to a small one.

        `stream` names the pass (verify's quick first pass is "quick"), so that each pass of a
        seeded run draws its own examples. A full pass after a quick pass that passed continues
        it: the examples it ran count towards the property's total, and are not run again.
        """
        self.workers.twin_wait = stream != "quick"  # the full pass compares in two processes
        if prop in self.twinned and self.workers.twin_wait:
            self.start_twin()
        with self.workers.judging():
            result, state = self._search(prop, progress, max_examples, stream)
            result = self.settled(prop, result)
            reported = state.reported() if state is not None else None
            return in_fresh_workers(self, prop, result, reported is not None and reported.raced)

    def run_continuing(self, prop: str, progress: Progress | None, quick: bool) -> PropertyResult:
        """A property's full pass where verify's quick pass of it may have run in another
        lane (`quick`): that pass is run again here first (its examples are the same, by its
        seed), so the full pass continues it exactly as in one runner."""
        if quick and prop not in self._passed:
            found = self.run(prop, None, max_examples=_QUICK_EXAMPLES, stream="quick")
            if not found.ok:
                return found
        return self.run(prop, progress)

    def _search(self, prop: str, progress: Progress | None, max_examples: int | None,
                stream: str) -> tuple[PropertyResult, State | None]:
        """One pass of `prop`: Hypothesis draws examples until the count, a failure shrunk, or
        another `StopReason`; the result, and the state it was made from (None: no search)."""
        if prop not in self.ids:
            raise UsageError(option="only", value=prop,
                             reason=f"unknown property id; the ids are {', '.join(self.ids)}.")
        start = time.perf_counter()
        reason = self.skip_reason(prop)
        if reason is not None:
            return PropertyResult(id=prop, verdict="skip", message=reason), None
        if self.halted:
            return PropertyResult(id=prop, message=HALTED), None
        total = max_examples or self.max_examples
        state, earlier = self._passed.pop(prop, (State(), 0.0)) if stream == "full" else (
            State(), 0.0)
        start -= earlier
        if state.examples >= total:
            state.stop = StopReason.CONTINUED
        else:
            self._hypothesis(prop, progress, total, stream, state, start)
        result = self._result(prop, state, time.perf_counter() - start)
        if state.stop is StopReason.HALTED:
            return verdicts.halted(result, state), state
        if state.stop is StopReason.CONTINUED:
            self.judge_coverage(prop, result, state, total)
            if progress is not None:
                progress(prop, result.examples, total, result)
            return result, state
        self.declined[prop] = state.declined
        if stream == "quick" and result.verdict == "pass":
            self._passed[prop] = (state, time.perf_counter() - start)
        elif stream != "quick":
            self.judge_coverage(prop, result, state, total)
        if progress is not None:
            progress(prop, result.examples, total, result)
        return result, state

    def _test(self, prop: str, progress: Progress | None, total: int, stream: str,
              state: State) -> Callable[[Any], None]:
        """The test Hypothesis runs: one example drawn and checked; a failure raised."""
        from hypothesis import reject

        def test(data: Any) -> None:
            _hide_own_source_from_hypothesis()  # modules the last example's check imported
            ex = self._draw(data, prop, narrow=stream == "quick")
            if self.halted:  # after the draw: a test that draws nothing is flaky to Hypothesis
                raise _Halted
            if state.first_failure_at is not None:
                seconds = _SHRINK_SECONDS if state.crash is None else min(
                    _SHRINK_SECONDS, self._crash_shrink_left)
                if (state.examples - state.failed_after >= _SHRINK_EXAMPLES
                        or time.perf_counter() - state.first_failure_at > seconds):
                    raise _Abort(StopReason.SHRINK_BUDGET)  # report the smallest failure seen
            crashes = state.crashes
            try:
                outcome = self._one(prop, ex, state)
            except _Declined:
                reject()
            if progress is not None and state.first_failure_at is None:
                progress(prop, min(state.examples, total), total, None)
            crashed = state.crashes > crashes
            if state.stop_shrinking:
                raise _Abort(StopReason.CANNOT_SHRINK)
            if outcome is not None or crashed:
                if state.first_failure_at is None:
                    state.first_failure_at = time.perf_counter()
                    state.failed_after = state.examples
                if outcome is not None:
                    state.last = (ex, outcome)
                # A crash shrinks too, within the same budget (each costs a worker restart).
                raise _PropertyFailed(outcome.message if outcome else "crash")

        return test

    def _wrapped(self, prop: str, stream: str, examples: int, test: Callable[[Any], None],
                 ) -> Callable[[], None]:
        """`test` under Hypothesis with this run's settings, seed and database key."""
        from hypothesis import HealthCheck, Phase, Verbosity, given, settings
        from hypothesis import seed as hypothesis_seed
        from hypothesis import strategies as st
        from hypothesis.database import DirectoryBasedExampleDatabase

        # Hypothesis refuses a database with derandomize (CI): the run is its own replay there.
        db = DirectoryBasedExampleDatabase(self.database) if (
            self.database and not self.derandomize) else None
        config = settings(
            max_examples=examples, deadline=None, database=db,
            derandomize=self.derandomize,
            report_multiple_bugs=False, verbosity=Verbosity.quiet, print_blob=False,
            suppress_health_check=list(HealthCheck),
            phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
        )
        wrapped = config(given(data=st.data())(test))
        if self.seed is not None and not self.derandomize:
            wrapped = hypothesis_seed(_stream_seed(self.seed, prop, stream))(wrapped)
        # One database key per (subject, property), so failures replay first next time; given
        # outright, Hypothesis need not hash the test's source on every run (derandomize does).
        digest = f"{self.target}\0{prop}".encode()
        wrapped._hypothesis_internal_database_key = hashlib.sha384(  # type: ignore[attr-defined]
            b"attnspec\0" + digest).digest()
        try:
            inner = wrapped.hypothesis.inner_test  # type: ignore[attr-defined]
            inner._hypothesis_internal_add_digest = digest
        except AttributeError:
            pass
        return wrapped

    def _hypothesis(self, prop: str, progress: Progress | None, total: int, stream: str,
                    state: State, start: float) -> None:
        """Run the search; `state.stop` says why it ended."""
        from hypothesis.errors import FlakyFailure, FlakyStrategyDefinition, Unsatisfiable

        wrapped = self._wrapped(prop, stream, total - state.examples,
                                self._test(prop, progress, total, stream, state))
        _hide_own_source_from_hypothesis()
        state.stop = StopReason.FINISHED
        try:
            with _private_hypothesis_home(self.database is None):
                wrapped()
        except _Abort as abort:
            state.stop = abort.reason
            state.smallest_failure()
        except _PropertyFailed:
            state.stop = StopReason.FAILED
        except _Halted:
            state.stop = StopReason.HALTED
            state.smallest_failure()
            return
        except (FlakyFailure, FlakyStrategyDefinition) as error:
            state.stop = StopReason.FLAKY
            state.notes.add(f"flaky: {type(error).__name__}")
        except Unsatisfiable:
            state.stop = StopReason.UNSATISFIABLE
            state.skip = self._unreached(state)
        except KeyboardInterrupt as interrupt:  # keep what this property found so far
            state.stop = StopReason.INTERRUPTED
            partial = self._result(prop, state, time.perf_counter() - start)
            interrupt.partial_result = verdicts.cut_short(  # type: ignore[attr-defined]
                partial, partial.verdict == "pass", "interrupted",
                f"Ctrl-C after {partial.examples} examples, before a verdict",
                "interrupted while shrinking: a smaller counterexample may exist")
            raise
        if state.crash is not None and state.first_failure_at is not None:
            if self._crash_shrink_left <= 0:
                state.notes.add(f"crash not shrunk: this run's {_CRASH_SHRINK_SECONDS:g} s "
                                "for shrinking crashes were spent on earlier properties")
            self._crash_shrink_left -= time.perf_counter() - state.first_failure_at
