"""Many targets in one command: `attnspec verify T1 T2 DIR ...`, `verify_many()`.

Each target is judged by a *judge*: a runner process of its own (forked from this driver,
torch and attnspec already imported, or exec'd where this process may not fork), which runs
one ordinary verify with its own zygote and worker and writes its JSON report to a scratch
file. No state passes from one candidate to the next: a judge is forked before anything of a
run exists, and the subject never runs in it, only in the judge's worker. The driver reads
back JSON only, and appends one line per target to the JSONL report, flushed as each one
ends, so a run killed at any moment loses only the targets in flight. A judge that dies
without a verdict (its subject killed it, or the kernel's OOM killer did) is run once more;
one that dies twice is reported as such, with what it finished.
"""

from __future__ import annotations

import ast
import contextlib
import ctypes
import dataclasses
import hashlib
import json
import os
import signal
import sys
import tempfile
import time
from collections import deque
from collections.abc import Generator, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from .._errors import UsageError

__all__ = ["SCHEMA", "Skipped", "Target", "collect", "judge_request", "judge_locally", "serve"]

SCHEMA = "attnspec-many/1"
# A report's status, as a line of the JSONL says it.
STATUS = {"pass": "conforms", "fail": "fails", "incomplete": "incomplete", "error": "error"}
ATTEMPTS = 2  # a judge that dies without a verdict runs once more, then is reported
_POLL = 0.02  # seconds between looks at the judges under way
# The names whose binding at a file's top level makes it a subject (a module's build, a
# kernel's PROTOCOL; attention alone is a kernel that forgot PROTOCOL: its load says so).
_SUBJECT_NAMES = frozenset({"build", "PROTOCOL", "attention"})


@dataclasses.dataclass(frozen=True)
class Target:
    """One target to judge: its TARGET text, and the key its verdict is kept under (the sha256
    of its file, with :NAME; of the text itself for a dotted or hf: target, whose file the
    driver does not look for: finding it would import its package)."""

    name: str
    sha256: str
    hash_of: str  # "file" or "name"
    path: str | None = None


@dataclasses.dataclass(frozen=True)
class Skipped:
    """A file of a folder that is not a target, and why."""

    path: str
    reason: str


def _subject_reason(path: Path) -> str | None:
    """Why a file found in a folder is not a subject (None: it is one, or may be)."""
    if path.name.startswith("_"):
        return "a private module (its name starts with _)"
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError):
        return None  # a candidate that does not parse is judged: its load says why
    except OSError as error:
        return f"cannot be read ({error.strerror or error})"
    bound: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.ImportFrom | ast.Import):
            for alias in node.names:
                if alias.name == "*":
                    return None  # a star import may bring build: let its load tell
                bound.add(alias.asname or alias.name.split(".")[0])
    if bound & _SUBJECT_NAMES:
        return None
    return "defines no build, PROTOCOL or attention at its top level"


def _key_of(name: str) -> Target:
    from ..runner.subject import HF_PREFIX, is_path, split_target

    spec, attr = split_target(name.strip())
    if not name.strip().startswith(HF_PREFIX) and is_path(spec):
        try:
            data = Path(spec).read_bytes()
        except OSError as error:
            digest = hashlib.sha256(f"unreadable\0{name}".encode()).hexdigest()
            return Target(name, digest, f"name ({error.strerror or error})", spec)
        digest = hashlib.sha256(data + (b"\0" + attr.encode() if attr else b"")).hexdigest()
        return Target(name, digest, "file", os.path.abspath(spec))
    return Target(name, hashlib.sha256(name.encode()).hexdigest(), "name")


def collect(given: Sequence[str]) -> tuple[list[Target], list[Skipped]]:
    """The targets the command line names: each TARGET as given, each folder's *.py files
    that define a subject (under it, in name order; hidden, private and __pycache__ folders
    left out), once each; and the folders' other files, with why."""
    targets: dict[str, Target] = {}
    skipped: list[Skipped] = []
    for name in given:
        if os.path.isdir(name):
            files = sorted(p for p in Path(name).rglob("*.py")
                           if not any(part.startswith((".", "_")) or part == "__pycache__"
                                      for part in p.relative_to(name).parts[:-1]))
            if not files:
                raise UsageError(f"attnspec verify {name}: this folder holds no .py file to "
                                 "judge.")
            for path in files:
                reason = _subject_reason(path)
                if reason is None:
                    targets.setdefault(str(path), _key_of(str(path)))
                else:
                    skipped.append(Skipped(str(path), reason))
        else:
            targets.setdefault(name, _key_of(name))
    return list(targets.values()), skipped


# ---- the JSONL report -------------------------------------------------------------------------


def options_digest(options: Mapping[str, Any]) -> str:
    """What makes two runs' verdicts comparable: the options, as a short digest."""
    text = json.dumps({k: options[k] for k in sorted(options)}, default=str, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Lines:
    """The JSONL report: one line per target, appended whole (one write) and flushed as each
    target ends. `--resume` reads it first: the keys judged under the same options are kept."""

    def __init__(self, path: str | None, options: str, resume: bool,
                 stream: TextIO | None = None) -> None:
        self.path, self.options = path, options
        self.judged: dict[str, dict[str, Any]] = {}  # key -> its line
        self.unreadable = 0
        self._stream = stream
        self._fd: int | None = None
        if path is None:
            return
        if os.path.isdir(path):
            raise UsageError(option="report", value=path, reason="is a folder; give a file "
                             "for the JSONL report (out.jsonl).")
        exists = os.path.exists(path)
        if exists and not resume:
            raise UsageError(option="report", value=path,
                             reason="exists: --resume continues it (targets already judged "
                                    "are skipped); remove it, or give another name, to start "
                                    "over.")
        if exists:
            self._read(path)
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
        except OSError as error:
            raise UsageError(option="report", value=path,
                             reason=f"cannot be opened for writing ({error.strerror})."
                             ) from None

    def _read(self, path: str) -> None:
        with open(path, "rb") as handle:
            data = handle.read()
        end = data.rfind(b"\n") + 1
        if end < len(data):  # a line cut short (a full disk, another writer): not a verdict
            with open(path, "r+b") as handle:
                handle.truncate(end)
            self.unreadable += 1
        others: set[str] = set()
        for raw in data[:end].splitlines():
            try:
                line = json.loads(raw)
                key = line["key"]
            except (ValueError, KeyError, TypeError):
                self.unreadable += 1
                continue
            if line.get("options") != self.options:
                others.add(str(line.get("options")))
                continue
            self.judged[str(key)] = line
        if others:
            raise UsageError(option="report", value=path,
                             reason=f"was written with other options (digest "
                                    f"{', '.join(sorted(others))}, this run's {self.options}); "
                                    "resume it with the options it was started with, or give "
                                    "another --report.")

    def write(self, line: Mapping[str, Any]) -> None:
        text = json.dumps(line, allow_nan=False, separators=(",", ":")) + "\n"
        self.judged[str(line["key"])] = dict(line)
        if self._stream is not None:
            self._stream.write(text)
            self._stream.flush()
        if self._fd is not None:
            data = text.encode()
            written = 0
            while written < len(data):  # a regular file takes it whole; a short write goes on
                written += os.write(self._fd, data[written:])
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


# ---- the judge --------------------------------------------------------------------------------


def judge_request(target: Target, options: Mapping[str, Any], report: str,
                  workers: int | None = 1) -> dict[str, Any]:
    """What a judge needs: the TARGET, verify()'s options (JSON), where to write its report."""
    return {"target": target.name, "options": dict(options), "report": report,
            "workers": workers, "cwd": os.getcwd()}


def prepare_runner() -> None:
    """Before torch is imported here: the environment the workers' OpenMP reads; after: this
    process's zygote, so that the judge's workers are forked with torch imported."""
    from ..runner import spawn
    from ..runner.isolation import become_subreaper, make_undumpable

    if "torch" not in sys.modules:
        os.environ.update(spawn.worker_env(dict(os.environ)))
    make_undumpable()
    spawn.forget_zygote()  # a forked judge's parent's zygote is not its own
    import torch

    from ..runner.worker import main as worker_main

    if become_subreaper():
        spawn.start_zygote(worker_main)
    torch.set_num_threads(1)  # the cores are the judges' to share


def judge(request: Mapping[str, Any]) -> int:
    """Run one verify as the request says, its report written where it says; the exit status
    (0: the report holds the verdict; otherwise a side file `REPORT.error` says why not)."""
    from .._errors import TargetError
    from .api import verify

    report = str(request["report"])
    try:
        with contextlib.suppress(OSError):
            os.chdir(str(request.get("cwd") or "."))
        prepare_runner()
        verify(str(request["target"]), report=report, workers=request.get("workers", 1),
               **dict(request.get("options") or {}))
        return 0
    except TargetError:
        return 0  # the report says why it did not load
    except KeyboardInterrupt:
        _side(report, "interrupted")
        return 130
    except BaseException as error:  # noqa: BLE001 - the driver reports it as this target's
        _side(report, f"{type(error).__name__}: {error}")
        return 1


def _side(report: str, message: str) -> None:
    with contextlib.suppress(OSError), open(report + ".error", "w") as handle:
        handle.write(message[:20_000])


def read_verdict(report: str, code: int | None) -> tuple[dict[str, Any] | None, str | None]:
    """The report a judge left, and why it has none or is unfinished (None: finished)."""
    data: dict[str, Any] | None = None
    with contextlib.suppress(OSError, ValueError):
        with open(report, encoding="utf-8") as handle:
            loaded = json.load(handle)
        data = loaded if isinstance(loaded, dict) else None
    side = None
    with contextlib.suppress(OSError), open(report + ".error", encoding="utf-8") as handle:
        side = handle.read()
    if code == 0 and data is not None and data.get("finished", False):
        return data, None
    if side:
        return data, side
    how = ("killed by " + signal.Signals(-code).name if code is not None and code < 0
           and -code in signal.Signals._value2member_map_ else f"exit status {code}")
    return data, f"the judge ended without a verdict ({how})"


def line_of(target: Target, options: str, data: dict[str, Any] | None, problem: str | None,
            seconds: float, started: float, attempts: int | None,
            where: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One JSONL line: the target, its key, status, properties, replay lines and times
    (`attempts`: the judges started for it; None under Ray, which reruns lost tasks itself)."""
    from .. import __version__

    props = [p for p in (data or {}).get("properties", []) if isinstance(p, dict)]
    status = STATUS.get(str((data or {}).get("status")), "error")
    if problem is not None:
        status = "error"
    conclusion = problem if problem is not None else str((data or {}).get("conclusion", ""))
    if problem is not None and data is not None and props:
        conclusion += "; what it finished: " + ", ".join(
            f"{p.get('id')} {p.get('verdict')}" for p in props if p.get("verdict") != "not_run")
    failures = [{"id": p.get("id"), "verdict": p.get("verdict"),
                 "message": str(p.get("message", ""))[:2000], "replay": p.get("replay")}
                for p in props if p.get("verdict") in ("fail", "error", "crash", "timeout")]
    return {"schema": SCHEMA, "target": target.name, "key": target.sha256,
            "hash_of": target.hash_of, "path": target.path, "options": options,
            "status": status, "conclusion": conclusion,
            "properties": {str(p.get("id")): p.get("verdict") for p in props},
            "failures": failures, "seconds": round(seconds, 3),
            "started": _iso(started), "finished": _iso(started + seconds),
            "attempts": attempts, "attnspec": __version__, **dict(where or {})}


def _iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def exit_of(status: str) -> int:
    """A target's status as `attnspec verify` with it alone would exit."""
    return {"conforms": 0, "fails": 1, "incomplete": 3}.get(status, 1)


# ---- judges on this machine -------------------------------------------------------------------


@dataclasses.dataclass
class _Running:
    target: Target
    pid: int
    report: str
    started: float
    attempt: int


def _fork_judge(request: Mapping[str, Any]) -> int:
    """A judge forked from this process (its own process group: a Ctrl-C is the driver's)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            os.setpgid(0, 0)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            for name in ("SIGTERM", "SIGHUP"):
                signal.signal(getattr(signal, name), signal.SIG_DFL)
            with contextlib.suppress(OSError, AttributeError):
                libc = ctypes.CDLL(None, use_errno=True)
                libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: it goes with its driver
                libc.prctl(15, b"attnspec-judge")  # PR_SET_NAME
            if os.getppid() == parent:
                code = judge(request)
        finally:
            os._exit(code)
    return pid


def _exec_judge(request: Mapping[str, Any]) -> int:
    """A judge exec'd (this process may not fork: it runs threads, or is not Linux)."""
    return os.posix_spawn(sys.executable,
                          [sys.executable, "-m", "attnspec.frontends.many", json.dumps(request)],
                          dict(os.environ), setpgroup=0)


def _poll(pid: int) -> int | None:
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return -signal.SIGKILL
    return os.waitstatus_to_exitcode(status) if done else None


def _kill(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def judge_locally(targets: Sequence[Target], options: Mapping[str, Any], digest: str,
                  jobs: int, workers: int | None) -> Generator[dict[str, Any], None, None]:
    """Judge each target in a process of its own, `jobs` at once; yield each one's line as it
    ends. Closing the iterator (Ctrl-C) kills the judges under way: their targets are lost."""
    from ..runner.spawn import fork_unsafe_reason

    start = _fork_judge if fork_unsafe_reason() is None else _exec_judge
    scratch = tempfile.mkdtemp(prefix="attnspec-many-")
    queue: deque[tuple[Target, int]] = deque((t, 1) for t in targets)
    running: dict[int, _Running] = {}
    count = 0
    try:
        while queue or running:
            while queue and len(running) < jobs:
                target, attempt = queue.popleft()
                count += 1
                report = os.path.join(scratch, f"{count}.json")
                pid = start(judge_request(target, options, report, workers))
                running[pid] = _Running(target, pid, report, time.time(), attempt)
            ended = [(pid, code) for pid in list(running) if (code := _poll(pid)) is not None]
            if not ended:
                time.sleep(_POLL)
                continue
            for pid, code in ended:
                judged = running.pop(pid)
                data, problem = read_verdict(judged.report, code)
                _remove(judged.report)
                if problem is not None and judged.attempt < ATTEMPTS and code != 130:
                    queue.appendleft((judged.target, judged.attempt + 1))  # once more
                    continue
                if problem is not None and judged.attempt >= ATTEMPTS:
                    problem = f"{problem}, on each of {ATTEMPTS} tries"
                yield line_of(judged.target, digest, data, problem,
                              time.time() - judged.started, judged.started, judged.attempt)
    finally:
        for pid in running:
            _kill(pid)
        with contextlib.suppress(OSError):
            for name in os.listdir(scratch):
                os.unlink(os.path.join(scratch, name))
            os.rmdir(scratch)


def _remove(report: str) -> None:
    for path in (report, report + ".error"):
        with contextlib.suppress(OSError):
            os.unlink(path)


# ---- a judge server: judges forked, for a process that may not fork (a Ray worker) ---------


def serve() -> int:
    """`python -m attnspec.frontends.many --serve`: read one request per line on stdin, fork a
    judge for it (torch imported once, here), answer one JSON line on stdout: its exit status,
    its report, and why it has none. Single-threaded, so that forking is safe; the subject
    never runs here, only in each judge's worker."""
    from ..runner import spawn

    with contextlib.suppress(OSError, AttributeError):  # it goes with its Ray worker
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    os.environ.update(spawn.worker_env(dict(os.environ)))
    import torch  # noqa: F401 - every judge starts with it imported

    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what a judge prints is not an answer
    for raw in sys.stdin:
        try:
            request = json.loads(raw)
        except ValueError:
            return 2
        scratch = tempfile.mkdtemp(prefix="attnspec-judge-")
        report = os.path.join(scratch, "report.json")
        pid = _fork_judge({**request, "report": report})
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        data, problem = read_verdict(report, code)
        _remove(report)
        with contextlib.suppress(OSError):
            os.rmdir(scratch)
        try:
            out.write(json.dumps({"code": code, "report": data, "problem": problem}) + "\n")
            out.flush()
        except OSError:  # its Ray worker is gone: nobody to answer
            return 1
    return 0


if __name__ == "__main__":  # a judge server, or an exec'd judge: its request as one argument
    sys.exit(serve() if sys.argv[1:] == ["--serve"] else judge(json.loads(sys.argv[1])))
