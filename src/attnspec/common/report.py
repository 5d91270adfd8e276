"""The verdicts of one run, as a table for people and JSON for tools (written atomically)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["PropertyResult", "Report", "check_report_path", "printable"]

PASSING = ("pass", "skip")
# Verdicts that are no verdict on the subject's attention either way: what was asked of the run
# could not be checked (a required property that did not run, examples that were degenerate).
INCOMPLETE = "incomplete"
Progress = Callable[[str, int, int, "PropertyResult | None"], None]
"""Called as (property, examples done, examples in all, its result once it has one)."""
SCHEMA = 1
# An existing file larger than this is not a report attnspec wrote, so it is never replaced.
_REPORT_MAX_BYTES = 64 * 1024 * 1024
# C0 but newline and tab, DEL, C1, and the bidi overrides that reorder text on a terminal.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@dataclass
class PropertyResult:
    """One property's verdict: pass, fail, error (the subject raised), crash, timeout, skip;
    incomplete (required but not run, or its examples were degenerate: no pass, no failure);
    not_run, or interrupted (Ctrl-C came before a verdict; `examples` says how far it got)."""

    id: str
    verdict: str = "not_run"
    examples: int = 0
    # Of the examples, those in which the subject ran a request (T = 1 ends causality before).
    reached: int = 0
    seconds: float = 0.0
    message: str = ""
    counterexample: dict[str, Any] | None = None
    measured: float | None = None
    allowed: float | None = None
    where: dict[str, Any] | None = None
    replay: str | None = None
    forwards_per_example: float | None = None
    # Draws the subject's supports(spec) or supports(case) declined (not examples).
    declined: int = 0
    notes: list[str] = field(default_factory=list)
    # What the examples covered: [min, max] of B, T, C, H, distinct shapes, runs per dtype/device.
    drawn: dict[str, Any] | None = None
    # The largest violation seen among all examples (measured, allowed, message, example), so a
    # leak that shrinking squashed to noise size still reads as the leak it was.
    largest: dict[str, Any] | None = None
    # A failure's picture (properties/pictures.py), drawn by --html or `attnspec plot --replay`.
    picture: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.verdict in PASSING

    @property
    def failed(self) -> bool:
        """A verdict against the subject: fail, error, crash, timeout (interrupted counts, as
        before: the run did not end well), never skip, incomplete or not_run."""
        return self.verdict not in (*PASSING, INCOMPLETE, "not_run")


@dataclass
class Report:
    """What `verify` found. `ok` is True when every property passed or was skipped.

    ```python
    report = attnspec.verify("my_pkg.attention")
    assert report.ok, report.summary()
    ```
    """

    target: str
    header: dict[str, Any]
    properties: list[PropertyResult] = field(default_factory=list)
    partial: bool = True
    interrupted: bool = False
    # Written at the start and after each property while the run goes on; left True by a run
    # that was killed or broke before it finished (status "partial", "finished": false).
    running: bool = False
    # Why the TARGET could not be checked at all (it did not load); status "error".
    error: str | None = None
    # Why the JSON report could not be written, if it could not (not part of the JSON).
    write_error: str | None = None
    # The sha256 of the last report written (not part of the JSON).
    digest: str | None = field(default=None, compare=False)

    @property
    def ok(self) -> bool:
        """Whether the subject conforms: every property passed or was skipped, and every
        property the run requires (the oracle, unless black-box) ran: `status == "pass"`."""
        return (self.error is None and not self.partial and not self.running
                and all(p.ok for p in self.properties))

    @property
    def failures(self) -> list[PropertyResult]:
        """The properties that failed (fail, error, crash, timeout; interrupted too)."""
        return [p for p in self.properties if p.failed]

    @property
    def incomplete(self) -> list[PropertyResult]:
        """The properties with no verdict that the run needed one of: required ones that did
        not run, and ones whose examples were degenerate (`verdict == "incomplete"`)."""
        return [p for p in self.properties if p.verdict == INCOMPLETE]

    @property
    def status(self) -> str:
        """pass (conforms), fail, incomplete (nothing failed, but something the run needed did
        not run), error (the TARGET did not load, or nothing was checked), interrupted,
        partial (stopped before every property ran: -x, or killed before it finished, which
        `finished` false in the JSON tells apart)."""
        return ("error" if self.error is not None else "interrupted" if self.interrupted
                else "partial" if self.running or self.partial
                else "fail" if self.failures else INCOMPLETE if self.incomplete
                else "pass" if self.ok else "fail")

    @property
    def conclusion(self) -> str:
        """The verdict in one line, as the table ends: "conforms", "conforms (black-box:
        oracle not run)", "incomplete: ... did not run: why", "fails: ids", ..."""
        status = self.status
        if status == "error":
            return f"error: {self.error}"
        if self.failures and status in ("fail", "partial"):
            stopped = (" (the run did not finish: it was killed or broke)" if self.running
                       else " (the run stopped at the first failure)" if status == "partial"
                       else "")
            return "fails: " + ", ".join(p.id for p in self.failures) + stopped
        if status == INCOMPLETE:
            return "incomplete (no failure, but not every check the run needs ran): " + \
                "; ".join(f"{p.id}: {_first_line(p.message)}" for p in self.incomplete)
        if self.running:
            return ("did not finish (the run was killed or broke): the properties with a "
                    "verdict are what it finished")
        if status != "pass":
            return {"interrupted": "interrupted before every verdict",
                    "partial": "stopped before every property ran"}[status]
        ran = {p.id for p in self.properties if p.verdict == "pass"}
        oracle = self.header.get("oracle", "oracle")
        if oracle in ran or not self.properties:
            return "conforms"
        if self.header.get("black_box"):
            return f"conforms (black-box: {oracle} not run)"
        if any(p.id == oracle for p in self.properties):
            return f"conforms ({oracle} skipped, not required)"
        ran_ids = ", ".join(p.id for p in self.properties)
        return f"conforms ({oracle} not selected: only {ran_ids} ran)"

    def result(self, prop: str) -> PropertyResult:
        for p in self.properties:
            if p.id == prop:
                return p
        raise KeyError(f"no property {prop!r} in this report; it has "
                       f"{', '.join(p.id for p in self.properties)}.")

    def to_json(self) -> dict[str, Any]:
        extra = {"error": self.error} if self.error is not None else {}
        data: dict[str, Any] = json_finite({
            "schema": SCHEMA, "target": self.target, "status": self.status,
            "conclusion": self.conclusion, "partial": self.partial,
            "finished": not self.running,
            **extra, **self.header, "properties": [asdict(p) for p in self.properties]})
        return data

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write the JSON report: atomically (a temporary file beside it, then a rename) to a new
        path or an earlier report, plainly to a character device or FIFO (/dev/null, a pipe).

        A symlink is written through, never replaced; an existing file that is not an attnspec
        report (a source file, say) is refused with UsageError.
        """
        path = os.fspath(path)
        where, found = _destination(path)
        text = json.dumps(self.to_json(), indent=2, allow_nan=False) + "\n"
        # Of the bytes written, not read back: what the CLI prints as the report's sha256.
        self.digest = hashlib.sha256(text.encode()).hexdigest()
        if found is not None and _is_stream(found):
            with open(where, "w") as handle:  # a device or pipe: no rename, no chmod
                handle.write(text)
            return
        if found is not None:
            _refuse_non_report(path, where, found)
        directory = os.path.dirname(where)
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".attnspec-report-", suffix=".json", dir=directory)
        umask = os.umask(0)
        os.umask(umask)
        # mkstemp's 0600 is for secrets; a report is not; an earlier report keeps its mode.
        mode = stat.S_IMODE(found.st_mode) if found is not None else 0o666 & ~umask
        try:
            with os.fdopen(fd, "w") as handle:
                os.chmod(tmp, mode)
                handle.write(text)
            os.replace(tmp, where)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def summary(self, colour: bool = False) -> str:
        """The verdict table, then each failure's message and replay command; `colour`: the
        verdict words in ANSI colours (a terminal's; see `wants_colour`)."""
        rows = [("property", "verdict", "examples", "time", "counterexample")]
        for p in self.properties:
            ce = p.counterexample
            shown = "" if not ce else _short(ce, p.where)
            rows.append((p.id, p.verdict, str(p.examples), f"{p.seconds:.1f}s", shown))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = ["  ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4] for r in rows]
        said: dict[str, str] = {}
        for p in self.failures:
            if p.message and p.message in said:  # a build that fails fails every property
                lines += ["", f"{p.id}: {p.verdict}: the same message as {said[p.message]}."]
                continue
            said.setdefault(p.message, p.id)
            lines += ["", f"{p.id}: {p.verdict}: {p.message}"]
            if p.replay:
                lines.append(f"  replay: {p.replay}")
            big = p.largest
            if big is not None:  # shrinking may have squashed a real leak to noise size
                shown = _short(big["example"], None)
                lines.append(f"  largest violation seen: {big['measured']:.3g} (allowed "
                             f"{big['allowed']:.3g}) at {shown}")
                lines.append(f"  replay: {big['replay']}")
        for p in self.incomplete:
            lines += ["", f"{p.id}: incomplete: {p.message}"]
        reasons: dict[str, list[str]] = {}  # one line a reason: what a pass was not earned on
        for p in self.properties:
            if p.verdict == "skip":
                reasons.setdefault(_first_line(p.message), []).append(p.id)
        if reasons:
            lines += ["", "skipped:"] + [f"  {', '.join(ids)}: {why}"
                                         for why, ids in reasons.items()]
        covered = [(p.id, coverage_line(p)) for p in self.properties if p.drawn or p.declined]
        if covered:
            width = max(len(pid) for pid, _ in covered)
            lines += ["", "coverage (what the examples reached):"]
            lines += [f"  {pid.ljust(width)}  {line}" for pid, line in covered]
        if self.error is not None:
            lines += ["", f"error: {self.error}"]
        elif not self.running:
            lines += ["", self.conclusion]
        # Messages quote the subject's own exceptions: its escape codes must not drive the tty.
        safe = [printable(line.rstrip()) for line in lines]
        if colour:  # ours, added after printable(): the verdict column of the table's rows
            at = widths[0] + 2
            for i, p in enumerate(self.properties, start=1):
                if safe[i][at:at + len(p.verdict)] == p.verdict:
                    safe[i] = safe[i][:at] + coloured(p.verdict) + safe[i][at + len(p.verdict):]
            if safe and not self.running and self.error is None:
                safe[-1] = coloured(safe[-1], self.status)
        return "\n".join(safe)


def _first_line(text: str) -> str:
    """A message's first line (a traceback's frames follow it)."""
    return text.split("\n", 1)[0]


def coverage_line(p: PropertyResult) -> str:
    """What one property's examples reached: the ranges of each axis, the dtypes and devices
    with their counts, and the draws the subject declined."""
    drawn = p.drawn or {}
    parts = []
    axes = [a for a in ("B", "T", "Tq", "Tk", "C", "H", "G", "D") if a in drawn]
    if axes:
        parts.append(" ".join(f"{a} {drawn[a][0]}" + (f"..{drawn[a][1]}" if drawn[a][1] !=
                                                       drawn[a][0] else "") for a in axes))
    for key in ("dtype", "device"):
        seen = drawn.get(key)
        if seen:
            parts.append(", ".join(f"{name} {n}" for name, n in seen.items()))
    if p.declined:
        parts.append(f"declined {p.declined} draw{'s' * (p.declined != 1)}")
    return " | ".join(parts) or "no example"


# ANSI SGR codes: green for a pass, red against the subject, yellow for what was not judged.
_COLOUR = {"pass": "32", "conforms": "32", "fail": "31", "fails": "31", "error": "31",
           "crash": "31", "timeout": "31", "flaky": "33", "incomplete": "33", "skip": "33",
           "partial": "33", "interrupted": "35"}


def coloured(text: str, verdict: str | None = None) -> str:
    """`text` in the colour of `verdict` (default: the text itself); unchanged if none."""
    code = _COLOUR.get(verdict or text)
    return text if code is None else f"\x1b[{code}m{text}\x1b[0m"


def wants_colour(stream: Any) -> bool:
    """Colour on a terminal, as no-color.org and FORCE_COLOR say: never with NO_COLOR set (not
    empty) or TERM=dumb; always with FORCE_COLOR set (not empty); else where `stream` is a tty."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    if os.environ.get("TERM") == "dumb":
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, OSError, ValueError):
        return False


def printable(text: str) -> str:
    r"""`text` with control characters other than newline and tab shown as escapes.

    ```python
    printable("boom\x1b[2J")  # 'boom\\x1b[2J': ESC shown as four characters
    ```
    """
    return _CONTROL.sub(lambda m: _escape(m.group()), text)


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def progress_printer(stream: Any) -> Progress:
    """A live line on a terminal; plain lines, one per property, otherwise."""
    tty = hasattr(stream, "isatty") and stream.isatty()
    last = [0.0]

    def show(prop: str, done: int, total: int, result: PropertyResult | None) -> None:
        if result is not None:
            line = (f"{prop:<20} {result.verdict:<8} {result.examples:>4} examples "
                    f"{result.seconds:6.1f}s")
            stream.write(("\r\x1b[K" if tty else "") + line + "\n")
            stream.flush()
        elif tty and time.monotonic() - last[0] > 0.1:
            last[0] = time.monotonic()
            stream.write(f"\r\x1b[K{prop:<20} running  {done:>4}/{total} examples")
            stream.flush()

    return show


def check_report_path(path: str | os.PathLike[str]) -> None:
    """Raise UsageError now, naming the path and the reason, if a report could not go there."""
    from .._errors import UsageError

    path = os.fspath(path)
    where, found = _destination(path)
    if found is not None and _is_stream(found):
        # A device or pipe takes no trial file beside it (none next to /dev/null).
        if not os.access(where, os.W_OK):
            raise UsageError(option="report", value=path,
                             reason=f"{where!r} is a device or pipe that this process may not "
                                    "write to.")
        return
    if found is not None:
        _refuse_non_report(path, where, found)
    directory = os.path.dirname(where)
    try:  # a trial file where the report will go: the only test that root, NFS and /proc obey
        os.makedirs(directory, exist_ok=True)
        fd, trial = tempfile.mkstemp(prefix=".attnspec-report-", suffix=".json", dir=directory)
        os.close(fd)
        os.unlink(trial)
    except OSError as error:
        raise UsageError(option="report", value=path,
                         reason=f"cannot write a file in {directory!r} "
                                f"({error.strerror or error}).") from None


def is_stream(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a character device or FIFO, which a report is written to plainly."""
    try:
        return _is_stream(os.stat(path))
    except (OSError, ValueError):  # nothing there, or a name stat cannot take: a file then
        return False


def _destination(path: str) -> tuple[str, os.stat_result | None]:
    """Where a report for `path` goes, and what is there now (None: nothing yet).

    A device or FIFO is opened by the name given (so /dev/stdout's link to a pipe works);
    anything else by its real path, so a symlink is written through and never replaced.
    """
    from .._errors import UsageError

    _check_name(path)
    try:
        found: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        found = None  # a new file, or a symlink to one: created where the link points
    except OSError as error:
        raise UsageError(option="report", value=path,
                         reason=f"cannot look at this path ({error.strerror or error})."
                         ) from None
    if found is not None and _is_stream(found):
        return path, found
    where = os.path.realpath(path)
    if os.path.islink(where):  # realpath stops at a loop and hands back a link
        raise UsageError(option="report", value=path,
                         reason=f"a symlink that leads back to itself (through {where!r}); give "
                                "a file name.")
    if found is not None and not stat.S_ISREG(found.st_mode):
        raise UsageError(option="report", value=path,
                         reason=f"{where!r} is not a regular file, a character device or a FIFO "
                                "(a block device or socket is never written).")
    _check_name(where)
    return where, found


def _is_stream(found: os.stat_result) -> bool:
    return stat.S_ISCHR(found.st_mode) or stat.S_ISFIFO(found.st_mode)


def _refuse_non_report(path: str, where: str, found: os.stat_result) -> None:
    """Raise UsageError unless the existing file at `where` is empty or an attnspec report."""
    from .._errors import UsageError

    if found.st_size == 0:
        return  # a file the user just touched for the report
    via = "" if where == os.path.abspath(path) else f" (it leads to {where!r})"
    if found.st_size > _REPORT_MAX_BYTES:
        data = None
    else:
        try:
            with open(where, "rb") as handle:
                raw = handle.read(_REPORT_MAX_BYTES + 1)
        except OSError as error:
            raise UsageError(option="report", value=path,
                             reason=f"the file{via} exists and cannot be read to check that it "
                                    f"is an attnspec report ({error.strerror or error}), so it "
                                    "will not be replaced.") from None
        try:
            data = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError):  # not UTF-8, not JSON, or nested past the stack
            data = None
    if isinstance(data, dict) and "schema" in data and "properties" in data:
        return
    raise UsageError(option="report", value=path,
                     reason=f"the file{via} exists and is not an attnspec JSON report (a JSON "
                            "object with \"schema\" and \"properties\"), so it will not be "
                            "replaced; give a new file name, or remove the file first.")


def _check_name(path: str) -> None:
    from .._errors import UsageError

    if not path:
        raise UsageError(option="report", value="",
                         reason="give a file name for the JSON report.")
    if os.path.isdir(path) or path.endswith(("/", os.sep)):
        raise UsageError(option="report", value=path,
                         reason="names a directory; give a file name such as "
                                f"{os.path.join(path, 'attnspec-report.json')!r}.")


def json_finite(value: Any) -> Any:
    """JSON has no inf or NaN: such numbers become null (the message still says the value)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_finite(v) for v in value]
    return value


def _short_kernel(ce: dict[str, Any]) -> str:
    text = " ".join(f"{k}={ce.get(k)}" for k in ("B", "H", "G", "Tq", "Tk", "D"))
    for key in ("causal", "softmax_scale", "window", "softcap", "alibi", "sinks", "lengths"):
        if key in ce and not (key == "causal" and ce[key]):
            text += f" {key}={ce[key]}"
    return text + f" {ce.get('dtype')} {ce.get('device')} x{ce.get('scale', 1):g}"


def _short(ce: dict[str, Any], where: dict[str, Any] | None) -> str:
    if ce.get("kind") == "kernel":
        return _short_kernel(ce)
    spec = ce.get("spec") or {}
    d = spec.get("head_dim") or (ce["C"] // ce["H"] if ce.get("H") else 0)
    text = f"B={ce['B']} T={ce['T']} C={ce['C']} H={ce['H']} D={d}"
    for key, value in spec.items():  # a v2 spec's other fields: window=4, n_kv_head=2, ...
        if key in ("n_embd", "n_head", "head_dim"):
            continue
        if isinstance(value, dict):  # rope-interleaved+yarn, alibi-given, rms-whole, ...
            scaling = value.get("scaling")
            value = (str(value.get("kind", "?"))
                     + ("-interleaved" if value.get("interleaved") else "")
                     + (f"+{scaling.get('kind', '?')}" if isinstance(scaling, dict) else "")
                     + ("-given" if value.get("slopes") is not None else "")
                     + ("-whole" if value.get("per_head") is False else ""))
        text += f" {key}={value}"
    text += f" {ce['dtype']} {ce['device']}"
    if ce.get("world"):
        text += f" world={ce['world']}"
    if where and "rank" in where:
        text += f" rank {where['rank']}"
    if where and "cut" in where:
        text += f" cut t={where['cut']}"
    return text
