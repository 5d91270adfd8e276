"""The engine: Hypothesis drives examples, a worker runs the subject, a Report comes out.

The CLI, the Python API (`verify`) and the pytest suite in conformance/ are front ends over
`Session`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import platform
import re
import shlex
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from .._errors import ConfigError, TargetError, UsageError
from ..common.dtypes import default_dtypes
from ..common.options import (
    KERNEL_MAX_SEQ,
    MAX_SEQ_LIMIT,
    MODULE_MAX_SEQ,
    NARROW_HEAD_DIM,
    NARROW_HEADS,
    PROFILES,
    RunOptions,
)
from ..common.protocol import Executor
from ..common.report import Progress, PropertyResult
from ..common.users import resolve_worker_user
from ..properties import BY_ID, PROPERTY_IDS, TWINNED, run_check
from ..properties.base import Context, Example, Outcome
from ..properties.found import Found
from ..properties.kernel import (
    KERNEL_BY_ID,
    KERNEL_PROPERTY_IDS,
    KERNEL_TWINNED,
    RACE,
    KernelExample,
    run_kernel_check,
)
from ..properties.kernel import skip_reason as kernel_skip_reason
from ..reference.conventions import KernelConventions
from ..reference.spec import RoPE, positions_from_json
from ..runner.isolation import (
    become_subreaper,
    children,
    is_dumpable,
    is_subreaper,
    stop_subreaper,
    sweep,
)
from ..runner.spawn import Spawned, spawn
from ..runner.subject import check_variants, clip
from ..runner.worker import InProcess, SubjectCrash, Worker
from .coverage import _Coverage, _size
from .environment import (
    _cpu_model,
    _hide_own_source_from_hypothesis,
    _installed,
    _private_hypothesis_home,
    _target_name,
)
from .selection import KERNEL_PROPERTIES, PROPERTIES

if TYPE_CHECKING:
    from ..runner.gang import Gang

__all__ = ["KERNEL_PROPERTIES", "PROFILES", "PROPERTIES", "RunOptions", "Session"]


# Bounds on a replayed example, so that a typo cannot allocate hundreds of GB.
_REPLAY_LIMITS = {"B": 1024, "C": 65536, "H": 4096}
_REPLAY_GIB = 8
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


def _stream_seed(seed: int, prop: str, stream: str) -> int:
    """One Hypothesis seed per (seed, property, pass), so the properties (and the quick pass)
    each see their own examples rather than all replaying the same sequence."""
    digest = hashlib.sha256(f"{seed}\0{prop}\0{stream}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


class _Abort(BaseException):
    """Stops Hypothesis at once (it lets BaseException through without shrinking)."""


class _Halted(BaseException):
    """The run stopped at another property's failure (-x, with lanes): end this pass now."""


class _PropertyFailed(Exception):
    pass


AnyExample = Example | KernelExample


@dataclass
class _State:
    """What one property's run has seen so far, from which its `PropertyResult` is made."""

    examples: int = 0  # examples run (a skipped one does not count)
    reached: int = 0  # of those, examples in which the subject ran a request (its answers say)
    forwards: int = 0  # forward calls they made, for forwards_per_example
    failures: list[tuple[AnyExample, Outcome]] = field(default_factory=list)  # fails, errors
    last: tuple[AnyExample, Outcome] | None = None  # the failure reported: Hypothesis' last
    largest: tuple[AnyExample, Outcome] | None = None  # the largest measured violation
    crash: tuple[AnyExample, SubjectCrash] | None = None  # the smallest crash or timeout
    crashes: int = 0
    stop_shrinking: bool = False  # a timeout or a failed restart: smaller tries cannot help
    first_failure_at: float | None = None  # when shrinking began (its time budget)
    failed_after: int = 0  # examples run when it began (its example budget)
    skip: str | None = None  # why the subject skipped the property, if it did
    declined: int = 0  # drawn specs the subject's supports(spec) declined
    notes: set[str] = field(default_factory=set)
    drawn: _Coverage = field(default_factory=_Coverage)


def _listed(variants: Mapping[str, Any], name: str) -> list[Any]:
    """The values a v2 subject lets `name` take ("any": a stand-in that is not None)."""
    values = variants.get(name)
    if values is None:
        return [None]
    return [1] if values == "any" else list(values)


def _positions_listed(variants: Mapping[str, Any]) -> list[Any]:
    declared = variants.get("positions")
    if declared is None:
        return []
    if declared == "any":
        return [RoPE()]
    return [positions_from_json(p) for p in declared]


def _grouped_heads(variants: Mapping[str, Any], max_heads: int) -> list[int]:
    from .strategies import grouped_heads  # Hypothesis loads only when examples are drawn

    return grouped_heads(variants, max_heads)


_HOOK_SIGNATURES = {
    "decode": "decode(module, x, cache, offset) -> (output, cache)",
    "padded": "padded(module, x, key_mask) -> output",
    "cross": "cross(module, x_q, x_kv) -> output, causal from CORNER",
    "shifted": "shifted(module, x, offset) -> output, x's positions starting at offset",
    "decode_padded": "decode_padded(module, x, key_mask, cache, offset) -> (output, cache)",
    "shard_heads": "shard_heads(module, mesh) -> module, tensor parallel over heads",
    "shard_positions": "shard_positions(module, mesh) -> module, context parallel over "
                       "positions",
}


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
        cuda = torch.cuda.is_available()
        if options.device == "cuda" and not cuda:
            raise UsageError(option="device", value=options.device,
                             reason="torch sees no CUDA device on this machine "
                                    "(torch.cuda.is_available() is False).")
        self.devices = ["cpu", "cuda"] if options.device == "all" and cuda else (
            ["cpu"] if options.device == "all" else [options.device])
        self.requested_dtypes = list(options.dtypes) if options.dtypes else None
        self.profile = options.profile
        self.max_examples = options.examples
        self.seed = options.seed
        self.timeout = options.timeout
        self.max_seq = options.max_seq or MODULE_MAX_SEQ  # until the subject says kernel
        self._crash_shrink_left = _CRASH_SHRINK_SECONDS
        self._passed: dict[str, tuple[_State, float]] = {}  # quick passes the full pass continues
        self._declined: dict[str, int] = {}  # per property, the specs supports(spec) declined
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
        sizes = options.sizes
        self.sizes = sizes
        # The subject's detached processes are re-parented here and killed at close; the
        # children this process had before are the caller's and are left alone.
        self.user = (resolve_worker_user(options.worker_user)
                     if options.worker_user is not None else None)
        if self.user is not None and not isolate:
            raise UsageError(option="worker_user", value=options.worker_user,
                             reason="the subject runs in this process (a Python object as "
                                    "TARGET, or isolate=False), so it cannot run as another "
                                    "user; give a TARGET string.")
        self._was_subreaper = is_subreaper()  # the CLI's runner is one already, for the run
        self.subreaper = become_subreaper()
        self._own_children = set(children())
        self.swept: int | None = None  # how many detached processes close() killed
        # The twin's process, started here or when it is first needed, for its Worker to adopt;
        # not for another user, whose workers are spawned as that user when they start.
        self._twin_spawned: Spawned | None = None
        if isolate and twin_ahead and self.user is None:
            self._twin_spawned = spawn()
        try:
            self.executor: Executor = (Worker(target, timeout=options.timeout, sizes=sizes,
                                              user=self.user)
                                       if isolate else InProcess(target, sizes))
        except BaseException:  # a TARGET that fails to load may have detached processes too
            if self.subreaper:
                sweep(self._own_children)
                if not self._was_subreaper:
                    stop_subreaper()
            raise
        # Ranks for sharded examples, per world size: started at the first such example, kept
        # for the run (a start costs seconds), always processes (they load TARGET by name).
        self._gangs: dict[int, Gang] = {}
        self._rank_target = target if isinstance(target, str) else None
        # A second worker for the self-comparisons (`Context.submit_apart`), so that no process
        # sees both sides of one: loaded in a thread from the first property that needs it.
        self._twin: Worker | None = None
        self._twin_loading: threading.Thread | None = None
        self._twin_error: str | None = None
        self._twin_wait = True  # False in verify's quick pass, which need not wait for it
        self.info = self.executor.info
        self.kernel = self.info.protocol == "kernel"
        self.conventions = KernelConventions.from_json(self.info.kernel) if self.kernel \
            else None
        # How the worker's first call differed from the same call again (kernels; determinism).
        self.first_call: str | None = None
        self.max_seq = options.max_seq or (KERNEL_MAX_SEQ if self.kernel else MODULE_MAX_SEQ)
        self.ids = KERNEL_PROPERTY_IDS if self.kernel else PROPERTY_IDS
        self.twinned = KERNEL_TWINNED if self.kernel else TWINNED
        strays = [p for p in options.require or () if p not in self.ids]
        if strays:
            self.close()
            kind = "a kernel" if self.kernel else "a module"
            raise UsageError(option="require", value=",".join(options.require or ()),
                             reason=f"{', '.join(strays)} {'is' if len(strays) == 1 else 'are'} "
                                    f"no property of {kind} subject; its ids are "
                                    f"{', '.join(self.ids)}.")
        # Properties that must run: a pass without them would not say the subject is attention.
        self.required = frozenset(p for p in options.required if p in self.ids)
        if self.info.protocol == 2:  # again here: the worker's process is the subject's
            try:
                check_variants(self.info.variants or {}, repr(self.target))
            except TargetError:
                self.close()
                raise
            from ..runner.subject import as_of

            # "any" as the subject's revision meant it: a subject keeps its verdict.
            self.info = self.executor.info = dataclasses.replace(
                self.info, variants=as_of(self.info.variants or {}, self.info.revision))
        if self.info.supported is not None and not self.info.supported:
            self.close()
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
            self.close()
            half = (" (float16 is checked on CUDA only, unless the subject's DTYPES name it)"
                    if "float16" in requested else "")
            raise UsageError(option="dtypes", value=",".join(requested),
                             reason=f"no such dtype to check on {', '.join(self.devices)}; "
                                    f"{whose} offer {offered}{half}.")
        self._protocol_hints()
        self.found = self._find_weights()

    def _probe_dtype(self) -> tuple[str, str]:
        """(device, dtype) for the load's probes: the CPU in float64 where the subject takes
        it, else float32, else what it takes."""
        device = "cpu" if self.dtypes.get("cpu") else next(d for d, ts in self.dtypes.items()
                                                            if ts)
        claimed = self.dtypes[device]
        return device, next((d for d in ("float64", "float32") if d in claimed), claimed[0])

    def _run_probe(self, ex: AnyExample, steps: list[dict[str, Any]]) -> list[Any]:
        return Context(self.executor).request(ex, steps)

    def _protocol_hints(self) -> None:
        """A subject written against the protocol in a common wrong way is told so now, in
        one line (a TargetError: exit 2), not by a failure in every property."""
        from ..properties.found import module_hint, probe_examples

        try:
            with self._judging():
                if self.kernel:
                    from ..properties.kernel import first_call, layout_hint

                    assert self.conventions is not None
                    # First: this is the worker's first call, the one a warm-up would hide.
                    self.first_call = first_call(Context(self.executor), self.conventions,
                                                 *self._probe_dtype())
                    hint = layout_hint(Context(self.executor), self.conventions,
                                       *self._probe_dtype())
                else:
                    device, dtype = self._probe_dtype()
                    hint = module_hint(self._run_probe, probe_examples(
                        self.info.protocol, self.info.variants, self.info.supported, dtype,
                        device, self.sizes))
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
        if self.kernel or self.info.has_export:
            return None
        from ..properties.found import find_weights, probe_examples

        device, dtype = self._probe_dtype()
        examples = probe_examples(self.info.protocol, self.info.variants, self.info.supported,
                                  dtype, device, self.sizes)
        try:
            with self._judging():
                found = find_weights(self._run_probe, examples)
        except SubjectCrash as crash:
            found = Found(why="the probe's module could not be run "
                                f"({self._in_flags(str(crash))})")
        if found.ident is not None:
            self.info = self.executor.info = dataclasses.replace(
                self.info, has_export=True, found=found.ident)
        return found

    def _claimed(self, device: str) -> list[str]:
        """The subject's DTYPES, or attnspec's defaults for the device."""
        return list(self.info.dtypes or default_dtypes(device))

    def _dtypes_for(self, device: str) -> list[str]:
        return [d for d in self._claimed(device)
                if self.requested_dtypes is None or d in self.requested_dtypes]

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        gangs, self._gangs = list(self._gangs.values()), {}
        for gang in gangs:
            gang.close()
        spawned, self._twin_spawned = self._twin_spawned, None
        if spawned is not None and (self._twin_loading is None or self._twin_loading.is_alive()):
            # Never needed, or a run that ends (-x, a failure) while it loads: no waiting.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(spawned[0].pid, signal.SIGKILL)
            spawned[0].wait()
            if self._twin_loading is None:
                spawned[1].close()
        if self._twin_loading is not None:
            self._twin_loading.join()
        twin, self._twin = self._twin, None
        if twin is not None:
            twin.close()
        self.executor.close()
        # What the subject detached from its group (setsid) was re-parented here: end it too.
        if self.subreaper and self.swept is None:
            self.swept = sweep(self._own_children)
            if not self._was_subreaper:
                stop_subreaper()

    def _start_twin(self) -> None:
        """Start loading the twin worker in a thread (a start is about 1.7 s of CPU, spent
        beside the quick pass), once."""
        if self.isolated and self._twin_loading is None:
            if self._twin_spawned is None and self.user is None:  # another user's: its Worker's
                self._twin_spawned = spawn()
            self._twin_loading = threading.Thread(target=self._load_twin, daemon=True,
                                                  name="attnspec-twin")
            self._twin_loading.start()

    def _load_twin(self) -> None:
        assert self._rank_target is not None
        try:
            self._twin = Worker(self._rank_target, timeout=self.timeout, sizes=self.sizes,
                                user=self.user, spawned=self._twin_spawned)
        except TargetError as error:  # it loaded once already: the subject's doing
            self._twin_error = (f"the second worker, which runs one side of each "
                                f"self-comparison, could not be started: {error}")

    def _twin_worker(self) -> Executor | None:
        """The twin worker; in verify's quick pass None unless it is loaded already (the quick
        pass then compares in one process, as in process: a failure there is one all the same,
        and the full pass, which waits for the twin, catches what one process hides). The
        quick pass never starts it: a rejection there costs no second worker."""
        if not self._twin_wait and (self._twin_loading is None or self._twin_loading.is_alive()):
            return None
        self._start_twin()
        assert self._twin_loading is not None
        self._twin_loading.join()
        if self._twin is None:
            raise SubjectCrash("crash", self._twin_error or "the second worker did not start",
                               ran=False)
        return self._twin

    def _gang(self, world: int) -> Gang:
        """The ranks for a sharded example over `world` processes, started once per run."""
        gang = self._gangs.get(world)
        if gang is None:
            from ..runner.gang import Gang

            assert self._rank_target is not None
            gang = self._gangs[world] = Gang(self._rank_target, world, timeout=self.timeout,
                                             sizes=self.sizes, user=self.user)
        return gang

    def _worlds(self, prop: str | None = None) -> list[int]:
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
            "isolation": {"subreaper": self.subreaper, "dumpable": is_dumpable(),
                          "worker_user": None if self.user is None else self.user.name},
            "protocol": self.info.revision or self.info.protocol,
            "black_box": self.options.black_box, "required": sorted(self.required),
            **({} if self.kernel else {"weights": (
                {"source": "export_weights"} if self.found is None else self.found.header())}),
        }

    def replay_command(self, prop: str, ex: AnyExample) -> str:
        example = json.dumps(ex.to_json(), separators=(",", ":"))
        return (f"attnspec verify {shlex.quote(self.target)} --only {prop} "
                f"--replay {shlex.quote(example)}")

    # ---- drawing examples --------------------------------------------------------------

    def _draw(self, data: Any, prop: str, narrow: bool = False) -> Example:
        """One example for `prop`; `narrow`: H <= 8 and D <= 16 only (verify's quick pass,
        where most bugs show at a fraction of a wide example's cost)."""
        strategy = self._strategies.get((prop, narrow))
        if strategy is None and self.kernel:
            from .kernel_strategies import kernel_examples

            assert self.conventions is not None
            heads, dim, _ = self.sizes
            strategy = self._strategies[(prop, narrow)] = kernel_examples(
                KERNEL_BY_ID[prop], self.conventions, dtypes=self.dtypes, max_seq=self.max_seq,
                max_heads=heads, max_head_dim=dim, narrow=narrow)
            _hide_own_source_from_hypothesis()
        if strategy is None:
            from .strategies import examples

            heads, dim, width = self.sizes
            if narrow:
                heads, dim = min(heads, NARROW_HEADS), min(dim, NARROW_HEAD_DIM)
            strategy = self._strategies[(prop, narrow)] = examples(
                BY_ID[prop], dtypes=self.dtypes, supported=self.info.supported,
                max_seq=self.max_seq, max_heads=heads, max_head_dim=dim, max_width=width,
                variants=self.info.variants if self.info.protocol == 2 else None,
                worlds=self._worlds(prop), layout=self.info.cp_layout)
            _hide_own_source_from_hypothesis()  # _strategies, new here, before a draw mines it
        return data.draw(strategy, label="example")  # type: ignore[no-any-return]

    # ---- running -----------------------------------------------------------------------

    def _skip_reason(self, prop: str) -> str | None:
        if self.kernel:
            assert self.conventions is not None
            return kernel_skip_reason(KERNEL_BY_ID[prop], self.conventions)
        spec = BY_ID[prop]
        v2 = self.info.protocol == 2
        if spec.needs_window and not v2:
            return "the subject speaks protocol 1 (plain attention): it has no window"
        if spec.needs_window and not any(
                w is not None for w in _listed(self.info.variants or {}, "window")):
            return "the subject's VARIANTS allow no window"
        if spec.needs_groups and not v2:
            return "the subject speaks protocol 1 (plain attention): every head has its own k, v"
        if spec.needs_groups and not _grouped_heads(self.info.variants or {}, self.sizes[0]):
            return (f"no grouped-query spec to draw: the subject's VARIANTS allow no n_kv_head "
                    f"with 1 < n_kv_head < n_head for n_head <= {self.sizes[0]} (max_heads)")
        if spec.needs_rope and v2 and not any(
                isinstance(p, RoPE) for p in _positions_listed(self.info.variants or {})):
            return "the subject's VARIANTS allow no RoPE positions"
        if spec.needs_hook is not None and not v2:
            return ("the subject speaks protocol 1, and inference and sharding hooks are "
                    "protocol 2's (docs/design.md, section 3)")
        if spec.needs_hook is not None and spec.needs_hook not in self.info.hooks:
            return (f"the subject defines no {spec.needs_hook} hook "
                    f"({_HOOK_SIGNATURES[spec.needs_hook]}; docs/design.md, section 3)")
        if spec.shards is not None:
            reason = self._shard_skip_reason(prop)
            if reason is not None:
                return reason
        if spec.invalid_configs and v2:
            return ("protocol v2 subjects are built only from valid AttentionSpecs, which "
                    "refuse C % H, H % n_kv_head and sizes below 1 themselves")
        if spec.needs_export and not self.info.has_export:
            if self.found is None or not self.found.why:
                return "the subject has no export_weights"
            if prop != "oracle":  # the oracle's says what was tried, once
                return ("the subject has no export_weights, and no weights of its were "
                        "confirmed by name (see oracle)")
            return f"the subject has no export_weights, and {self.found.why}"
        if spec.needs_cuda and not (self.info.cuda and "cuda" in self.devices):
            return "no CUDA device"
        return None

    def _shard_skip_reason(self, prop: str) -> str | None:
        import torch.distributed as td

        if self._rank_target is None:
            return ("the TARGET is a Python object: ranks are processes of their own, which "
                    "load the subject by name (pass a path or a module name)")
        if not self._worlds():
            return (f"this run's world_sizes {list(self.options.world_sizes or ())} exclude "
                    f"every one of the subject's WORLD_SIZES {list(self.info.world_sizes)}: "
                    "give one of those, or leave world_sizes out to use them all")
        if not self._worlds(prop):
            bound = (f"max_heads={self.sizes[0]} and the subject's n_kv_head"
                     if BY_ID[prop].shards == "heads" else
                     f"max_seq={self.max_seq} ({self.info.cp_layout} layout: T % "
                     f"{'2W' if self.info.cp_layout == 'head_tail' else 'W'} == 0)")
            return (f"no world in {self._worlds()} fits {bound}: raise the bound or add a "
                    "smaller world size")
        if not (td.is_available() and td.is_gloo_available()):
            return "this torch has no torch.distributed with gloo, which sharded examples use"
        if "cpu" not in self.devices or not self.dtypes.get("cpu"):
            return ("sharded examples run on CPU ranks (gloo); this run checks "
                    f"{', '.join(self.devices)} only")
        return None

    def _result(self, prop: str, state: _State, seconds: float) -> PropertyResult:
        notes = set(state.notes)
        if state.declined and state.examples:  # what the pass was not earned on
            which = "supports(case)" if self.kernel else "supports(spec)"
            notes.add(f"{which} declined {state.declined} of the examples drawn")
        result = PropertyResult(id=prop, examples=state.examples, reached=state.reached,
                                seconds=round(seconds, 3), declined=state.declined,
                                notes=sorted(notes), drawn=state.drawn.to_json())
        if state.examples:
            result.forwards_per_example = round(state.forwards / state.examples, 2)
        if state.crash is not None:
            ex, crash = state.crash
            result.verdict, result.message = crash.kind, str(crash)
            rank = getattr(crash, "rank", None)
            if rank is not None:
                result.where = {"rank": rank}
            result.counterexample = ex.to_json()
            result.replay = self.replay_command(prop, ex)
            return result
        if state.failures:
            ex, outcome = state.last if state.last else min(
                state.failures, key=lambda f: _size(f[0]))
            result.verdict = outcome.kind
            result.message = outcome.message
            result.measured, result.allowed = outcome.measured, outcome.allowed
            result.where = outcome.where
            result.counterexample = ex.to_json()
            result.replay = self.replay_command(prop, ex)
            if state.largest is not None and state.largest[1] is not outcome \
                    and state.largest[0] != ex:  # the same example again says nothing new
                big_ex, big = state.largest
                result.largest = {"measured": big.measured, "allowed": big.allowed,
                                  "message": big.message, "example": big_ex.to_json(),
                                  "replay": self.replay_command(prop, big_ex)}
            return result
        if state.skip is not None and state.examples == 0:
            result.verdict, result.message = "skip", state.skip
            return result
        if state.reached == 0:  # nothing the subject did was judged: not a pass
            result.verdict, result.message = "skip", self._unreached(state)
            return result
        result.verdict = "pass"
        return result

    def _judge_coverage(self, prop: str, result: PropertyResult, state: _State,
                        total: int) -> None:
        """A pass earned on degenerate examples, because the subject declined the others, is
        incomplete: fewer than half the examples asked for, only one-token calls, or (a kernel,
        whose supports(case) sees the dtype) fewer dtypes than the run checks. Without declines
        the draws are the run's own choice."""
        if result.verdict != "pass" or not state.declined:
            return
        which = "supports(case)" if self.kernel else "supports(spec)"
        drawn = state.drawn.to_json() or {}
        lead = f"{which} declined {state.declined} of {state.declined + state.examples} draws"
        lengths = [drawn[a] for a in (("Tq", "Tk") if self.kernel else ("T",)) if a in drawn]
        asked = sorted({d for dts in self.dtypes.values() for d in dts})
        reached = sorted(drawn.get("dtype", {}))
        why = None
        single = not self.kernel and drawn.get("H") == [1, 1] and drawn.get("D") == [1, 1]
        if lengths and all(high <= 1 for _, high in lengths):
            axes = "Tq = Tk = 1" if self.kernel else "T = 1"
            why = f"{lead}: only {axes} was checked, where attention is one key's value"
        elif single:
            why = (f"{lead}: only H = 1 and D = 1 were checked (one head of one channel, where "
                   "head splits, merges and scales cannot show)")
        elif state.examples < max(1, total // 2):
            why = (f"{lead}: only {state.examples} of the {total} examples asked for were "
                   "checked")
        elif self.kernel and len(reached) < len(asked) and state.examples >= 2 * len(asked):
            # Only a kernel's supports(case) sees the dtype: a module's supports(spec) cannot
            # decline one, so a dtype its accepted draws missed is the draws' own chance.
            why = (f"{lead}: only {', '.join(reached)} of {', '.join(asked)} was checked; "
                   f"DTYPES = ({', '.join(f'torch.{d}' for d in reached)},) says so instead, "
                   "and the header then shows it")
        if why is not None:
            result.verdict, result.message = "incomplete", (
                why if "DTYPES" in why else
                why + f"; {which} must accept what it implements, so that a pass covers it")

    def _in_flags(self, message: str) -> str:
        """`message` with the options it names spelled as this run's front end spells them."""
        def named(match: re.Match[str]) -> str:
            flag = (self.flags or {}).get(match[1])
            return f"{flag} {match[2]}" if flag else f"{match[1]}={match[2]}"

        return _NAMED_OPTION.sub(named, message)

    def nothing_checked(self, results: Sequence[PropertyResult]) -> str | None:
        """Why a run whose properties were all skipped checked nothing (None: it checked
        something, or something failed): such a run is the TARGET's or the options' error."""
        skipped = [p for p in results if p.verdict == "skip"]
        if not skipped or any(p.verdict not in ("skip", "not_run") for p in results):
            return None
        lead = ("every spec attnspec drew was declined by supports(spec)"
                if all(self._declined.get(p.id) for p in skipped)
                else "no property's examples reached the subject")
        reasons = "; ".join(f"{p.id}: {p.message}" for p in skipped)
        return f"TARGET {self.target!r}: nothing was checked: {lead} ({reasons})."

    def _unreached(self, state: _State) -> str:
        """Why a property whose examples never reached the subject has no verdict."""
        which = "supports(case)" if self.kernel else "supports(spec)"
        declined = (f"{which} declined all {state.declined} {'cases' if self.kernel else 'specs'}"
                    " drawn" if state.declined else "")
        if not state.examples:
            return declined or ("no example could be drawn for this property within this "
                                f"run's bounds (max_heads={self.sizes[0]}, max_head_dim="
                                f"{self.sizes[1]}, max_width={self.sizes[2]}, max_seq="
                                f"{self.max_seq})")
        why = "; ".join(sorted(state.notes)) or "none asked the subject anything"
        return (f"none of its {state.examples} examples reached the subject: each ended before "
                f"calling it ({why})" + (f", and {declined}" if declined else ""))

    def replay_example(self, prop: str, data: Mapping[str, Any]) -> Example | KernelExample:
        """The example in a replay JSON, checked so that a typo is a UsageError, not a verdict."""
        def bad(why: str) -> UsageError:
            try:
                shown = clip(json.dumps(data, separators=(",", ":"), default=repr), 200)
            except (RecursionError, ValueError):
                shown = "<a nested JSON value>"
            return UsageError(option="replay", value=shown, reason=f"{why}.")

        def whole(value: Any) -> bool:
            return isinstance(value, int) and not isinstance(value, bool)

        if not isinstance(data, Mapping):
            raise bad("expected a JSON object such as a failure's replay command prints")
        if self.kernel:
            return self._replay_kernel_example(prop, data, bad)
        if data.get("kind") == "kernel":
            raise bad("it is a kernel example (kind: kernel), and this subject is a module")
        fields = list(Example.__dataclass_fields__)
        unknown = sorted(map(str, set(data) - set(fields)))
        if {"T", "C"} & set(unknown) and "kind" not in data:
            raise bad("it is a module example (it has T and C, a kernel's has Tq, Tk and D), "
                      "and this subject is a kernel (q, k, v -> o): replay a failure of this "
                      "subject's own report")
        if unknown:
            raise bad(f"unknown field {', '.join(map(repr, unknown))}; the fields are "
                      f"{', '.join(fields)}")
        missing = [k for k in ("B", "T", "C", "H") if k not in data]
        if missing:
            raise bad(f"missing {', '.join(missing)}")
        for key in ("B", "T", "C", "H", "seed"):
            if not whole(data.get(key, 0)):
                raise bad(f"{key} must be a whole number, got {data[key]!r}")
        if not 0 <= data.get("seed", 0) < 2**31:
            raise bad(f"seed must be in 0..{2**31 - 1}, as drawn, got {data['seed']}")
        cuts = data.get("cuts", [])
        if not isinstance(cuts, list | tuple) or not all(whole(t) for t in cuts):
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
        if ex.spec is not None and self.info.protocol != 2:
            raise bad("it has a spec, and this subject speaks protocol 1 (build(n_embd, "
                      "n_head)): drop the spec")
        if prop == "divisibility":  # only build(C, H) runs, on a configuration it must refuse
            return ex
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
        shards = BY_ID[prop].shards
        if not whole(data.get("world", 0)):
            raise bad(f"world must be a whole number, got {data['world']!r}")
        if shards is None and ex.world:
            raise bad(f"world={ex.world}, but {prop} runs unsharded: drop the world")
        if shards is not None:
            from ..reference.sharding import ShardError, check_shardable

            worlds = self._worlds(prop)
            if ex.device != "cpu":
                raise bad(f"device {ex.device!r}: sharded examples run on CPU ranks (gloo)")
            if ex.world not in worlds:
                raise bad(f"world={ex.world}; {prop} runs on {', '.join(map(str, worlds)) or 'no'}"
                          " ranks here (the subject's WORLD_SIZES and the run's world_sizes)")
            try:
                check_shardable(ex.attention, ex.world, shards, ex.T, self.info.cp_layout)
            except ShardError as error:
                raise bad(str(error).rstrip(".")) from None
        device = "cuda" if prop == "device_agreement" else ex.device
        if device not in self.dtypes:
            raise bad(f"device {ex.device!r} is not available here; this run has "
                      f"{', '.join(self.devices)}")
        if ex.dtype not in self.dtypes[device]:
            raise bad(f"dtype {ex.dtype!r} is not one this run checks on {device}: "
                      f"{', '.join(self.dtypes[device])}")
        return ex

    def _check_cache_replay(self, prop: str, ex: KernelExample,
                            bad: Callable[[str], UsageError]) -> None:
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
        paged = self.conventions.paged if self.conventions is not None else None
        want = paged if prop == "paged" else None
        if ex.page_size != want:
            raise bad(f"page_size must be {want!r} for {prop} (the kernel's PAGED = {paged!r}), "
                      f"got {ex.page_size!r}")

    def _replay_kernel_example(self, prop: str, data: Mapping[str, Any],
                               bad: Callable[[str], UsageError]) -> KernelExample:
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
        self._check_cache_replay(prop, ex, bad)
        if ex.device not in self.dtypes:
            raise bad(f"device {ex.device!r} is not available here; this run has "
                      f"{', '.join(self.devices)}")
        if ex.dtype not in self.dtypes[ex.device]:
            raise bad(f"dtype {ex.dtype!r} is not one this run checks on {ex.device}: "
                      f"{', '.join(self.dtypes[ex.device])}")
        return ex

    @contextlib.contextmanager
    def _judging(self) -> Iterator[None]:
        """One torch thread for the runner while it judges a worker's subject: its references
        are small, and a second thread only fights the worker for the cores (about 20% of a
        default verify on 2 cores). In process the subject's own threads are left alone."""
        threads = torch.get_num_threads()
        if not self.isolated or threads == 1:
            yield
            return
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(threads)

    def replay(self, prop: str, example: Example | KernelExample | dict[str, Any],
               ) -> PropertyResult:
        """Run exactly one example of one property (what a failure's replay command does)."""
        self._twin_wait = True
        with self._judging():
            return self.settled(prop, self._replay(prop, example))

    def _replay(self, prop: str, example: Example | KernelExample | dict[str, Any],
                ) -> PropertyResult:
        ex = example if isinstance(example, Example | KernelExample) else \
            self.replay_example(prop, example)
        state = _State()
        start = time.perf_counter()
        try:
            self._one(prop, ex, state)
        except _Declined as declined:
            return PropertyResult(id=prop, verdict="skip", message=str(declined))
        if state.failures:
            state.last = state.failures[-1]
        return self._result(prop, state, time.perf_counter() - start)

    def picture(self, prop: str, example: Example | KernelExample | dict[str, Any],
                ) -> dict[str, Any]:
        """A failure's picture data (properties/pictures.py): the example replayed against the
        subject in its worker (and its twin, for the self-comparisons)."""
        from ..properties.pictures import picture

        ex = example if isinstance(example, Example | KernelExample) else \
            self.replay_example(prop, example)
        self._twin_wait = True
        if prop in self.twinned:
            self._start_twin()
        twin = self._twin_worker if self.isolated else None
        with self._judging():
            return picture(Context(_Counted(self.executor), None, twin), prop, ex)

    def _one(self, prop: str, ex: Example | KernelExample, state: _State) -> Outcome | None:
        state.examples += 1
        counted = _Counted(self.executor)
        try:
            if isinstance(ex, KernelExample) and prop == "determinism" and self.first_call:
                outcome = Outcome("fail", self.first_call)  # the load's first call, not ex's
            elif isinstance(ex, KernelExample):
                assert self.conventions is not None
                outcome = run_kernel_check(
                    Context(counted, None, self._twin_worker if self.isolated else None),
                    prop, ex, self.conventions)
            else:
                outcome = run_check(counted, prop, ex,
                                    self._gang if BY_ID[prop].shards is not None else None,
                                    self._twin_worker if self.isolated else None)
        except SubjectCrash as bare:
            crash = SubjectCrash(bare.kind, f"{self._in_flags(str(bare))} (on {ex.describe()})",
                                 ran=bare.ran)
            crash.rank = getattr(bare, "rank", None)  # type: ignore[attr-defined]
            state.crashes += 1
            # Smaller tries after a timeout could each cost a whole --timeout; after a failed
            # restart they cannot run at all.
            state.stop_shrinking |= crash.kind == "timeout" or not crash.ran
            if state.crash is None or (crash.ran and _size(ex) < _size(state.crash[0])):
                state.crash = (ex, crash)  # the smallest crash seen is the one reported
            state.drawn.add(prop, ex)
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

    def run(self, prop: str, progress: Progress | None = None,
            max_examples: int | None = None, stream: str = "full") -> PropertyResult:
        """Check one property with Hypothesis; the failure, if any, is shrunk to a small one.

        `stream` names the pass (verify's quick first pass is "quick"), so that each pass of a
        seeded run draws its own examples. A full pass after a quick pass that passed continues
        it: the examples it ran count towards the property's total, and are not run again.
        """
        self._twin_wait = stream != "quick"  # the full pass always compares in two processes
        if prop in self.twinned and self._twin_wait:
            self._start_twin()
        with self._judging():
            return self._stateful(prop, self.settled(
                prop, self._run(prop, progress, max_examples, stream)))

    def _stateful(self, prop: str, result: PropertyResult) -> PropertyResult:
        """A failure that the same example does not show in fresh processes is one the
        subject carries from earlier calls (a cache, a global, a buffer): the message says so.
        Replayed once, in a new worker (and twin), only where a property failed."""
        if (not self.isolated or result.verdict not in ("fail", "error")
                or result.counterexample is None or self._rank_target is None
                or (not self.kernel and BY_ID[prop].shards is not None)):
            return result
        try:
            ex = self.replay_example(prop, result.counterexample)
        except UsageError:  # a counterexample beyond a replay's bounds: not replayed
            return result
        fresh: list[Worker] = []

        def worker() -> Worker:
            started = Worker(self._rank_target or "", timeout=self.timeout, sizes=self.sizes,
                             user=self.user)
            started.info = self.info  # the weights found by name, as this run's
            fresh.append(started)
            return started

        try:
            main = worker()
            twin = (lambda: worker()) if prop in self.twinned else None
            with self._judging():
                if isinstance(ex, KernelExample):
                    assert self.conventions is not None
                    outcome = run_kernel_check(Context(main, None, twin), prop, ex,
                                               self.conventions)
                else:
                    outcome = run_check(main, prop, ex, None, twin)
        except (TargetError, SubjectCrash):
            return result  # no fresh worker to be had, or it crashed: nothing to add
        finally:
            for started in fresh:
                started.close()
        if outcome.kind == "pass" and RACE in result.message:
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

    def _run(self, prop: str, progress: Progress | None, max_examples: int | None,
             stream: str) -> PropertyResult:
        from hypothesis import HealthCheck, Phase, Verbosity, given, reject, settings
        from hypothesis import seed as hypothesis_seed
        from hypothesis import strategies as st
        from hypothesis.database import DirectoryBasedExampleDatabase
        from hypothesis.errors import FlakyFailure, FlakyStrategyDefinition, Unsatisfiable

        if prop not in self.ids:
            raise UsageError(option="only", value=prop,
                             reason=f"unknown property id; the ids are {', '.join(self.ids)}.")
        start = time.perf_counter()
        reason = self._skip_reason(prop)
        if reason is not None:
            return PropertyResult(id=prop, verdict="skip", message=reason)
        if self.halted:
            return PropertyResult(id=prop, message=_HALTED)
        total = max_examples or self.max_examples
        state, earlier = self._passed.pop(prop, (_State(), 0.0)) if stream == "full" else (
            _State(), 0.0)
        start -= earlier
        if state.examples >= total:
            done = self._result(prop, state, time.perf_counter() - start)
            self._judge_coverage(prop, done, state, total)
            if progress is not None:
                progress(prop, done.examples, total, done)
            return done

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
                    raise _Abort  # shrinking budget spent: report the smallest failure seen
            crashes = state.crashes
            try:
                outcome = self._one(prop, ex, state)
            except _Declined:
                reject()
            if progress is not None and state.first_failure_at is None:
                progress(prop, min(state.examples, total), total, None)
            crashed = state.crashes > crashes
            if state.stop_shrinking:
                raise _Abort
            if outcome is not None or crashed:
                if state.first_failure_at is None:
                    state.first_failure_at = time.perf_counter()
                    state.failed_after = state.examples
                if outcome is not None:
                    state.last = (ex, outcome)
                # A crash shrinks too, within the same budget (each costs a worker restart).
                raise _PropertyFailed(outcome.message if outcome else "crash")

        # Hypothesis refuses a database with derandomize (CI): the run is its own replay there.
        db = DirectoryBasedExampleDatabase(self.database) if (
            self.database and not self.derandomize) else None
        config = settings(
            max_examples=total - state.examples, deadline=None, database=db,
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
        _hide_own_source_from_hypothesis()
        try:
            with _private_hypothesis_home(self.database is None):
                wrapped()
        except _Abort:
            if state.crash is None and state.failures:
                state.last = min(state.failures, key=lambda f: _size(f[0]))
        except _PropertyFailed:
            pass
        except _Halted:
            return self._halted(prop, state, time.perf_counter() - start)
        except (FlakyFailure, FlakyStrategyDefinition) as error:
            state.notes.add(f"flaky: {type(error).__name__}")
        except Unsatisfiable:
            state.skip = self._unreached(state)
        except KeyboardInterrupt as interrupt:  # keep what this property found so far
            partial = self._result(prop, state, time.perf_counter() - start)
            interrupt.partial_result = _cut_short(  # type: ignore[attr-defined]
                partial, partial.verdict == "pass", "interrupted",
                f"Ctrl-C after {partial.examples} examples, before a verdict",
                "interrupted while shrinking: a smaller counterexample may exist")
            raise
        if state.crash is not None and state.first_failure_at is not None:
            if self._crash_shrink_left <= 0:
                state.notes.add(f"crash not shrunk: this run's {_CRASH_SHRINK_SECONDS:g} s "
                                "for shrinking crashes were spent on earlier properties")
            self._crash_shrink_left -= time.perf_counter() - state.first_failure_at
        result = self._result(prop, state, time.perf_counter() - start)
        self._declined[prop] = state.declined
        if stream == "quick" and result.verdict == "pass":
            self._passed[prop] = (state, time.perf_counter() - start)
        elif stream != "quick":
            self._judge_coverage(prop, result, state, total)
        if progress is not None:
            progress(prop, result.examples, total, result)
        return result


    def _halted(self, prop: str, state: _State, seconds: float) -> PropertyResult:
        """What a pass stopped by another property's failure found: not a verdict, unless it
        had found a failure of its own (then that, not shrunk to the end)."""
        if state.crash is None and state.failures:
            state.last = min(state.failures, key=lambda f: _size(f[0]))
        return _cut_short(
            self._result(prop, state, seconds), state.crash is None and not state.failures,
            "not_run", f"{_HALTED}; its pass had run {state.examples} examples without a "
            "failure", "stopped while shrinking, at another property's failure: a smaller "
            "counterexample may exist")

    def run_continuing(self, prop: str, progress: Progress | None, quick: bool) -> PropertyResult:
        """A property's full pass where verify's quick pass of it may have run in another
        lane: that pass is run again here first (its examples are the same, by its seed), so
        the full pass continues it exactly as in one runner."""
        if quick and prop not in self._passed:
            found = self.run(prop, None, max_examples=_QUICK_EXAMPLES, stream="quick")
            if not found.ok:
                return found
        return self.run(prop, progress)


_HALTED = "the run stopped at another property's failure (exitfirst) before its verdict"


def _cut_short(partial: PropertyResult, verdictless: bool, verdict: str, message: str,
               note: str) -> PropertyResult:
    """A pass stopped before its end: no verdict yet (`verdict`, `message`), or the failure it
    had found, with `note` saying its shrinking was cut short."""
    if verdictless:
        partial.verdict, partial.message = verdict, message
    else:
        partial.notes.append(note)
    return partial
