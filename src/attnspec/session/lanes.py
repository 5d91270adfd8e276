"""More runners for one verify: this process forked before it loads the subject, each child a
whole runner (its own Session, worker and supervision) that runs the property passes it is
sent and answers with their verdicts over a pipe.

Why a fork: the child has torch and attnspec imported already (a fresh process would spend
about 1.2 s of CPU importing them again), and nothing of the run exists yet for it to share.
Why a whole runner: Hypothesis is not thread-safe, and each pass's draws depend only on the
seed and the property (`engine._stream_seed`), so a pass gives the same verdict in any lane.
The child is attnspec's own code; the subject still runs only in the child's worker.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from ..common.report import Progress, PropertyResult
from ..runner.isolation import become_subreaper, is_dumpable, make_undumpable
from ..runner.spawn import fork_unsafe_reason

if TYPE_CHECKING:
    from .engine import Session

__all__ = ["Lane", "LaneLost", "fork_unsafe_reason"]

_PR_SET_PDEATHSIG, _PR_SET_NAME = 1, 15
_LINE_LIMIT = 64 * 1024 * 1024  # one answer: a result with its counterexample, never this big


_STOP_POLL = 0.5  # seconds between looks at a silent lane's state


class LaneLost(Exception):
    """The lane's process is gone, or answered something that is not a lane's answer."""


class Lane:
    """The parent's end of one forked runner: `go` once the run's own Session has loaded, then
    `start` a pass and `receive` its progress and result."""

    def __init__(self, make_session: Callable[[], Session], quick_examples: int,
                 name: str, prestart: bool = True, others: Sequence[Lane] = (),
                 silence: float = 3600.0, stopped: float | None = None) -> None:
        self.name = name
        self.silence = silence  # the longest a lane may go without a message
        # The longest it may stay stopped (SIGSTOP: no CPU, so only the wall clock sees it).
        self.stopped = silence if stopped is None else stopped
        self._pending = b""
        down_read, down_write = os.pipe()
        up_read, up_write = os.pipe()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child never returns from here
            code = 1
            try:
                os.close(down_write)
                os.close(up_read)
                for other in others:  # else an earlier lane never sees its pipe close
                    other._forget()
                _child(make_session, quick_examples, prestart, parent, down_read, up_write, name)
                code = 0
            finally:
                os._exit(code)
        os.close(down_read)
        os.close(up_write)
        self.pid = pid
        self._down = os.fdopen(down_write, "wb")
        self._up = os.fdopen(up_read, "rb")
        self.alive = True
        self._reaped = False
        self._closed = threading.Lock()  # close() runs once, from whichever thread is first

    def _forget(self) -> None:
        """In a later lane's child: this lane's pipe ends are the parent's, not the child's."""
        for end in (self._down, self._up):
            with contextlib.suppress(OSError):
                os.close(end.fileno())

    def _send(self, message: dict[str, Any]) -> None:
        try:
            self._down.write(json.dumps(message).encode() + b"\n")
            self._down.flush()
        except (OSError, ValueError) as error:  # ValueError: closed already
            self.alive = False
            raise LaneLost(f"it is gone ({error})") from None

    def receive(self) -> dict[str, Any]:
        """The lane's next message, within `silence` seconds; LaneLost when it ended, stayed
        silent that long (it is killed), or said something malformed."""
        line = self._line()
        try:
            message = json.loads(line)
        except ValueError:
            self.alive = False
            raise LaneLost("it sent a line that is not JSON") from None
        if not isinstance(message, dict):
            self.alive = False
            raise LaneLost(f"it sent {type(message).__name__}, not an object")
        return message

    def _line(self) -> bytes:
        """One line, read under the deadline (a buffered readline would hide what it holds
        from select)."""
        deadline = time.monotonic() + self.silence
        fd = self._up.fileno()
        stopped_since: float | None = None
        while b"\n" not in self._pending:
            now = time.monotonic()
            left = deadline - now
            if left <= 0:
                self.kill()
                raise LaneLost(f"it sent nothing for {self.silence:g} s, and was killed")
            if not select.select([fd], [], [], min(left, _STOP_POLL))[0]:
                if not self._is_stopped():
                    stopped_since = None
                elif stopped_since is None:
                    stopped_since = now
                elif now - stopped_since >= self.stopped:
                    self.kill()
                    raise LaneLost(f"it was stopped (SIGSTOP, or a tracer) for {self.stopped:g} "
                                   "s, and was killed: a stopped runner is a hung one")
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                self.alive = False
                raise LaneLost(f"it ended: {self._status()}")
            self._pending += chunk
            if len(self._pending) > _LINE_LIMIT and b"\n" not in self._pending:
                self.kill()
                raise LaneLost(f"it sent a line of more than {_LINE_LIMIT} bytes")
        line, _, self._pending = self._pending.partition(b"\n")
        return line

    def go(self) -> None:
        """This process's Session has loaded the subject: the lane loads it now. (After, not
        beside: a subject whose load cannot run twice at once fails in the lane, which is
        then lost, not in the run's own load.)"""
        with contextlib.suppress(LaneLost):  # gone already: its thread finds out and says so
            self._send({"go": True})

    def start(self, prop: str, stream: str, quick: bool) -> None:
        """Run `prop`'s quick or full pass (`quick`: the run has quick passes to continue)."""
        self._send({"run": prop, "stream": stream, "quick": quick})

    def halt(self) -> None:
        """Stop the pass it runs at its next example (the run stopped at a failure)."""
        self._signal(signal.SIGUSR1)

    def interrupt(self) -> None:
        """Ctrl-C for the lane: its pass stops now and answers with what it had."""
        self._signal(signal.SIGINT)

    def _is_stopped(self) -> bool:
        try:  # the state is the first field after the name, which may hold ") "
            with open(f"/proc/{self.pid}/stat", "rb") as stat:
                return stat.read().rsplit(b")", 1)[1].split()[0] in (b"T", b"t")
        except (OSError, IndexError):
            return False  # not Linux, or gone: the pipe says so

    def kill(self) -> None:
        """SIGKILL: a lane that did not answer in time (its workers see it gone and end)."""
        self._signal(signal.SIGKILL)
        self.alive = False

    def _signal(self, number: int) -> None:
        if self.alive and not self._reaped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, number)

    def _status(self) -> str:
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return "already reaped"
        deadline = time.monotonic() + 2.0  # the pipe closes a moment before the exit shows
        while pid == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        if pid == 0:
            return "its pipe closed"
        self._reaped = True
        if os.WIFSIGNALED(status):
            return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
        return f"exit status {os.WEXITSTATUS(status)}"

    def close(self, wait: float = 10.0) -> None:
        """Ask it to stop, give it `wait` seconds to close its session, then kill it."""
        if not self._closed.acquire(blocking=False):
            return
        with contextlib.suppress(OSError):
            self._down.close()
        if not self._reaped:
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                try:
                    pid, _ = os.waitpid(self.pid, os.WNOHANG)
                except ChildProcessError:
                    pid = self.pid
                if pid:
                    self._reaped = True
                    break
                time.sleep(0.02)
            if not self._reaped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(self.pid, 0)
                self._reaped = True
        self._up.close()
        self.alive = False


def _child(make_session: Callable[[], Session], quick_examples: int, prestart: bool,
           parent: int, inbox_fd: int, outbox_fd: int, name: str = "lane") -> None:
    """The lane's process: load the subject in a Session of its own, then run passes."""
    import torch

    from ..runner import spawn

    session: Session | None = None

    def first_ctrl_c(signum: int, frame: Any) -> None:
        # Ctrl-C reaches the lane twice, from the terminal and from its parent: one counts.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    def halt(signum: int, frame: Any) -> None:
        if session is not None:
            session.halted = True

    # First: a Ctrl-C from here on is answered. The parent's other handlers (its CLI's
    # SIGTERM) are not this process's: a lane whose parent is gone goes with it.
    signal.signal(signal.SIGINT, first_ctrl_c)
    signal.signal(signal.SIGUSR1, halt)
    for signame in ("SIGTERM", "SIGHUP"):
        signal.signal(getattr(signal, signame), signal.SIG_DFL)
    inbox = os.fdopen(inbox_fd, "rb")
    outbox = os.fdopen(outbox_fd, "wb")

    def send(message: dict[str, Any]) -> None:
        outbox.write(json.dumps(message).encode() + b"\n")  # buffered: written whole
        outbox.flush()

    def progress(prop: str, done: int, total: int, result: PropertyResult | None) -> None:
        send({"progress": [prop, done, total, None if result is None else asdict(result)]})

    try:
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            # What ps and top show: "attnspec-lane1" (the command line stays the parent's).
            libc.prctl(_PR_SET_NAME, f"attnspec-lane{name}"[:15].encode())
        if os.getppid() != parent:
            return
        if is_dumpable() is False:  # a fork keeps it; set again, so the lane does not rest on it
            make_undumpable()
        # The parent's zygote and the worker it started ahead are the parent's; the lane
        # starts its own (a subreaper, so that its forked workers are re-parented to it).
        entry = spawn.forget_zygote()
        if entry is not None and become_subreaper():
            spawn.start_zygote(entry)
        if prestart:  # its worker starts now, and loads the subject once the lane may
            spawn.prestart()
        torch.set_num_threads(1)  # its share of the cores: the parent's processes have theirs
        if not inbox.readline().startswith(b'{"go"'):
            return  # the run's own load failed, or the run is over
        try:
            session = make_session()
        except Exception as error:  # the parent loads it too, and says why in its own words
            send({"error": f"{type(error).__name__}: {error}"})
            return
        send({"loaded": {"kernel": session.kernel, "ids": list(session.ids),
                         "devices": list(session.devices), "dtypes": dict(session.dtypes)}})
        for line in inbox:
            request = json.loads(line)
            prop, stream = request["run"], request["stream"]
            if stream == "quick":
                result = session.run(prop, None, max_examples=quick_examples, stream="quick")
            else:
                result = session.run_continuing(prop, progress, quick=request["quick"])
            send({"result": asdict(result), "declined": session.declined.get(prop, 0)})
    except KeyboardInterrupt as interrupt:
        partial = getattr(interrupt, "partial_result", None)
        with contextlib.suppress(OSError):
            send({"interrupted": asdict(partial) if isinstance(partial, PropertyResult)
                  else None})
    except OSError:
        pass  # the parent is gone: nobody to answer
    except Exception as error:  # attnspec's own failure here: the parent runs the pass itself
        with contextlib.suppress(OSError):
            send({"crashed": f"{type(error).__name__}: {error}"[:2000]})
    finally:
        if session is not None:
            session.close()
        spawn.stop_zygote()  # the lane ends with os._exit: no atexit closes it


_VERDICTS = ("pass", "fail", "error", "crash", "timeout", "skip", "not_run", "interrupted")
_FIELD_TYPES: dict[str, Any] = {"id": str, "verdict": str, "examples": int, "reached": int,
                                "seconds": (int, float), "message": str, "notes": list}


def result_from(data: Any, lane: str) -> PropertyResult:
    """A PropertyResult from a lane's JSON; LaneLost if it is not one (the fields the table
    and the report format are checked for their types too)."""
    try:
        found = PropertyResult(**data)
    except TypeError as error:
        raise LaneLost(f"it sent a result that is not one ({error})") from None
    for name, kind in _FIELD_TYPES.items():
        value = getattr(found, name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise LaneLost(f"it sent a result whose {name} is {type(value).__name__}")
    if found.verdict not in _VERDICTS or not all(isinstance(n, str) for n in found.notes):
        raise LaneLost(f"it sent a result with verdict {found.verdict!r:.40}")
    return found


class Passes:
    """verify's one scheduler: its passes over this process's Session (run in the calling
    thread) and each forked Lane, if any (a thread here waits on each). Every quick pass first,
    in order, then the full passes, each continuing its property's quick pass; a property whose
    passes need the twin or the ranks runs here (they are this Session's). `example`: a replay,
    that one example of the one property instead of its passes."""

    def __init__(self, session: Session, props: list[str], result: Any,
                 save: Callable[[], None], show: Progress | None, exitfirst: bool,
                 quick: int, lanes: list[Lane], example: Any = None) -> None:
        from ..properties import BY_ID

        self.session, self.props, self.result = session, props, result
        self.save, self.exitfirst, self.example = save, exitfirst, example
        self.quick, self.quick_examples = bool(quick), quick  # examples per quick pass; 0: none
        self._show = show
        self.lanes = lanes
        self.here_only = {i for i, p in enumerate(props)
                          if p in session.twinned or (p in BY_ID and BY_ID[p].shards)}
        self.cond = threading.Condition()
        self.quick_queue = list(range(len(props))) if quick else []
        self.quick_ran: dict[int, str] = {}  # index -> the lane whose quick pass ran
        self.quick_passed: dict[int, PropertyResult] = {}
        self.started: set[int] = set()
        self.running: dict[str, tuple[int, str]] = {}  # lane -> (index, stream)
        self.alive = {lane.name for lane in lanes}
        self.stopping = False
        self.closed = False  # run() has returned: nothing more is written into the result
        self.error: BaseException | None = None  # the caller's progress callback raised this
        self.twin_started = False
        self.here_current: int | None = None
        self.here_thread = threading.current_thread()
        self.threads = [threading.Thread(target=self._remote, args=(lane,), daemon=True,
                                         name=f"attnspec-lane-{lane.name}") for lane in lanes]

    def show(self, prop: str, done: int, total: int, found: PropertyResult | None) -> None:
        if self._show is None:
            return
        with self.cond:
            if self.closed or self.error is not None:
                return
            if threading.current_thread() is self.here_thread:
                self._show(prop, done, total, found)
                return
            try:  # a lane's progress: what the caller's callback raises ends the run, here
                self._show(prop, done, total, found)
            except Exception as error:  # noqa: BLE001 - raised again from run()
                self.error = error
                self._stop()

    def run(self) -> None:
        """Every pass, to the end or the first failure (exitfirst); Ctrl-C stops every lane,
        each keeping what its pass had found."""
        self.here_thread = threading.current_thread()
        for thread in self.threads:
            thread.start()
        try:
            while (job := self._next("here")) is not None:
                i, stream = job
                self.here_current = i
                prop = self.props[i]
                if stream == "quick":
                    found = self.session.run(prop, None, max_examples=self.quick_examples,
                                             stream="quick")
                elif self.example is not None:
                    found = self.session.replay(prop, self.example)
                else:  # its quick pass again first, where another lane ran it
                    found = self.session.run_continuing(
                        prop, self.show, self.quick_ran.get(i, "here") != "here")
                self.here_current = None
                self._done("here", i, stream, found)
            for thread in self.threads:
                while thread.is_alive():
                    thread.join(0.1)
            if self.error is not None:
                raise self.error
        except BaseException as interrupt:  # Ctrl-C, a stop signal, or an error
            partial = getattr(interrupt, "partial_result", None)
            with self.cond:
                self.stopping = True
                if isinstance(partial, PropertyResult) and self.here_current is not None:
                    self.result.properties[self.here_current] = partial
            for lane in self.lanes:
                lane.interrupt()
            self._join(15.0)  # each records its lane's partial verdict
            raise
        finally:
            for lane in self.lanes:  # a lane that did not answer in time is killed
                if lane.alive:
                    lane.kill()
            self._join(5.0)
            with self.cond:
                self.closed = True

    def _join(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _next(self, lane: str) -> tuple[int, str] | None:
        """The next pass for `lane`, waiting while one may still come; None when none will."""
        here = lane == "here"
        with self.cond:
            while True:
                if self.stopping:
                    return None
                quick = [i for i in self.quick_queue if here or i not in self.here_only]
                if quick:
                    self.quick_queue.remove(quick[0])
                    self.running[lane] = (quick[0], "quick")
                    return quick[0], "quick"
                pending = [i for i, p in enumerate(self.result.properties)
                           if p.verdict == "not_run" and i not in self.started
                           and (not self.quick or i in self.quick_ran)
                           and (here or i not in self.here_only)]
                if here and not self.twin_started and not self.quick_queue and (
                        self.quick or self.lanes) and any(
                        self.props[i] in self.session.twinned for i in self._unstarted()):
                    self.twin_started = True  # it loads while the passes that need none run
                    self.session.start_twin()
                if pending:
                    i = min(pending, key=lambda j: self._preference(lane, j))
                    self.started.add(i)
                    self.running[lane] = (i, "full")
                    return i, "full"
                if not self._may_come(lane):
                    return None
                self.cond.wait(0.1)

    def _unstarted(self) -> list[int]:
        return [i for i, p in enumerate(self.result.properties)
                if p.verdict == "not_run" and i not in self.started]

    def _may_come(self, lane: str) -> bool:
        """Whether a pass for `lane` may still become pending: a quick pass still queued (here)
        or under way in another lane, or (here) a lane still running, whose pass comes back if
        it is lost."""
        if lane == "here" and self.quick_queue:
            return True
        others = [job for name, job in self.running.items() if name != lane]
        if any(stream == "quick" for _, stream in others):
            return True
        return lane == "here" and bool(others)

    def _preference(self, lane: str, i: int) -> tuple[bool, float, bool, int]:
        """Here, the passes that need the twin once it is loaded (else the others first, while
        it loads); then the longest first, by its quick pass's time (a long pass started last
        leaves the other lanes idle while it ends); then those whose quick pass ran in this
        lane; then the order of the run. In one runner: those that need no twin first, while
        it loads, and otherwise the order of the run."""
        if not self.lanes:
            return self.twin_started and self.props[i] in self.session.twinned, 0.0, False, i
        twin_first = False
        if lane == "here":
            twin_first = (i in self.here_only) != (self.session.workers.twin is not None)
        quick = self.quick_passed.get(i)
        longest_first = -quick.seconds if quick is not None else 0.0
        return twin_first, longest_first, self.quick_ran.get(i) != lane, i

    def _stop(self) -> None:
        """No pass starts from now on; the passes under way end at their next example."""
        self.stopping = True
        self.session.halted = True
        for other in self.lanes:
            if other.name in self.running:
                other.halt()

    def _done(self, lane: str, i: int, stream: str, found: PropertyResult) -> None:
        with self.cond:
            self.running.pop(lane, None)
            if self.closed:
                return
            prop = self.props[i]
            if stream == "quick":
                self.quick_ran[i] = lane
                if found.verdict == "pass":
                    self.quick_passed[i] = found
                if not found.ok:  # final: the full pass would only find it again
                    self.result.properties[i] = found
                    if found.verdict != "not_run":
                        self.show(prop, found.examples, found.examples, found)
            else:
                self.result.properties[i] = found
            self.save()
            if self.exitfirst and self.result.failures and not self.stopping:
                self._stop()
            self.cond.notify_all()

    def _lost(self, lane: Lane, why: str) -> None:
        """A lane that is gone gives its pass back, to be run by another."""
        with self.cond:
            self.alive.discard(lane.name)
            job = self.running.pop(lane.name, None)
            if not self.stopping and not self.closed:
                note = f"lane {lane.name} was lost ({why})"
                if job is not None:
                    i, stream = job
                    if stream == "quick":
                        self.quick_queue.insert(0, i)
                    else:
                        self.started.discard(i)
                    note += f"; its {self.props[i]} pass was run again"
                self.session.lane_notes.append(note)
            self.cond.notify_all()

    def _remote(self, lane: Lane) -> None:
        try:
            self._serve(lane)
        except LaneLost as lost:
            self._lost(lane, str(lost))
        except BaseException as error:  # noqa: BLE001 - attnspec's own, here: the lane goes
            self._lost(lane, f"attnspec failed waiting on it: {type(error).__name__}: {error}")
        finally:
            with self.cond:
                self.alive.discard(lane.name)
                self.running.pop(lane.name, None)
                self.cond.notify_all()
            lane.close()

    def _stopping_soon(self) -> bool:
        """Whether this run is stopping (Ctrl-C, a stop signal): a terminal's Ctrl-C reaches
        this process about when it reached the lane, so give it 2 s to arrive."""
        with self.cond:
            deadline = time.monotonic() + 2.0
            while not self.stopping and time.monotonic() < deadline:
                self.cond.wait(0.05)
            return self.stopping

    def _serve(self, lane: Lane) -> None:
        hello = lane.receive()
        if "interrupted" in hello:  # while it loaded
            if self._stopping_soon():
                return
            raise LaneLost("it was interrupted by a signal this run did not send")
        if isinstance(hello.get("error"), str):
            raise LaneLost(f"its load of the subject failed: {hello['error']:.500}")
        loaded = hello.get("loaded")
        mine = {"kernel": self.session.kernel, "ids": list(self.session.ids),
                "devices": list(self.session.devices), "dtypes": dict(self.session.dtypes)}
        if loaded != mine:
            raise LaneLost(f"its subject did not load as this one did ({loaded!r:.300})")
        while (job := self._next(lane.name)) is not None:
            i, stream = job
            lane.start(self.props[i], stream, self.quick)
            while True:
                message = lane.receive()
                if "progress" in message:
                    try:
                        prop, done, total, found = message["progress"]
                        partial = None if found is None else result_from(found, lane.name)
                        if prop != self.props[i] or not isinstance(done, int) \
                                or not isinstance(total, int):
                            raise ValueError
                    except (TypeError, ValueError):
                        raise LaneLost("it sent progress that is not progress") from None
                    self.show(prop, done, total, partial)
                    continue
                if isinstance(message.get("crashed"), str):
                    raise LaneLost(f"attnspec failed there: {message['crashed']:.500}")
                if "interrupted" in message:  # Ctrl-C: its pass's partial verdict
                    if not self._stopping_soon():  # not this run's: another process's signal
                        raise LaneLost("it was interrupted by a signal this run did not send")
                    found = None if message["interrupted"] is None else result_from(
                        message["interrupted"], lane.name)
                    with self.cond:
                        self.running.pop(lane.name, None)
                        if found is not None and found.id == self.props[i] and not self.closed:
                            self.result.properties[i] = found
                        self.cond.notify_all()
                    return
                found = result_from(message.get("result"), lane.name)
                if found.id != self.props[i]:
                    raise LaneLost(f"it answered {found.id!r} for {self.props[i]!r}")
                with self.cond:
                    halted_by_us = self.stopping
                if found.verdict == "not_run" and not halted_by_us:  # only halt() gives it
                    raise LaneLost("its pass was halted by a signal this run did not send")
                declined = message.get("declined", 0)
                self.session.declined[found.id] = declined if isinstance(
                    declined, int) else 0
                self._done(lane.name, i, stream, found)
                break
