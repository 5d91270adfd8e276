"""Running a subject in a supervised worker process.

The subject is user code that may raise, hang or kill its process. It runs in a child process
(spawned, so a CUDA context never crosses a fork); the parent sends one example at a time and
waits with a timeout. A hang or a crash costs that example only: the parent records it, kills
the child if needed, and starts a fresh one for the next call.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Protocol

from ._errors import TargetError
from ._properties import Example, Outcome, run_check
from ._subject import fault_text

__all__ = ["Executor", "InProcess", "SubjectCrash", "Worker", "grid"]

# The (C, H) pairs that generation can draw (H 1..8, D 1..16): `supports` is asked about each once.
GRID_H = range(1, 9)
GRID_D = range(1, 17)


def grid() -> list[tuple[int, int]]:
    return [(h * d, h) for h in GRID_H for d in GRID_D]


class SubjectCrash(Exception):
    """The worker died or hung on an example; `kind` is `crash` or `timeout`."""

    def __init__(self, kind: str, message: str, *, ran: bool = True) -> None:
        super().__init__(message)
        self.kind = kind
        self.ran = ran  # False: no worker could be started, so the example never ran


def _describe_subject(target: str) -> dict[str, Any]:
    """Load TARGET and tell the parent what it provides (the worker's first answer)."""
    import torch

    from ._subject import load_subject

    subject = load_subject(target)
    supported: list[tuple[int, int]] | None = None
    if subject.supports is not None:
        try:
            supported = [(c, h) for c, h in grid() if subject.supports(c, h)]
        except BaseException as error:  # noqa: BLE001 - while loading, all is the TARGET's
            raise TargetError(f"TARGET {target!r}: supports() raised "
                              f"{fault_text(error)}") from None
    return {"subject": subject, "meta": {
        "name": subject.name, "origin": subject.origin,
        "has_export": subject.export_weights is not None,
        "dtypes": list(subject.dtypes) if subject.dtypes is not None else None,
        "supported": supported, "cuda": torch.cuda.is_available()}}


def _serve(conn: Connection, target: str) -> None:
    """The worker's main loop: load the subject, then answer check requests until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the parent, not a subject
    os.dup2(2, 1)  # the subject's prints go to stderr: stdout is the verdict table's
    try:
        _answer(conn, target)
    except (BrokenPipeError, ConnectionResetError, EOFError):
        return  # the parent is gone (killed, or stopped us mid-example): nobody left to tell


def _answer(conn: Connection, target: str) -> None:
    try:
        loaded = _describe_subject(target)
    except TargetError as error:
        conn.send(("target_error", str(error)))
        return
    except BaseException as error:  # anything else while loading is still the TARGET's fault
        conn.send(("target_error", f"TARGET {target!r} failed to load: "
                                   f"{fault_text(error)}"))
        return
    conn.send(("ready", loaded["meta"]))
    subject = loaded["subject"]
    while True:
        request = conn.recv()
        if request[0] == "stop":
            return
        _, prop, example = request
        try:
            outcome = run_check(subject, prop, Example.from_json(example))
        except BaseException as error:  # attnspec's own bug: report it, do not die silently
            outcome = {"kind": "error", "message": "internal error in attnspec: "
                       + fault_text(error)}
        conn.send(("outcome", outcome))


def _run_delay(pid: int) -> float | None:
    """Seconds the process has spent runnable but waiting for a CPU (Linux), else None."""
    try:
        with open(f"/proc/{pid}/schedstat") as handle:
            return int(handle.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def _wait(conn: Connection, pid: int, timeout: float) -> bool:
    """Wait for an answer for `timeout` seconds of the worker's own time.

    Time the worker spent waiting for a CPU on a loaded machine does not count (on Linux), so a
    busy machine does not turn a slow example into a false timeout; a hang still times out.
    """
    deadline = time.monotonic() + timeout
    latest = time.monotonic() + 10 * timeout
    delay = _run_delay(pid)
    while True:
        if conn.poll(max(0.0, min(deadline - time.monotonic(), 1.0))):
            return True
        if time.monotonic() < deadline:
            continue
        now = _run_delay(pid)
        if delay is None or now is None or now - delay < 0.05 or time.monotonic() >= latest:
            return False
        deadline, delay = min(deadline + (now - delay), latest), now


class Executor(Protocol):
    meta: dict[str, Any]

    def check(self, prop: str, example: Example) -> Outcome: ...

    def close(self) -> None: ...


def _signal_name(code: int | None) -> str:
    if code is None:
        return "no exit code"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


@dataclass
class Worker:
    """The parent's handle on a worker process running TARGET."""

    target: str
    timeout: float = 30.0
    start_timeout: float = 300.0

    def __post_init__(self) -> None:
        self._process: Any = None
        self._conn: Connection | None = None
        self.meta: dict[str, Any] = {}
        self.restarts = -1
        self._restart_error: str | None = None
        self._start()

    def _start(self) -> None:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        process = ctx.Process(target=_serve, args=(child, self.target), daemon=True,
                              name="attnspec-worker")
        process.start()
        child.close()
        self._process, self._conn = process, parent
        self.restarts += 1
        try:
            loaded = parent.poll(self.start_timeout)
        except BaseException:  # Ctrl-C while the subject loads: leave no worker behind
            self._kill()
            raise
        if not loaded:
            self._kill()
            raise TargetError(f"TARGET {self.target!r} did not finish loading within "
                              f"{self.start_timeout:g} s.")
        try:
            kind, payload = parent.recv()
        except EOFError:
            process.join(5)
            code = process.exitcode
            self._kill()
            raise TargetError(f"TARGET {self.target!r} killed its process while loading "
                              f"({_signal_name(code)}).") from None
        if kind == "target_error":
            self._kill()
            raise TargetError(payload)
        self.meta = payload

    def _kill(self) -> None:
        if self._process is not None and self._process.is_alive():
            self._process.kill()
        if self._process is not None:
            self._process.join(10)
        if self._conn is not None:
            self._conn.close()
        self._process, self._conn = None, None

    def check(self, prop: str, example: Example) -> Outcome:
        if self._process is None or not self._process.is_alive():
            self._kill()
            if self._restart_error is not None:
                raise SubjectCrash("crash", self._restart_error, ran=False)
            try:
                self._start()
            except TargetError as error:  # verdicts so far stand; the rest say why they stop
                self._restart_error = (f"the worker could not be restarted on "
                                       f"{example.describe()}: {error}")
                raise SubjectCrash("crash", self._restart_error, ran=False) from None
        assert self._conn is not None
        self._conn.send(("check", prop, example.to_json()))
        if not _wait(self._conn, self._process.pid, self.timeout):
            self._kill()
            raise SubjectCrash("timeout", f"no answer within --timeout {self.timeout:g} s on "
                               f"{example.describe()}; the worker was killed and restarted.")
        try:
            kind, outcome = self._conn.recv()
        except (EOFError, ConnectionError, OSError):
            self._process.join(10)
            code = self._process.exitcode
            self._kill()
            raise SubjectCrash("crash", f"the subject killed its process ({_signal_name(code)}) "
                               f"on {example.describe()}; the worker was restarted.") from None
        return dict(outcome)

    def close(self) -> None:
        if self._conn is not None and self._process is not None and self._process.is_alive():
            try:
                self._conn.send(("stop",))
                self._process.join(5)
            except (OSError, ValueError):
                pass
        self._kill()


class InProcess:
    """Runs the subject in this process: for Python objects as TARGET, and for speed in tests.

    No protection from hangs or crashes here.
    """

    def __init__(self, target: Any) -> None:
        from ._subject import Subject, load_subject

        if isinstance(target, str):
            self.subject = load_subject(target)
        else:
            self.subject = _subject_from_object(target, Subject)
        loaded = self.subject
        supported = None
        if loaded.supports is not None:
            supported = [(c, h) for c, h in grid() if loaded.supports(c, h)]
        import torch

        self.meta: dict[str, Any] = {"name": loaded.name, "origin": loaded.origin,
                     "has_export": loaded.export_weights is not None,
                     "dtypes": list(loaded.dtypes) if loaded.dtypes is not None else None,
                     "supported": supported, "cuda": torch.cuda.is_available()}

    def check(self, prop: str, example: Example) -> Outcome:
        return run_check(self.subject, prop, example)

    def close(self) -> None:
        pass


def _subject_from_object(obj: Any, subject_cls: Any) -> Any:
    import torch

    from ._subject import dtype_name

    build = getattr(obj, "build", None) or (obj if callable(obj) else None)
    if build is None or not callable(build):
        raise TargetError(f"TARGET {obj!r} has no build(n_embd, n_head) and is not callable.")
    declared = getattr(obj, "DTYPES", None)
    dtypes = (tuple(dtype_name(d) for d in declared if isinstance(d, torch.dtype))
              if declared is not None else None)
    name = getattr(obj, "__name__", type(obj).__name__)
    return subject_cls(target=str(name), name=str(name), build=build,
                       export_weights=getattr(obj, "export_weights", None),
                       supports=getattr(obj, "supports", None), dtypes=dtypes,
                       origin=str(getattr(obj, "__file__", name)))


def worker_pid(worker: Worker) -> int | None:
    """For tests: the pid of the current worker process."""
    process = worker._process
    return None if process is None else int(process.pid)

