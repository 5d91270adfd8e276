"""Ranks: the worker processes one sharded example runs on, supervised as one gang.

A gang is W workers (the same `_worker.main` as the main worker, each in its own process group)
that also join a torch.distributed process group: gloo on 127.0.0.1 for CPU, NCCL for CUDA.
The runner hosts the rendezvous store on a socket bound to 127.0.0.1 only, under a fresh random
prefix per start, so nothing off this machine can join and no stale key is read.

A rank that dies, hangs or raises ends the example as a verdict naming the rank. The others
then fail too, in gloo ("Connection closed by peer", "Timed out waiting"): those are
consequences, never the verdict. After anything but a clean answer the whole gang is killed and
restarted for the next example, since a process group's state after a failure is unknown.
"""

from __future__ import annotations

import atexit
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import time
import weakref
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from .._errors import TargetError
from ..common.options import MAX_HEAD_DIM, MAX_HEADS, MAX_WIDTH
from ..common.protocol import answer_limit, consequence
from ..common.users import WorkerUser
from .spawn import Process, spawn
from .wire import Channel, WireError, decode, pack
from .worker import _FRAME_GRACE, Budget, SubjectCrash, _check_seq, _ready_limit, _signal_name

__all__ = ["Gang", "RankCrash", "consequence"]

# After one rank dies, the others get this long to answer (with their gloo errors) before the
# gang is killed; their answers only help name the first cause.
_GRACE = 2.0



_CLEAN = ("ok", "ready", "unsupported")  # answers after which the group is still usable


# ---- the rank's side ----------------------------------------------------------------------


# ---- the runner's side --------------------------------------------------------------------


class RankCrash(SubjectCrash):
    """A rank died or hung: `kind` is `crash` or `timeout`, `rank` the one to blame."""

    def __init__(self, kind: str, message: str, rank: int | None, *, ran: bool = True) -> None:
        super().__init__(kind, message, ran=ran)
        self.rank = rank


_LIVE: weakref.WeakSet[Gang] = weakref.WeakSet()


@atexit.register
def _kill_live_gangs() -> None:
    for gang in list(_LIVE):
        gang.close()


class Gang:
    """The runner's handle on W ranks running TARGET, joined in one process group."""

    def __init__(self, target: str, world: int, *, device: str = "cpu", timeout: float = 30.0,
                 start_timeout: float = 300.0,
                 sizes: tuple[int, int, int] = (MAX_HEADS, MAX_HEAD_DIM, MAX_WIDTH),
                 user: WorkerUser | None = None) -> None:
        self.target, self.world, self.device, self.user = target, world, device, user
        self.timeout, self.start_timeout, self.sizes = timeout, start_timeout, sizes
        self._ranks: list[tuple[Process, Channel]] = []
        self._limits: list[int] = []  # the bytes each rank's outstanding answer may take
        self._seq = 0  # the outstanding requests' number, which their answers echo
        self._port = 0
        self._store: Any = None
        self._token = secrets.token_hex(8)
        self.starts = 0
        self._restart_error: str | None = None
        self._outstanding = False
        self.probe_futile = False  # shard_heads' refusal cannot be asked here (build fails)
        _LIVE.add(self)

    @property
    def pids(self) -> list[int]:
        return [process.pid for process, _ in self._ranks]

    def _host_store(self) -> int:
        """The rendezvous store, listening on 127.0.0.1 only (a TCPStore given the address
        alone listens on every interface); its port."""
        if self._store is None:
            import torch.distributed as td

            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", 0))
            listener.listen(128)
            self._port = int(listener.getsockname()[1])
            self._store = td.TCPStore(  # type: ignore[attr-defined]
                "127.0.0.1", self._port, is_master=True, wait_for_workers=False,
                master_listen_fd=listener.fileno(), timeout=timedelta(seconds=self.start_timeout))
            listener.detach()  # the store owns the socket now, and closes it
        return self._port

    def start(self) -> None:
        """Start W ranks and wait until every one has loaded TARGET and joined the group."""
        self._kill()
        port = self._host_store()
        self.starts += 1
        threads = max(1, (os.cpu_count() or 1) // self.world)
        self._ranks = [(process, Channel(sock)) for process, sock in
                       (spawn(self.user) for _ in range(self.world))]
        self._limits = [_ready_limit(self.sizes)] * self.world
        try:
            budget = Budget(self.pids, self.start_timeout, stretch=1.0)
            for rank, (_, conn) in enumerate(self._ranks):
                conn.send(pack({
                    "target": self.target, "sys_path": list(sys.path),
                    "max_heads": self.sizes[0], "max_head_dim": self.sizes[1],
                    "max_width": self.sizes[2],
                    "dist": {"rank": rank, "world": self.world, "port": port,
                             "prefix": f"attnspec-{self._token}/{self.starts}",
                             "timeout": self.timeout, "threads": threads,
                             "device": self.device}}), budget.left)  # unsent: silent
            answers = self._gather(self.start_timeout, starting=True)
        except BaseException:  # Ctrl-C while ranks join: leave none behind
            self._kill()
            raise
        failed = [(r, str(a.get("message", a))) for r, a in enumerate(answers)
                  if a.get("kind") != "ready"]
        if failed:  # blame a rank's own error, not a peer's "stopped" or gloo's word for it
            self._kill()
            rank, message = next(((r, m) for r, m in failed if not consequence(m)), failed[0])
            raise TargetError(f"rank {rank} of {self.world}: {message}")

    def _gather(self, timeout: float, *, starting: bool = False) -> list[dict[str, Any]]:
        """One answer from every rank, within `timeout` s of the ranks' own time.

        Once a rank dies or answers with anything but `ok`, the others get `_GRACE` s more (a
        peer blocked on it answers with gloo's error when its group times out), then the gang
        is killed. A rank that died raises `RankCrash("crash")`, and so does one whose bytes
        are not an answer within its bound (a frame over it, cut short, or garbage); ranks
        still silent, when no rank gave an error of its own, raise `RankCrash("timeout")`
        naming them (while starting: `TargetError`). Otherwise the silent ranks' answers read
        `stopped`."""
        pending: dict[Channel, int] = {conn: rank for rank, (_, conn) in enumerate(self._ranks)}
        for conn, rank in pending.items():
            conn.expect(self._limits[rank])
        answers: dict[int, dict[str, Any]] = {}
        # A rank may reach a collective only late in its --timeout, and then waits its group's
        # timeout (--timeout too) for a hung peer before it answers with gloo's error.
        budget = Budget(self.pids, 2 * timeout + _GRACE, stretch=10 * timeout / (
            2 * timeout + _GRACE))
        dead: list[tuple[int, int | None]] = []
        garbled: list[tuple[int, str]] = []
        ended_by: float | None = None  # set at the first death, garble or failed answer
        grace_end: float | None = None  # for frames begun when the budget ran out
        while pending:
            now = time.monotonic()
            if ended_by is not None and now >= ended_by:
                break
            budget.pids = [self._ranks[r][0].pid for r in pending.values()]
            limit = ended_by - now if ended_by is not None else budget.left()
            if limit <= 0:  # spent: only frames already arriving may still end
                if not any(conn.started for conn in pending):
                    break
                grace_end = grace_end or now + _FRAME_GRACE
                limit = grace_end - now
                if limit <= 0:
                    break
            readable, _, _ = select.select(list(pending), [], [], max(0.0, min(limit, 1.0)))
            for conn in readable:
                rank = pending[conn]
                try:
                    frame = conn.pump()
                    if frame is None:
                        continue
                    answer = decode(frame)
                    if not isinstance(answer, dict):
                        raise WireError(f"a message holding {type(answer).__name__}, not an "
                                        "object")
                    if not starting:
                        _check_seq(answer, self._seq)
                    answers[rank] = answer
                except (EOFError, OSError):
                    dead.append((rank, self._exit_code(rank)))
                except WireError as error:
                    garbled.append((rank, str(error)))
                del pending[conn]
                if (rank not in answers or answers[rank].get("kind") not in _CLEAN) \
                        and ended_by is None:
                    ended_by = time.monotonic() + _GRACE
        for conn, rank in list(pending.items()):  # begun but never ended: cut short
            if conn.started:
                del pending[conn]
                garbled.append((rank, f"its answer stopped after {conn.got} of "
                                f"{conn.expected} bytes" if conn.expected is not None
                                else "its answer stopped inside its length"))
        if dead or garbled or pending:
            self._kill()
        silent = sorted(pending.values())
        if dead:
            rank, code = dead[0]
            what = f"rank {rank} of {self.world} killed its process ({_signal_name(code)})"
            if starting:
                raise TargetError(f"TARGET {self.target!r}: {what} while loading and joining "
                                  "the process group.")
            raise RankCrash("crash", what + "; the ranks were restarted.", rank)
        if garbled:
            rank, why = garbled[0]
            what = (f"rank {rank} of {self.world} sent something that is not an answer ({why};"
                    " did the subject write to attnspec's socket?)")
            if starting:
                raise TargetError(f"TARGET {self.target!r}: {what} while loading and joining "
                                  "the process group.")
            raise RankCrash("crash", what + "; the ranks were killed and restarted.", rank)
        own = [r for r, a in answers.items() if a.get("kind") not in _CLEAN
               and not consequence(str(a.get("message", "")))]
        if silent and not own:
            ranks = f"rank{'s' * (len(silent) > 1)} {', '.join(map(str, silent))}"
            if starting:
                raise TargetError(f"TARGET {self.target!r}: {ranks} of {self.world} did not "
                                  f"load and join the process group within {timeout:g} s.")
            raise RankCrash("timeout", f"{ranks} of {self.world} gave no answer within "
                            f"timeout={self.timeout:g} s; the ranks were killed and "
                            "restarted.", silent[0])
        for rank in silent:
            answers[rank] = {"kind": "stopped", "message": "stopped after another rank failed"}
        return [answers[rank] for rank in range(self.world)]

    def _exit_code(self, rank: int) -> int | None:
        try:
            return self._ranks[rank][0].wait(5)
        except subprocess.TimeoutExpired:
            return None

    def submit(self, requests: Sequence[dict[str, Any]]) -> None:
        """Send rank r `requests[r]`; `collect` gives the answers."""
        if len(requests) != self.world:
            raise ValueError(f"{len(requests)} requests for {self.world} ranks")
        if self._outstanding:  # answers nobody collected (Ctrl-C in between): start afresh
            self._kill()
        if not self._ranks or any(p.poll() is not None for p, _ in self._ranks):
            if self._restart_error is not None:
                raise RankCrash("crash", self._restart_error, None, ran=False)
            try:
                self.start()
            except TargetError as error:
                self._restart_error = f"the ranks could not be (re)started: {error}"
                raise RankCrash("crash", self._restart_error, None, ran=False) from None
        self._outstanding = True
        self._limits = [answer_limit(request, 0) for request in requests]
        self._seq += 1
        budget = Budget(self.pids, self.timeout)
        for (_, conn), request in zip(self._ranks, requests, strict=True):
            try:
                # A rank that does not take its request in time stays silent: a timeout.
                conn.send(pack({**request, "seq": self._seq}), budget.left)
            except OSError:
                pass  # it died since the last answer: collect() says how

    def collect(self) -> list[dict[str, Any]]:
        """Every rank's answer; after any but a clean `ok` from all, the gang is restarted
        before its next request (the group's state is unknown)."""
        answers = self._gather(self.timeout)
        self._outstanding = False  # only now: an interrupted gather leaves answers in flight
        # Declined by supports(spec) on every rank: nothing ran, the group is as it was.
        if any(a.get("kind") not in ("ok", "unsupported") for a in answers):
            self._kill()
        return answers

    def restart_later(self) -> None:
        """Start fresh ranks for the next request (this group's state is not to be trusted)."""
        self._kill()

    def run(self, requests: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        self.submit(requests)
        return self.collect()

    def _kill(self) -> None:
        ranks, self._ranks = self._ranks, []
        self._outstanding = False
        for process, _ in ranks:
            try:  # the group: the rank and whatever the subject spawned
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for process, conn in ranks:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                pass
            conn.close()

    def close(self) -> None:
        for process, conn in self._ranks:
            if process.poll() is None:
                try:
                    conn.send(pack({"stop": True}), Budget([], 1.0, stretch=1.0).left)
                except OSError:
                    pass
        deadline = time.monotonic() + 5
        for process, _ in self._ranks:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        self._kill()
        self._store = None
        _LIVE.discard(self)
