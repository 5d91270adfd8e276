"""Starting a worker process: exec'd, or forked from this runner's zygote.

`attnspec verify` either starts its first worker before it imports torch (the worker imports
torch while the runner does), or, on Linux, forks a *zygote* once torch is imported and before
the run holds anything: a copy of the runner that does nothing but fork workers on request. A
forked worker starts with torch imported (about 1.1 s of CPU saved per worker, twin, rank and
restart). Each fork is a double one, so the worker is re-parented to the runner (a subreaper):
the runner waits for it and reads its exit status as it would a Popen's. The runner's `Worker`
adopts either kind.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..common.users import WorkerUser

__all__ = ["Forked", "Process", "fork_unsafe_reason", "forget_zygote", "prestart", "spawn",
           "start_zygote", "stop_zygote", "take", "worker_env", "zygote_pid"]

BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); from attnspec.runner.worker import main; "
        "main(int(sys.argv[2]), int(sys.argv[3]))")


class Process(Protocol):
    """What the runner uses of a worker's process: a Popen, or a `Forked`."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


Spawned = tuple[Process, socket.socket]

_waiting: list[Spawned] = []  # started ahead, not yet adopted by a Worker
_ZYGOTE_ANSWER = 10.0  # seconds a fork may take before the zygote is given up (exec then)


def _open_fd(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def worker_env(environ: dict[str, str]) -> dict[str, str]:
    """The worker's environment: the runner's, with OpenMP's idle threads asleep unless the user
    said otherwise. Spinning (libgomp's default), a waiting worker's idle thread takes the core
    the runner draws on: 45% more CPU for a default verify on 2 cores, same results."""
    env = {**environ, "OMP_WAIT_POLICY": environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    if "TRITON_INTERPRET" not in environ and not gpu_present():
        # Read as triton is imported: with no GPU, a Triton kernel runs in its interpreter.
        env["TRITON_INTERPRET"] = "1"
    return env


# The device files a GPU driver makes: NVIDIA's, AMD's (ROCm) and WSL's.
_GPU_DEVICES = ("/dev/nvidiactl", "/dev/kfd", "/dev/dxg")


def gpu_present() -> bool:
    """Whether this machine shows a GPU to processes (its driver's device file), known before
    torch or triton is imported (the worker's environment is set first)."""
    return any(os.path.exists(path) for path in _GPU_DEVICES)


def spawn(user: WorkerUser | None = None) -> Spawned:
    """A new worker process in its own process group, and the runner's end of its socket; run
    as `user` where given (a root runner), with a HOME of that user's own. Forked by this
    process's zygote where it has one, else exec'd."""
    forked = _zygote.fork(user) if _zygote is not None and _zygote.owner == os.getpid() else None
    return forked or _exec(user)


def _exec(user: WorkerUser | None) -> Spawned:
    ours, theirs = socket.socketpair()
    env = worker_env(dict(os.environ))
    account: dict[str, Any] = {}
    if user is not None:
        env["HOME"], env["USER"], env["LOGNAME"] = user.home, user.name, user.name
        account = {"user": user.uid, "group": user.gid, "extra_groups": []}
    # The subject's prints go to stderr: stdout is the verdict table's.
    err: Any = None if _open_fd(2) else subprocess.DEVNULL
    out: Any = 2 if err is None else subprocess.DEVNULL
    try:
        process = subprocess.Popen(
            [sys.executable, "-c", BOOT, _package_parent(), str(theirs.fileno()),
             str(os.getpid())],
            stdin=subprocess.DEVNULL, stdout=out, stderr=err, pass_fds=(theirs.fileno(),),
            env=env, start_new_session=True, **account)  # its own process group, killed as one
    finally:
        theirs.close()
    return process, ours


def _package_parent() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def prestart() -> None:
    """Start one worker now, for the next `Worker` this process creates to adopt."""
    if not _waiting:
        _waiting.append(spawn())


def take() -> Spawned | None:
    """The worker started ahead, if one is waiting and still alive."""
    while _waiting:
        process, conn = _waiting.pop()
        if process.poll() is None:
            return process, conn
        conn.close()
    return None


# ---- the zygote --------------------------------------------------------------------------------


def fork_unsafe_reason() -> str | None:
    """Why this process may not fork a runner's copy now (a lane, a zygote); None: it may."""
    if not sys.platform.startswith("linux"):
        return f"forked runners are built for Linux only (this is {sys.platform})"
    if threading.active_count() > 1:
        return (f"this process runs {threading.active_count()} threads, and a fork copies "
                "only the one that forks (a lock another holds would never be released)")
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "CUDA is initialised in this process, and a forked child cannot use it"
    return None


class Forked:
    """A worker forked by the zygote and re-parented to this process: Popen's pid, poll and
    wait (an exit status, or -N for signal N)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                done, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: as Popen, an unknown end reads 0
                self.returncode = 0
            else:
                if done:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.001
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0.0)
            time.sleep(pause)
            pause = min(0.05, pause * 2)
        assert self.returncode is not None
        return self.returncode


Entry = Callable[[int, int], None]
"""A worker's main: (its socket's fd, the runner's pid); `runner.worker.main`."""


class _Zygote:
    """The runner's end of its zygote: `fork` asks it for a worker, which runs `entry`."""

    def __init__(self, entry: Entry) -> None:
        self.owner = os.getpid()
        self.entry = entry
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        for stream in (sys.stdout, sys.stderr):  # else the zygote's copy flushes them again
            with contextlib.suppress(Exception):
                stream.flush()
        gc.collect()  # the copy's garbage is frozen below, so none of it closes an fd later
        pid = os.fork()
        if pid == 0:  # the zygote never returns from here
            try:
                ours.close()
                _zygote_main(theirs, self.owner, entry)
            finally:
                os._exit(0)
        theirs.close()
        self.pid = pid
        self._conn: socket.socket | None = ours
        self._lock = threading.Lock()  # the twin starts from a thread of its own

    def fork(self, user: WorkerUser | None) -> Spawned | None:
        """A forked worker, or None where the zygote cannot give one (it is then closed, and
        workers are exec'd from here on)."""
        from .isolation import is_subreaper

        with self._lock:
            if self._conn is None or not is_subreaper():  # a worker re-parented elsewhere
                return None  # would never be ours to wait for
            ours, theirs = socket.socketpair()
            # the runner's directory now, not the zygote's at its fork: relative TARGETs
            request = {"user": None if user is None else
                       [user.uid, user.gid, user.home, user.name], "cwd": os.getcwd()}
            try:
                socket.send_fds(self._conn, [json.dumps(request).encode()], [theirs.fileno()])
                self._conn.settimeout(_ZYGOTE_ANSWER)
                answer = json.loads(self._conn.recv(256))
                pid = int(answer["pid"])
            except (OSError, ValueError, KeyError, TypeError):
                ours.close()
                self.close()
                return None
            finally:
                theirs.close()
            return Forked(pid), ours

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        conn.close()  # the zygote reads the end of its socket and exits
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)

    def forget(self) -> None:
        """In a fork of the owner (a lane): the socket is the owner's, not this process's."""
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(OSError):
                os.close(conn.detach())


_zygote: _Zygote | None = None


def start_zygote(entry: Entry) -> bool:
    """Fork this process's zygote now (call it once torch is imported and before the run holds
    anything: each worker is a copy of this moment, running `entry`); False where it may not
    (not Linux, other threads running, CUDA initialised, not a subreaper): workers are then
    exec'd."""
    global _zygote
    from .isolation import is_subreaper

    if _zygote is not None and _zygote.owner == os.getpid():
        return True
    if fork_unsafe_reason() is not None or not is_subreaper():
        return False
    _zygote = _Zygote(entry)
    return True


def zygote_pid() -> int | None:
    """This process's zygote, if it has one."""
    return _zygote.pid if _zygote is not None and _zygote.owner == os.getpid() and (
        _zygote._conn is not None) else None


def stop_zygote() -> None:
    global _zygote
    if _zygote is not None and _zygote.owner == os.getpid():
        _zygote.close()
    _zygote = None


def forget_zygote() -> Entry | None:
    """In a fork of this process (a lane): the zygote and the worker started ahead are the
    parent's; this process starts its own, with the entry returned (None: it had none)."""
    global _zygote
    entry = None
    if _zygote is not None and _zygote.owner != os.getpid():
        entry = _zygote.entry
        _zygote.forget()
        _zygote = None
    for _, conn in _waiting:
        conn.close()
    _waiting.clear()
    return entry


def _zygote_main(conn: socket.socket, owner: int, entry: Entry) -> None:
    """The zygote: fork a worker for each request, until the owner closes its end."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: it goes with its runner
        libc.prctl(15, b"attnspec-zygote")  # PR_SET_NAME: what ps and top show
    if os.getppid() != owner:
        return
    gc.freeze()  # what the runner had is never collected here: no object of it closes an fd
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the runner's to answer
    for name in ("SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGCHLD"):
        signal.signal(getattr(signal, name), signal.SIG_DFL)
    with contextlib.suppress(ValueError, OSError):
        signal.set_wakeup_fd(-1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)  # the verdict table's stdout is the runner's alone
    os.close(null)
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(conn, 4096, 1)
        except OSError:
            return
        if not message or len(fds) != 1:
            return
        try:
            request = json.loads(message)
            pid = _fork_worker(fds[0], request.get("user"), owner, entry, request.get("cwd"))
        except BaseException as error:  # noqa: BLE001 - the owner reads it and execs instead
            with contextlib.suppress(OSError):
                conn.send(json.dumps({"error": repr(error)[:200]}).encode())
            return
        finally:
            os.close(fds[0])
        try:
            conn.send(json.dumps({"pid": pid}).encode())
        except OSError:
            return


def _fork_worker(fd: int, user: list[Any] | None, owner: int, entry: Entry,
                 cwd: str | None = None) -> int:
    """Fork twice: the worker's parent exits at once, so the worker is re-parented to the
    owner (a subreaper), which waits for it; its pid."""
    read, write = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:
            os.close(read)
            pid = os.fork()
            if pid == 0:
                os.close(write)
                _become_worker(fd, user, owner, entry, cwd)
            os.write(write, str(pid).encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(middle, 0)
    with os.fdopen(read, "rb") as pipe:
        return int(pipe.read(32))


def _become_worker(fd: int, user: list[Any] | None, owner: int, entry: Entry,
                   cwd: str | None = None) -> None:
    """In the forked worker: what `_exec`'s Popen does (a session of its own, the user, the
    environment, stdin and stdout), then the worker's main; never returns."""
    code = 1
    try:
        os.setsid()  # its own process group, killed as one
        if isinstance(cwd, str):
            with contextlib.suppress(OSError):
                os.chdir(cwd)  # where an exec'd worker would start
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(15, b"attnspec-worker")  # not "zygote"
        os.environ.update(worker_env(dict(os.environ)))
        if user is not None:
            uid, gid, home, name = user
            os.environ.update({"HOME": home, "USER": name, "LOGNAME": name})
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
        if not _open_fd(2):
            null = os.open(os.devnull, os.O_RDWR)
            os.dup2(null, 2)
            os.close(null)
        os.dup2(2, 1)  # the subject's prints go to stderr
        os.closerange(3, fd)  # nothing of the runner's: only the worker's socket
        os.closerange(fd + 1, _max_fd())
        for name in ("SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGCHLD"):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
        sys.argv = ["-c", _package_parent(), str(fd), str(owner)]
        entry(fd, owner)
        code = 0
    finally:
        os._exit(code)


def _max_fd() -> int:
    try:
        return int(os.sysconf("SC_OPEN_MAX"))
    except (OSError, ValueError):
        return 1 << 16


@atexit.register
def _kill_waiting() -> None:
    """A worker started ahead and never adopted (the run stopped early) goes with the runner."""
    while _waiting:
        process, conn = _waiting.pop()
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        process.wait()
        conn.close()
    stop_zygote()
