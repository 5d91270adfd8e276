"""Running a subject in a supervised worker process.

The subject is user code that may raise, hang, kill its process or spawn processes of its own.
It runs in a child process started with `python -c` (not multiprocessing: the user's __main__ is
never re-imported, and the subject may use multiprocessing itself), in a process group of its
own. The parent sends one request at a time over a socket, in the wire format (no pickle), and
waits with a timeout. A hang or a crash costs that request only: the parent kills the whole
group and starts a fresh worker for the next call. The worker kills its group as soon as its
parent is gone, so nothing it started outlives the run, even if the runner is SIGKILLed.
"""

from __future__ import annotations

import atexit
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .._errors import ConfigError, TargetError
from ..common.options import MAX_HEAD_DIM, MAX_HEADS, MAX_WIDTH
from ..common.protocol import answer_limit
from ..common.users import WorkerUser
from .execute import Executed, answer_bool, execute
from .isolation import become_subreaper, sweep
from .spawn import Process, Spawned, spawn, take
from .subject import Subject, fault_text
from .wire import Channel, FrameError, WireError, decode, encode, pack, read_frame, write_frame

__all__ = ["InProcess", "SubjectCrash", "SubjectInfo", "Worker", "grid"]

# How often the worker checks that its parent is still there.
_PARENT_POLL = 0.5

# A frame that began to arrive before the deadline gets this long past it to end.
_FRAME_GRACE = 5.0


def grid(max_heads: int = MAX_HEADS, max_head_dim: int = MAX_HEAD_DIM,
         max_width: int = MAX_WIDTH) -> list[tuple[int, int]]:
    """The (C, H) pairs that generation can draw: `supports` is asked about each once."""
    return [(h * d, h) for h in range(1, max_heads + 1) for d in range(1, max_head_dim + 1)
            if h * d <= max_width]


class SubjectCrash(Exception):
    """The worker died or hung on a request; `kind` is `crash` or `timeout`."""

    def __init__(self, kind: str, message: str, *, ran: bool = True) -> None:
        super().__init__(message)
        self.kind = kind
        self.ran = ran  # False: no worker could be started, so the example never ran


@dataclass(frozen=True)
class SubjectInfo:
    """What a loaded subject provides, as the worker reports it to the runner."""

    name: str
    origin: str
    has_export: bool
    dtypes: tuple[str, ...] | None
    supported: tuple[tuple[int, int], ...] | None
    cuda: bool
    protocol: int | str = 1  # 1, 2 or "kernel"
    variants: dict[str, Any] | None = None  # protocol v2: what the subject lets vary
    revision: str | None = None  # protocol v2's revision: what its VARIANTS "any" means
    kernel: dict[str, Any] | None = None  # a kernel's conventions (KernelConventions.to_json)
    hooks: tuple[str, ...] = ()  # protocol v2's inference hooks it defines
    corner: str = "bottom_right"
    masked_rows: str = "zero"
    padding_values: str = "any"
    world_sizes: tuple[int, ...] = (2, 4)
    cp_layout: str = "head_tail"
    # The runner's own, never the worker's: the weights it found by name and confirmed
    # (runner/finder.py), which export and pullback steps then use in place of export_weights.
    found: str | None = None
    triton: str | None = None  # a Triton kernel's: "interpreter" (TRITON_INTERPRET) or "native"

    @classmethod
    def of(cls, subject: Subject, sizes: tuple[int, int, int] = (MAX_HEADS, MAX_HEAD_DIM,
                                                                  MAX_WIDTH),
           ) -> SubjectInfo:
        import torch

        supported = None
        if subject.supports is not None and subject.protocol == 1:
            try:
                supported = tuple((c, h) for c, h in grid(*sizes) if answer_bool(
                    f"TARGET {subject.target!r}: supports({c}, {h})", subject.supports(c, h),
                    TargetError))
            except TargetError:
                raise
            except BaseException as error:  # noqa: BLE001 - while loading, all is the TARGET's
                raise TargetError(f"TARGET {subject.target!r}: supports() raised "
                                  f"{fault_text(error)}") from None
        for field, values in (subject.variants or {}).items():
            bad = _unsendable(values)
            if bad is not None:
                raise TargetError(f"TARGET {subject.target!r}: VARIANTS[{field!r}] holds "
                                  f"{_clipped(bad)} ({type(bad).__name__}), which cannot be "
                                  "sent as data: list plain values (numbers, strings, None, "
                                  "True/False; positions as attnspec.RoPE(...) or ALiBi()).")
        return cls(name=subject.name, origin=subject.origin,
                   has_export=subject.export_weights is not None, dtypes=subject.dtypes,
                   supported=supported, cuda=torch.cuda.is_available(),
                   protocol=subject.protocol, variants=subject.variants,
                   revision=subject.revision, kernel=subject.kernel,
                   hooks=tuple(subject.hooks), corner=subject.corner,
                   masked_rows=subject.masked_rows, padding_values=subject.padding_values,
                   world_sizes=subject.world_sizes, cp_layout=subject.cp_layout,
                   triton=None if not subject.triton else (
                       "interpreter" if interpreting_triton() else "native"))

    @classmethod
    def from_json(cls, data: Any) -> SubjectInfo:
        """The info a worker sent, checked field by field: a field of the wrong type or out of
        its range is a TargetError (the subject may write to the worker's pipe while loading)."""
        from ..common.dtypes import DTYPE_NAMES
        from ..reference.inference import CORNERS, MASKED_ROWS, PADDING_VALUES
        from ..reference.sharding import LAYOUTS
        from ..reference.spec import VARIABLE_FIELDS
        from .subject import HOOKS, REVISIONS

        if not isinstance(data, dict):
            raise TargetError(f"'info' is {_clipped(data)}, not an object")

        def get(key: str, kind: type | tuple[type, ...], default: Any = None,
                required: bool = False) -> Any:
            if key not in data and not required:
                return default
            value = data.get(key)
            if not isinstance(value, kind):
                raise TargetError(f"'info' has {key!r} = {_clipped(value)}")
            return value

        def one_of(key: str, allowed: Sequence[Any], default: Any) -> Any:
            value = data.get(key, default)
            if not isinstance(value, str | int) or isinstance(value, bool) or value not in allowed:
                raise TargetError(f"'info' has {key!r} = {_clipped(value)}, not one of "
                                  f"{', '.join(map(repr, allowed))}")
            return value

        def items(key: str, check: Any, default: Any) -> Any:
            value = get(key, (list, type(None)) if default is None else list, default)
            if value is not None and not all(check(v) for v in value):
                raise TargetError(f"'info' has {key!r} = {_clipped(value)}")
            return value

        def whole(v: Any) -> bool:
            return isinstance(v, int) and not isinstance(v, bool) and v >= 1

        variants = get("variants", (dict, type(None)))
        if variants is not None and not all(
                k in VARIABLE_FIELDS and (v == "any" or isinstance(v, list) and v)
                for k, v in variants.items()) or _unsendable(variants) is not None:
            raise TargetError(f"'info' has 'variants' = {_clipped(variants)}")
        protocol = one_of("protocol", (1, 2, "kernel"), 1)
        kernel = get("kernel", (dict, type(None)))
        if (kernel is None) != (protocol != "kernel"):
            raise TargetError(f"'info' has protocol {protocol!r} with 'kernel' = "
                              f"{_clipped(kernel)}")
        if kernel is not None:
            from ..reference.conventions import KernelConventions

            try:  # the conventions are checked again here: the worker's process is the subject's
                kernel = KernelConventions.from_json(kernel).to_json()
            except (ConfigError, TypeError) as error:
                raise TargetError(f"'info' has 'kernel' = {_clipped(kernel)}: {error}") from None
        dtypes = items("dtypes", lambda d: d in DTYPE_NAMES, None)
        supported = items("supported", lambda p: isinstance(p, list) and len(p) == 2
                          and all(map(whole, p)), None)
        return cls(name=get("name", str, required=True), origin=get("origin", str, required=True),
                   has_export=get("has_export", bool, required=True),
                   dtypes=None if dtypes is None else tuple(dtypes),
                   supported=None if supported is None else tuple(
                       (c, h) for c, h in supported),
                   cuda=get("cuda", bool, required=True),
                   protocol=protocol, variants=variants, kernel=kernel,
                   revision=None if protocol != 2 else (  # none said: as first published
                       one_of("revision", REVISIONS, "2.0") if data.get("revision") is not None
                       else "2.0"),
                   hooks=tuple(items("hooks", lambda h: h in HOOKS, [])),
                   corner=one_of("corner", CORNERS, "bottom_right"),
                   masked_rows=one_of("masked_rows", MASKED_ROWS, "zero"),
                   padding_values=one_of("padding_values", PADDING_VALUES, "any"),
                   world_sizes=tuple(items("world_sizes", whole, [2, 4])),
                   cp_layout=one_of("cp_layout", LAYOUTS, "head_tail"),
                   triton=None if data.get("triton") is None else one_of(
                       "triton", ("interpreter", "native"), None))


def interpreting_triton() -> bool:
    """Whether Triton kernels in this process run in Triton's interpreter (TRITON_INTERPRET,
    which the runner sets for its workers where the machine shows no GPU: runner/spawn.py)."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "yes", "on")


def _clipped(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _unsendable(value: Any) -> Any:
    """The first part of a VARIANTS value that is not plain JSON data (None when it all is):
    the worker sends VARIANTS to the runner as JSON."""
    if value is None or isinstance(value, str | bool | int | float):
        return None
    if isinstance(value, list | tuple):
        return next((bad for bad in map(_unsendable, value) if bad is not None), None)
    if isinstance(value, dict):
        for key, item in value.items():
            bad = _unsendable(item) if isinstance(key, str) else key
            if bad is not None:
                return bad
        return None
    return value


# ---- the worker's side ------------------------------------------------------------------------


def _end_everything() -> None:
    """Kill what the subject started: the processes it detached from the group (adopted here,
    this worker being a subreaper), then the group, this process included."""
    try:
        sweep(own_session=True, seconds=2.0)
    finally:  # whatever happened there, the group goes
        os.killpg(os.getpgid(0), signal.SIGKILL)


def _watch_parent(parent: int) -> None:
    """End the whole process group once the runner is gone (killed, even by SIGKILL)."""
    while True:
        time.sleep(_PARENT_POLL)
        if os.getppid() != parent:
            _end_everything()


def main(fd: int, parent: int) -> None:
    """The worker process: load the subject, then answer requests until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the runner, not a subject
    # Before the subject runs: a process it detaches (setsid, a double fork) stays ours.
    become_subreaper()
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    _serve(socket.socket(fileno=fd))
    # Stopped, or the runner is gone: whatever the subject started goes with this process.
    _end_everything()


def _serve(conn: socket.socket) -> None:
    try:
        _answer(conn)
    except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
        return  # the runner is gone (killed, or stopped us mid-request): nobody left to tell


def _send_loaded(conn: socket.socket, value: dict[str, Any], target: str,
                 sizes: tuple[int, int, int]) -> None:
    """The load's outcome, within the bound the runner reads it under (`_ready_limit`)."""
    if isinstance(value.get("message"), str) and len(value["message"]) > 20_000:
        value = {**value, "message": value["message"][:20_000] + " [...]"}
    message, limit = pack(value), _ready_limit(sizes)
    if message.nbytes > limit:
        message = pack({"kind": "target_error", "message": f"TARGET {target!r}: what it declares "
                        f"(SubjectInfo, with VARIANTS) takes {message.nbytes} bytes, more than "
                        f"the {limit} attnspec reads."})
    write_frame(conn, message)


def _send_answer(conn: socket.socket, answer: dict[str, Any], limit: int) -> None:
    """The answer, or why it cannot be sent: one that cannot be encoded, or one over the bound
    the runner reads (it would refuse the frame and blame the subject for a crash)."""
    seq = {"seq": answer["seq"]} if "seq" in answer else {}
    try:
        message = pack(answer)
    except BaseException as error:  # noqa: BLE001 - an answer that cannot be sent says why
        message = pack({"kind": "error", "message": "the answer could not be sent: "
                        + fault_text(error), **seq})
    if message.nbytes > limit:
        message = pack({"kind": "error", "message": f"the answer holds {message.nbytes} bytes, "
                        f"more than the {limit} that a request of these shapes can need; it "
                        "was not sent.", **seq})
    write_frame(conn, message)


def _answer(conn: socket.socket) -> None:
    from .subject import load_subject

    hello = decode(read_frame(conn))
    sys.path[:] = [p for p in hello["sys_path"] if isinstance(p, str)]
    target = hello["target"]
    sizes = (int(hello.get("max_heads", MAX_HEADS)), int(hello.get("max_head_dim", MAX_HEAD_DIM)),
             int(hello.get("max_width", MAX_WIDTH)))
    try:
        subject = load_subject(target)
        info = SubjectInfo.of(subject, sizes)
    except TargetError as error:
        _send_loaded(conn, {"kind": "target_error", "message": str(error)}, target, sizes)
        return
    except BaseException as error:  # anything else while loading is still the TARGET's fault
        _send_loaded(conn, {"kind": "target_error", "message":
                            f"TARGET {target!r} failed to load: {fault_text(error)}"},
                     target, sizes)
        return
    state = Executed(subject)
    if hello.get("dist") is not None:  # a rank of a gang: join its process group first
        from .rank import join

        rank = hello["dist"].get("rank")
        try:
            state.mesh = join(hello["dist"])
        except BaseException as error:  # noqa: BLE001 - said to the runner, which decides
            _send_loaded(conn, {"kind": "target_error", "message": f"rank {rank} could not "
                                f"join the process group: {fault_text(error)}"}, target, sizes)
            return
    _send_loaded(conn, {"kind": "ready", "info": asdict(info)}, target, sizes)
    while True:
        request = decode(read_frame(conn))
        if request.get("stop"):
            return
        limit = answer_limit(request, state.n_embd)  # the runner's bound, counted alike
        try:
            answer = execute(state, request)
        except BaseException as error:  # attnspec's own bug: report it, do not die silently
            answer = {"kind": "error", "message": "internal error in attnspec: "
                      + fault_text(error)}
        if "seq" in request:  # the runner checks it: a frame the subject wrote has none
            answer["seq"] = request["seq"]
        del request  # its tensors (and its buffer) go before the answer is sent
        _send_answer(conn, answer, limit)
        del answer


# ---- the runner's side ------------------------------------------------------------------------


def _run_delay(pid: int) -> float | None:
    """Seconds the process has spent runnable but waiting for a CPU (Linux), else None."""
    try:
        with open(f"/proc/{pid}/schedstat") as handle:
            return int(handle.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


class Budget:
    """`timeout` seconds of some processes' own time, counted from now.

    Time they spent runnable but waiting for a CPU on a loaded machine does not count (on
    Linux), so a busy machine does not turn a slow example into a false timeout; a hang still
    times out. Never more than `stretch` x `timeout` in wall time.
    """

    def __init__(self, pids: Sequence[int], timeout: float, stretch: float = 10.0) -> None:
        now = time.monotonic()
        self.deadline, self.latest = now + timeout, now + stretch * timeout
        self.pids = list(pids)  # whose delays count: the caller may narrow it
        self._delays = {pid: _run_delay(pid) for pid in self.pids}

    def left(self) -> float:
        """Seconds to the deadline, moved on by the CPU waits since it was last moved; 0 once
        the time is spent."""
        while True:
            now = time.monotonic()
            if now < self.deadline:
                return self.deadline - now
            gained = 0.0
            for pid in self.pids:
                was, delay = self._delays.get(pid), _run_delay(pid)
                if was is not None and delay is not None:
                    gained = max(gained, delay - was)
                self._delays[pid] = delay
            if gained < 0.05 or now >= self.latest:  # not a loaded machine: a hang
                self.deadline = self.latest = now
                return 0.0
            self.deadline = min(self.deadline + gained, self.latest)


class _Silent(Exception):
    """No answer began to arrive within the budget."""


def receive(channel: Channel, budget: Budget, limit: int) -> dict[str, Any]:
    """One answer of at most `limit` bytes, read under `budget`.

    A frame that began to arrive gets `_FRAME_GRACE` s past the budget to end. _Silent when
    none began; EOFError when the socket closed; WireError for a frame over the bound, one cut
    short, or bytes that are not a message."""
    channel.expect(limit)
    grace_end: float | None = None
    while True:
        frame = channel.pump()
        if frame is not None:
            answer = decode(frame)
            if not isinstance(answer, dict):
                raise WireError(f"a message holding {type(answer).__name__}, not an object")
            return answer
        left = budget.left()
        if left <= 0:
            if not channel.started:
                raise _Silent
            grace_end = grace_end or time.monotonic() + _FRAME_GRACE
            left = grace_end - time.monotonic()
            if left <= 0:
                raise FrameError(f"the answer stopped after {channel.got} of its "
                                 f"{channel.expected} bytes" if channel.expected is not None
                                 else "the answer stopped inside its length")
        select.select([channel], [], [], min(left, 1.0))


def _check_seq(answer: dict[str, Any], seq: int) -> None:
    """Take the request number off an answer; WireError unless it is `seq` (a frame that the
    subject wrote, or an answer to another request, would put every later answer out of step)."""
    got = answer.pop("seq", None)
    if got != seq:
        raise WireError(f"an answer numbered {str(got)[:20]}, to request {seq}")


def _ready_limit(sizes: tuple[int, int, int]) -> int:
    """The bytes a `ready` message may take: SubjectInfo, with a (C, H) pair per grid point."""
    return (1 << 20) + 64 * sizes[0] * sizes[1]


def _signal_name(code: int | None) -> str:
    if code is None:
        return "no exit code"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


_LIVE: weakref.WeakSet[Worker] = weakref.WeakSet()


@atexit.register
def _kill_live_workers() -> None:
    for worker in list(_LIVE):
        worker._kill()


class Worker:
    """The runner's handle on a worker process running TARGET."""

    def __init__(self, target: str, *, timeout: float = 30.0,
                 start_timeout: float = 300.0,
                 sizes: tuple[int, int, int] = (MAX_HEADS, MAX_HEAD_DIM, MAX_WIDTH),
                 user: WorkerUser | None = None, spawned: Spawned | None = None) -> None:
        self.target = target
        self.user = user  # the account the worker runs under (a root runner's option)
        self._spawned = spawned  # a process the caller started ahead, for the first start
        self.sizes = sizes  # (max_heads, max_head_dim, max_width): the grid `supports` is asked
        self.timeout = timeout
        self.start_timeout = start_timeout
        self._process: Process | None = None
        self._conn: Channel | None = None
        self.restarts = -1
        self._restart_error: str | None = None
        self._outstanding = False  # a request sent whose answer is not yet read
        self._limit = 0  # the bytes the outstanding request's answer may take
        self._unsent = False  # the worker did not take the outstanding request in time
        self._n_embd = 0  # C of the module built last: it bounds the next answers
        self._seq = 0  # the outstanding request's number, which its answer echoes
        _LIVE.add(self)
        self.info = self._start()

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def _start(self) -> SubjectInfo:
        # The first start adopts a worker `attnspec verify` started ahead, if there is one.
        # A worker for another user is never the one started ahead (that one is the runner's).
        given, self._spawned = self._spawned, None
        process, sock = given or (self.restarts < 0 and self.user is None and take()) or spawn(
            self.user)
        conn = Channel(sock)
        self._process, self._conn = process, conn
        self.restarts += 1
        silent = TargetError(f"TARGET {self.target!r} did not finish loading within "
                             f"{self.start_timeout:g} s.")
        try:
            # The load's budget is wall time: a subject may take long to import, not forever.
            budget = Budget([process.pid], self.start_timeout, stretch=1.0)
            if not conn.send(pack({"target": self.target, "sys_path": list(sys.path),
                                   "max_heads": self.sizes[0], "max_head_dim": self.sizes[1],
                                   "max_width": self.sizes[2]}), budget.left):
                raise _Silent
            answer = receive(conn, budget, _ready_limit(self.sizes))
        except _Silent:
            self._kill()
            raise silent from None
        except (EOFError, OSError):
            code = self._reap()
            as_user = "" if self.user is None else (
                f"; the worker ran as user {self.user.name!r}: it must be able to read attnspec, "
                "torch, the TARGET and the working directory (its stderr above says more)")
            raise TargetError(f"TARGET {self.target!r} killed its process while loading "
                              f"({_signal_name(code)}){as_user}.") from None
        except WireError as error:
            self._kill()
            raise TargetError(f"TARGET {self.target!r}: while it loaded, its worker sent "
                              f"something that is not attnspec's answer ({error}; did the "
                              "subject write to attnspec's socket?).") from None
        except BaseException:  # Ctrl-C while the subject loads: leave no worker behind
            self._kill()
            raise
        kind = answer.get("kind")
        if kind == "target_error" and isinstance(answer.get("message"), str):
            self._kill()
            raise TargetError(answer["message"])
        try:
            if kind != "ready":
                raise TargetError(f"answered {_clipped(answer)} instead of 'ready' or "
                                  "'target_error'")
            return SubjectInfo.from_json(answer.get("info"))
        except TargetError as error:
            self._kill()
            raise TargetError(f"TARGET {self.target!r}: the worker's message on loading is not "
                              f"one attnspec sent ({error}); did the subject write to "
                              "attnspec's socket?") from None

    def _reap(self) -> int | None:
        """Wait briefly for a dying worker's exit code, then clear up its group."""
        code = None
        if self._process is not None:
            try:
                code = self._process.wait(10)
            except subprocess.TimeoutExpired:
                pass
        self._kill()
        return code

    def _kill(self) -> None:
        process, self._process = self._process, None
        self._outstanding = False
        if process is not None:
            try:  # the group: the worker and whatever the subject spawned
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                pass
        if self._conn is not None:
            self._conn.close()
        self._conn = None

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        self.submit(request)
        return self.collect()

    def submit(self, request: dict[str, Any]) -> None:
        if self._outstanding:  # an answer nobody collected (Ctrl-C in between): not this one's
            try:
                self.collect()
            except SubjectCrash:
                pass
        if self._process is None or self._process.poll() is not None:
            self._kill()
            if self._restart_error is not None:
                raise SubjectCrash("crash", self._restart_error, ran=False)
            try:
                self._start()
            except TargetError as error:  # verdicts so far stand; the rest say why they stop
                self._restart_error = f"the worker could not be restarted: {error}"
                raise SubjectCrash("crash", self._restart_error, ran=False) from None
        assert self._conn is not None and self._process is not None
        build = request.get("build")
        if isinstance(build, dict) and build.get("n_embd") is not None:
            self._n_embd = int(build["n_embd"])
        self._limit = answer_limit(request, self._n_embd)
        self._seq += 1
        request = {**request, "seq": self._seq}
        self._outstanding, self._unsent = True, False
        try:
            # A worker that stops reading (stopped, or its socket's reader stolen) gets the
            # request's own budget, then collect() calls it a timeout.
            self._unsent = not self._conn.send(
                pack(request), Budget([self._process.pid], self.timeout).left)
        except OSError:
            pass  # it died since the last answer: collect() says how

    def collect(self) -> dict[str, Any]:
        assert self._conn is not None and self._process is not None and self._outstanding
        self._outstanding = False
        try:
            if self._unsent:
                raise _Silent
            answer = receive(self._conn, Budget([self._process.pid], self.timeout), self._limit)
            _check_seq(answer, self._seq)
            return answer
        except _Silent:
            self._kill()
            raise SubjectCrash("timeout", f"no answer within timeout={self.timeout:g} s; "
                               "the worker was killed and restarted.") from None
        except (EOFError, OSError):
            code = self._reap()
            raise SubjectCrash("crash", f"the subject killed its process ({_signal_name(code)});"
                               " the worker was restarted.") from None
        except WireError as error:
            self._kill()
            raise SubjectCrash("crash", f"the worker sent something that is not an answer "
                               f"({error}; did the subject write to attnspec's socket?); it "
                               "was killed and restarted.") from None

    def restart_later(self) -> None:
        """Kill the worker: its answers can no longer be matched to requests (it forged one),
        so the next request starts a fresh one."""
        self._kill()

    def close(self) -> None:
        if self._conn is not None and self._process is not None and self._process.poll() is None:
            try:
                self._conn.send(pack({"stop": True}), Budget([], 1.0, stretch=1.0).left)
                self._process.wait(5)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        self._kill()
        _LIVE.discard(self)


class InProcess:
    """Runs the subject in this process: for Python objects as TARGET, and for speed in tests.

    No protection from hangs or crashes, and no trust boundary: the subject shares the judge's
    process. Requests and answers still go through the wire format, so both paths see the same
    fresh tensors.
    """

    def __init__(self, target: Any,
                 sizes: tuple[int, int, int] = (MAX_HEADS, MAX_HEAD_DIM, MAX_WIDTH)) -> None:
        from .subject import load_subject

        subject = load_subject(target) if isinstance(target, str) else _subject_from_object(
            target)
        self.info = SubjectInfo.of(subject, sizes)
        self._state = Executed(subject)
        self._pending: dict[str, Any] | None = None

    def submit(self, request: dict[str, Any]) -> None:
        self._pending = request  # run at collect(): in one process nothing runs in between

    def collect(self) -> dict[str, Any]:
        request, self._pending = self._pending, None
        if request is None:
            raise RuntimeError("collect() without a submit()")
        return self.run(request)

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        import torch

        # execute() resets torch's global state for the subject; this process gets its own back.
        grad, dtype = torch.is_grad_enabled(), torch.get_default_dtype()
        device = torch.get_default_device() if hasattr(torch, "get_default_device") else None
        try:
            return dict(decode(encode(execute(self._state, decode(encode(request))))))
        finally:
            torch.set_grad_enabled(grad)
            torch.set_default_dtype(dtype)
            if device is not None:  # cpu is the default: setting it would add a mode to every op
                torch.set_default_device(None if device == torch.device("cpu") else device)

    def close(self) -> None:
        pass


def _subject_from_object(obj: Any) -> Subject:
    from .subject import _dtypes, _hooks, _load_kernel, protocol_of, sharding_of

    if getattr(obj, "PROTOCOL", None) == "kernel":
        name = str(getattr(obj, "__name__", type(obj).__name__))
        return _load_kernel(obj, name, str(getattr(obj, "__file__", name)))
    build = getattr(obj, "build", None) or (obj if callable(obj) else None)
    if build is None or not callable(build):
        raise TargetError(f"TARGET {obj!r} has no build(n_embd, n_head) and is not callable.")
    name = getattr(obj, "__name__", type(obj).__name__)
    dtypes = _dtypes(obj, str(name))
    protocol, variants, revision = protocol_of(obj, str(name))
    hooks, corner, masked_rows, padding_values = _hooks(obj, str(name), protocol)
    world_sizes, cp_layout = sharding_of(obj, str(name))
    return Subject(target=str(name), name=str(name), build=build, hooks=hooks, corner=corner,
                   world_sizes=world_sizes, cp_layout=cp_layout,
                   masked_rows=masked_rows, padding_values=padding_values,
                   export_weights=getattr(obj, "export_weights", None),
                   supports=getattr(obj, "supports", None), dtypes=dtypes,
                   origin=str(getattr(obj, "__file__", name)), protocol=protocol,
                   variants=variants, revision=revision)
