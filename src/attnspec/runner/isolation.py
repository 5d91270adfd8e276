"""Keeping a subject's processes away from the runner, as far as Linux allows one user.

A subject runs as the runner's user, so file permissions do not separate them. What does:

- the runner is a *child subreaper* (prctl PR_SET_CHILD_SUBREAPER): a process the subject
  detaches from its group (`setsid`, a double fork) is re-parented to the runner instead of
  init, and `sweep` kills every such process before the final report is written;
- the command-line runner is *not dumpable* (PR_SET_DUMPABLE 0): another process of the same
  user, unless it is root, can then neither ptrace it nor open its /proc/PID/mem, fd/ or
  environ, so a subject cannot write into the runner's memory or its stdout pipe;
- `worker_user`: a root runner can run the worker (and the ranks) as another user, which also
  keeps the subject away from the runner's files and signals.

Everything here is best effort off Linux: the functions report what took effect.
docs/design.md section 6 says what holds for a non-root subject, for root, and what never does.
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import sys
import time
from collections.abc import Iterable

__all__ = ["become_subreaper", "children", "harden_runner", "is_dumpable",
           "is_subreaper", "make_undumpable", "restore_runner",
           "stop_subreaper", "sweep"]

_PR_GET_DUMPABLE, _PR_SET_DUMPABLE = 3, 4
_PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 36, 37


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """This process's C library (find_library would run ldconfig, a fork, at every call)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _prctl(option: int, arg: int = 0) -> int | None:
    """prctl(option, arg), or None where there is no prctl (not Linux) or it failed."""
    libc = _libc()
    if libc is None:
        return None
    if option in (_PR_GET_CHILD_SUBREAPER,):
        value = ctypes.c_int(0)
        done = libc.prctl(option, ctypes.byref(value), 0, 0, 0)
        return None if done != 0 else value.value
    done = libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0)
    return None if done < 0 else int(done)


def become_subreaper() -> bool:
    """Adopt this process's orphaned descendants (Linux >= 3.4); True if it took effect."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1) == 0


def is_subreaper() -> bool:
    return _prctl(_PR_GET_CHILD_SUBREAPER) == 1


def stop_subreaper() -> None:
    """Adopt no more orphans: a caller's process (the API, the plugin) would otherwise keep, as
    zombies, the orphans of processes it starts after the run (it never waits for them)."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 0)


def make_undumpable() -> bool:
    """Close /proc/PID/{mem,fd,environ} and ptrace to same-user processes that are not root."""
    return _prctl(_PR_SET_DUMPABLE, 0) == 0


def harden_runner() -> tuple[bool, bool | None]:
    """Make this process undumpable and a subreaper; what it was before, for `restore_runner`."""
    before = (is_subreaper(), is_dumpable())
    make_undumpable()
    become_subreaper()
    return before


def restore_runner(before: tuple[bool, bool | None]) -> None:
    """Undo `harden_runner` once the run is over (its subject's processes are dead by then):
    `attnspec.cli.main` may be called inside a longer-lived process, a test run's say."""
    subreaper, dumpable = before
    if not subreaper:
        stop_subreaper()
    if dumpable:
        _prctl(_PR_SET_DUMPABLE, 1)


def is_dumpable() -> bool | None:
    found = _prctl(_PR_GET_DUMPABLE)
    return None if found is None else bool(found)


def _stat(pid: int) -> tuple[int, int, str] | None:
    """(parent pid, session id, state) of a process, from /proc/PID/stat; None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces or ')': split after the last one.
    fields = raw[raw.rfind(")") + 2:].split()
    try:
        return int(fields[1]), int(fields[3]), fields[0]
    except (IndexError, ValueError):
        return None


def children(pid: int | None = None) -> dict[int, tuple[int, str]]:
    """The live children of `pid` (this process by default): {child: (session id, state)}."""
    parent = os.getpid() if pid is None else pid
    found: dict[int, tuple[int, str]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if name.isdigit():
            stat = _stat(int(name))
            if stat is not None and stat[0] == parent:
                found[int(name)] = (stat[1], stat[2])
    return found


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # reaped elsewhere (a Popen of ours), or not ours to reap


def sweep(keep: Iterable[int] = (), *, own_session: bool = False, seconds: float = 5.0) -> int:
    """Kill every child of this process that is not in `keep`, again and again as killing them
    re-parents their own children here, for at most `seconds`; return how many were killed.

    Unless `own_session`, children in this process's own session are left alone: they are the
    caller's (a user's script that calls `attnspec.verify` may have children of its own), while
    a subject's processes run in sessions of their own (the worker's, or one made by setsid).
    """
    kept, session = set(keep), os.getsid(0)
    killed: set[int] = set()
    deadline = time.monotonic() + seconds
    while True:
        found = children()
        targets = [pid for pid, (sid, _state) in found.items()
                   if pid not in kept and (own_session or sid != session)]
        live = [pid for pid in targets if found[pid][1] != "Z"]
        for pid in live:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in targets:
            _reap(pid)
        if not live or time.monotonic() >= deadline:
            # One last look for zombies the kills just made (their parent is us now).
            for pid in children():
                if pid in killed:
                    _reap(pid)
            return len(killed)
        time.sleep(0.01)


