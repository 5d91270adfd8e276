"""The verdicts of one run, as a table for people and JSON for tools (written atomically)."""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["PropertyResult", "Report", "check_report_path"]

PASSING = ("pass", "skip")
SCHEMA = 1


@dataclass
class PropertyResult:
    """One property's verdict: pass, fail, error (the subject raised), crash, timeout, skip;
    not_run, or interrupted (Ctrl-C came before a verdict; `examples` says how far it got)."""

    id: str
    verdict: str = "not_run"
    examples: int = 0
    seconds: float = 0.0
    message: str = ""
    counterexample: dict[str, Any] | None = None
    measured: float | None = None
    allowed: float | None = None
    where: dict[str, Any] | None = None
    replay: str | None = None
    forwards_per_example: float | None = None
    notes: list[str] = field(default_factory=list)
    # What the examples covered: [min, max] of B, T, C, H, distinct shapes, runs per dtype/device.
    drawn: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.verdict in PASSING


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
    # Why the TARGET could not be checked at all (it did not load); status "error".
    error: str | None = None
    # Why the JSON report could not be written, if it could not (not part of the JSON).
    write_error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and not self.partial and all(p.ok for p in self.properties)

    @property
    def failures(self) -> list[PropertyResult]:
        return [p for p in self.properties if not p.ok and p.verdict != "not_run"]

    def result(self, prop: str) -> PropertyResult:
        for p in self.properties:
            if p.id == prop:
                return p
        raise KeyError(f"no property {prop!r} in this report; it has "
                       f"{', '.join(p.id for p in self.properties)}.")

    def to_json(self) -> dict[str, Any]:
        status = ("error" if self.error is not None else "interrupted" if self.interrupted
                  else "partial" if self.partial else "pass" if self.ok else "fail")
        extra = {"error": self.error} if self.error is not None else {}
        data: dict[str, Any] = _finite({
            "schema": SCHEMA, "target": self.target, "status": status, "partial": self.partial,
            **extra, **self.header, "properties": [asdict(p) for p in self.properties]})
        return data

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write the JSON report atomically: a temporary file beside it, then a rename."""
        path = os.fspath(path)
        _check_name(path)
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".attnspec-report-", suffix=".json", dir=directory)
        umask = os.umask(0)
        os.umask(umask)
        try:
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 is for secrets; a report is not
            with os.fdopen(fd, "w") as handle:
                json.dump(self.to_json(), handle, indent=2, allow_nan=False)
                handle.write("\n")
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def summary(self) -> str:
        """The verdict table, then each failure's message and replay command."""
        rows = [("property", "verdict", "examples", "time", "counterexample")]
        for p in self.properties:
            ce = p.counterexample
            shown = "" if not ce else _short(ce, p.where)
            rows.append((p.id, p.verdict, str(p.examples), f"{p.seconds:.1f}s", shown))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = ["  ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4] for r in rows]
        for p in self.failures:
            lines += ["", f"{p.id}: {p.verdict}: {p.message}"]
            if p.replay:
                lines.append(f"  replay: {p.replay}")
        return "\n".join(line.rstrip() for line in lines)


def check_report_path(path: str | os.PathLike[str]) -> None:
    """Raise UsageError now, naming the path and the reason, if a report could not go there."""
    from ._errors import UsageError

    path = os.fspath(path)
    _check_name(path)
    directory = os.path.dirname(os.path.abspath(path))
    try:  # a trial file where the report will go: the only test that root, NFS and /proc obey
        os.makedirs(directory, exist_ok=True)
        fd, trial = tempfile.mkstemp(prefix=".attnspec-report-", suffix=".json", dir=directory)
        os.close(fd)
        os.unlink(trial)
    except OSError as error:
        raise UsageError(f"--report {path!r}: cannot write a file in {directory!r} "
                         f"({error.strerror or error}).") from None


def _check_name(path: str) -> None:
    from ._errors import UsageError

    if not path:
        raise UsageError("--report '': give a file name for the JSON report.")
    if os.path.isdir(path) or path.endswith(("/", os.sep)):
        raise UsageError(f"--report {path!r}: names a directory; give a file name such as "
                         f"{os.path.join(path, 'attnspec-report.json')!r}.")


def _finite(value: Any) -> Any:
    """JSON has no inf or NaN: such numbers become null (the message still says the value)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _short(ce: dict[str, Any], where: dict[str, Any] | None) -> str:
    d = ce["C"] // ce["H"] if ce.get("H") else 0
    text = (f"B={ce['B']} T={ce['T']} C={ce['C']} H={ce['H']} D={d} {ce['dtype']} "
            f"{ce['device']}")
    if where and "cut" in where:
        text += f" cut t={where['cut']}"
    return text
