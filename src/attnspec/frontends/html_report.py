"""A failure's picture as inline SVG (drawn by hand: no matplotlib), and the HTML report: one
self-contained file (no network, no script) rendered from the JSON report's data."""

from __future__ import annotations

import base64
import hashlib
import html
import math
import os
import re
import stat
import tempfile
from typing import Any

__all__ = ["check_html_path", "render_html", "render_svg"]

_MARK = "<title>attnspec report"  # what every page written since 0.1 holds near its start

MARGIN_LEFT, MARGIN_TOP = 70, 30
HATCH = ("<pattern id='{id}' width='4' height='4' patternUnits='userSpaceOnUse' "
         "patternTransform='rotate(45)'><rect width='4' height='4' fill='#eeeeee'/>"
         "<line x1='0' y1='0' x2='0' y2='4' stroke='#b0b0b0' stroke-width='1.5'/></pattern>")


_TEXT_LIMIT = 65_536  # characters of one name or message shown; a subject's can be megabytes
_SURROGATE = re.compile("[\ud800-\udfff]")


def _csp(style: str) -> str:
    """Nothing runs, loads or submits: the one style sheet by its hash, images inline only."""
    digest = base64.b64encode(hashlib.sha256(style.encode()).digest()).decode()
    return (f"default-src 'none'; style-src 'sha256-{digest}'; img-src data:; "
            "base-uri 'none'; form-action 'none'")


def _e(value: object) -> str:
    text = str(value)
    if len(text) > _TEXT_LIMIT:
        text = f"{text[:_TEXT_LIMIT]}... (cut here: {len(text):,} characters in all)"
    # A lone surrogate cannot be written as UTF-8: shown as U+FFFD, never a crash.
    return html.escape(_SURROGATE.sub("\ufffd", text), quote=True)


def _value(v: Any) -> float:
    return math.inf if v is None else float(v)  # the JSON report writes inf as null


def _blue(level: float) -> str:
    """level 0..1: white to dark blue (allowed cells, by how much they moved)."""
    level = min(max(level, 0.0), 1.0)
    r, g, b = (int(255 - level * (255 - c)) for c in (33, 102, 172))
    return f"#{r:02x}{g:02x}{b:02x}"


def _red(level: float) -> str:
    """level 0..1: light to full red (judged cells beyond the allowance)."""
    level = min(max(level, 0.0), 1.0)
    return f"#{int(250 - 60 * level):02x}{int(160 - 150 * level):02x}{int(160 - 150 * level):02x}"


def render_svg(data: dict[str, Any], ident: str = "p") -> str:
    """One panel: rows x columns of cells; judged cells beyond the allowance in red."""
    if "error" in data:
        return f"<p class='attnspec-no-picture'>{_e(data['error'])}</p>"
    values = [[_value(v) for v in row] for row in data["values"]]
    rows, cols = len(values), len(values[0]) if values else 0
    cells = data.get("cells")
    judged = data.get("judged", "a")
    allowed = float(data.get("allowed") or 0.0)
    ratio_kind = data["kind"] == "error"
    finite = [v for row in values for v in row if math.isfinite(v) and v > 0]
    top = max(finite, default=1.0)
    # Small grids get bigger cells; the legend's width is the least.
    CELL = max(8, min(28, 448 // max(rows, cols, 1)))
    width, height = max(MARGIN_LEFT + cols * CELL + 20, 400), MARGIN_TOP + rows * CELL + 60
    hatch = f"hatch-{_e(ident)}"
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' class='attnspec-picture' "
           f"data-property='{_e(data.get('property', ''))}' width='{width}' height='{height}' "
           f"viewBox='0 0 {width} {height}' font-family='sans-serif' font-size='9'>",
           f"<defs>{HATCH.format(id=hatch)}</defs>"]
    for i, row in enumerate(values):
        for j, v in enumerate(row):
            kind = cells[i][j] if cells else "a"
            x, y = MARGIN_LEFT + j * CELL, MARGIN_TOP + i * CELL
            if ratio_kind:
                bad = v > 1.0
                fill = _red(math.log10(v) / 3 if math.isfinite(v) else 1.0) if bad else \
                    _blue(1 + math.log10(max(v, 1e-3)) / 3)
            elif kind in judged and kind != "e":
                bad = v > allowed
                fill = (_red(1.0 if allowed == 0 or not math.isfinite(v) else
                             math.log10(v / allowed) / 3) if bad else f"url(#{hatch})")
            else:
                bad = kind == "e" and "e" in judged and not v > allowed
                fill = "#ffd54f" if bad else (
                    f"url(#{hatch})" if kind != "a" and kind != "e" else
                    _blue(math.log10(max(v / top, 1e-6)) / 6 + 1 if v > 0 else 0.0))
            tip = (f"<title>{_e(data['rows'])} {_e(data['row_ticks'][i])}, {_e(data['cols'])} "
                   f"{_e(data['col_ticks'][j])}: {v:.3g}</title>") if bad else ""
            mark = " class='fails'" if bad else ""
            out.append(f"<rect x='{x}' y='{y}' width='{CELL}' height='{CELL}' fill='{fill}' "
                       f"stroke='#ffffff' stroke-width='0.5'{mark}>{tip}</rect>")
    step = max(1, math.ceil(max(rows, cols) / 16))
    for i in range(0, rows, step):
        out.append(f"<text x='{MARGIN_LEFT - 4}' y='{MARGIN_TOP + i * CELL + CELL / 2 + 3}' "
                   f"text-anchor='end'>{_e(data['row_ticks'][i])}</text>")
    for j in range(0, cols, step):
        out.append(f"<text x='{MARGIN_LEFT + j * CELL + CELL / 2}' y='{MARGIN_TOP - 4}' "
                   f"text-anchor='middle'>{_e(data['col_ticks'][j])}</text>")
    out.append(f"<text x='{MARGIN_LEFT}' y='12' font-size='11'>{_e(data['cols'])} \u2192</text>")
    out.append(f"<text x='12' y='{MARGIN_TOP + rows * CELL / 2}' font-size='11' "
               f"transform='rotate(-90 12 {MARGIN_TOP + rows * CELL / 2})' "
               f"text-anchor='middle'>{_e(data['rows'])}</text>")
    legend = MARGIN_TOP + rows * CELL + 16
    seen = "may see (darker: moved more)"
    out.append(f"<rect x='{MARGIN_LEFT}' y='{legend}' width='12' height='12' fill='{_red(0.7)}'/>"
               f"<text x='{MARGIN_LEFT + 16}' y='{legend + 10}'>fails "
               f"({_e(data.get('failing', 0))} cells)</text>"
               f"<rect x='{MARGIN_LEFT + 110}' y='{legend}' width='12' height='12' "
               f"fill='url(#{hatch})'/><text x='{MARGIN_LEFT + 126}' y='{legend + 10}'>"
               f"{_e(data.get('hatched', 'must not see, within allowance'))}</text>"
               f"<rect x='{MARGIN_LEFT}' y='{legend + 18}' width='12' height='12' "
               f"fill='{_blue(0.8)}'/><text x='{MARGIN_LEFT + 16}' y='{legend + 28}'>"
               f"{'within allowance (darker: nearer 1)' if ratio_kind else seen}</text>")
    out.append("</svg>")
    return "\n".join(out)


def _figure(data: dict[str, Any], ident: str) -> str:
    caption = "" if "error" in data else f"<figcaption>{_e(data['caption'])}</figcaption>"
    return f"<figure>{render_svg(data, ident)}{caption}</figure>"


STYLE = """body{font-family:sans-serif;margin:2em;color:#222}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}
.pass{color:#1a7f37}.fail,.error,.crash,.timeout{color:#c62828;font-weight:bold}
.skip,.not_run{color:#777}.incomplete{color:#b26a00;font-weight:bold}pre{background:#f5f5f5;padding:8px;white-space:pre-wrap;
word-break:break-all}figcaption{font-size:0.85em;max-width:60em;color:#444}"""
CSP = _csp(STYLE)


def render_html(report: dict[str, Any]) -> str:
    """The HTML report of a JSON report (Report.to_json()): header, verdict table, and each
    failure's message, replay command and picture. Everything from the run is escaped."""
    v = report.get("versions") or {}
    host = report.get("host") or {}
    header = [("target", report.get("target")), ("status", report.get("status")),
              ("conclusion", report.get("conclusion")),
              ("subject", f"{report.get('subject', '')} ({report.get('origin', '')})"),
              *((f"{k}", v.get(k)) for k in ("attnspec", "torch", "hypothesis", "python")),
              ("seed", report.get("seed")), ("profile", report.get("profile")),
              ("devices", ", ".join(report.get("devices") or ())),
              ("dtypes", report.get("dtypes")), ("CPU", host.get("cpu")),
              ("cores", host.get("cores")), ("date", host.get("date"))]
    parts = ["<!DOCTYPE html><html lang='en'><head>",
             f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">",
             "<meta charset='utf-8'>",
             f"<title>attnspec report: {_e(report.get('target'))}</title>",
             f"<style>{STYLE}</style></head><body>",
             f"<h1>attnspec verify {_e(report.get('target'))}</h1><table class='header'>",
             *(f"<tr><th>{_e(k)}</th><td>{_e(val)}</td></tr>" for k, val in header),
             "</table><h2>Verdicts</h2><table class='verdicts'><tr><th>property</th>"
             "<th>verdict</th><th>examples</th><th>time</th><th>why not checked</th></tr>"]
    props = report.get("properties") or []
    for p in props:
        verdict = str(p.get("verdict"))
        why = str(p.get("message") or "").split("\n", 1)[0] if verdict in (
            "skip", "incomplete", "not_run") else ""
        parts.append(f"<tr><td>{_e(p.get('id'))}</td><td class='{_e(verdict)}'>{_e(verdict)}"
                     f"</td><td>{_e(p.get('examples'))}</td>"
                     f"<td>{float(p.get('seconds') or 0):.1f} s</td>"
                     f"<td class='why'>{_e(why)}</td></tr>")
    parts.append("</table>")
    failures = [p for p in props if p.get("verdict") not in ("pass", "skip", "not_run",
                                                             "incomplete")]
    if failures:
        parts.append("<h2>Failures</h2>")
    for n, p in enumerate(failures):
        parts.append(f"<section class='failure' id='failure-{n}'><h3>{_e(p.get('id'))}: "
                     f"{_e(p.get('verdict'))}</h3><p class='message'>{_e(p.get('message'))}</p>")
        if p.get("replay"):
            parts.append(f"<p>replay:</p><pre class='replay'>{_e(p['replay'])}</pre>")
        if p.get("picture"):
            parts.append(_figure(p["picture"], f"f{n}"))
        big = p.get("largest")
        if big:
            measured = big.get("measured")  # JSON null: not finite (inf or NaN)
            parts.append(f"<p>largest violation seen: "
                         f"{_e('inf' if measured is None else measured)} (allowed "
                         f"{_e(big.get('allowed'))})</p><pre class='replay'>"
                         f"{_e(big.get('replay'))}</pre>")
            if big.get("picture"):
                parts.append(_figure(big["picture"], f"f{n}l"))
        parts.append("</section>")
    if report.get("error"):
        parts.append(f"<p class='error'>error: {_e(report['error'])}</p>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def attach_pictures(report: Any, options: Any = None, session: Any = None) -> None:
    """Draw the picture of each pictured failure of `report` (a Report whose target is a TARGET
    string), and of its largest violation: one Session, every example replayed in its worker."""
    from ..common.options import RunOptions
    from ..properties.pictures import PICTURED
    from ..session.engine import Session

    wanted = [p for p in report.failures if p.verdict == "fail" and p.id in PICTURED
              and p.counterexample is not None]
    if not wanted or not isinstance(report.target, str):
        return
    if session is not None:  # the run's own (the pytest plugin's), still open
        _draw(session, wanted)
        return
    with Session(report.target, options or RunOptions(database=False)) as fresh:
        _draw(fresh, wanted)


def _draw(session: Any, wanted: list[Any]) -> None:
    for p in wanted:
        p.picture = _json_safe(session.picture(p.id, p.counterexample))
        if p.largest is not None:
            p.largest["picture"] = _json_safe(session.picture(p.id, p.largest["example"]))


def _json_safe(data: dict[str, Any]) -> dict[str, Any]:
    """As the JSON report will hold it (inf as null), so SVG from either reads the same."""
    from ..common.report import json_finite

    return json_finite(data)  # type: ignore[no-any-return]


def write_html(report: Any, path: str) -> None:
    """Write the HTML report of `report` (its JSON data) to `path`."""
    write_pages([report.to_json()], path)


def write_pages(reports: list[dict[str, Any]], path: str) -> None:
    """Write the HTML reports of several JSON reports (a plugin run's subjects) as one file."""
    pages = [render_html(r) for r in reports]
    if len(pages) > 1:  # one document: the first page's head, every page's body
        bodies = [p.split("<body>", 1)[1].rsplit("</body>", 1)[0] for p in pages]
        pages = [pages[0].split("<body>", 1)[0] + "<body>" + "<hr>".join(bodies)
                 + "</body></html>\n"]
    text = pages[0] if pages else render_html({"target": "(nothing collected)"})
    where = check_html_path(path)  # again: the file may have appeared since the run began
    if os.path.exists(where) and _is_stream(os.stat(where)):
        with open(where, "w", encoding="utf-8") as handle:
            handle.write(text)
        return
    fd, tmp = tempfile.mkstemp(prefix=".attnspec-report-", suffix=".html",
                               dir=os.path.dirname(where))
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as handle:
            os.chmod(tmp, 0o666 & ~_umask())
            handle.write(text)
        os.replace(tmp, where)  # atomic: a cut-off run never leaves half a page
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _is_stream(found: os.stat_result) -> bool:
    return stat.S_ISCHR(found.st_mode) or stat.S_ISFIFO(found.st_mode)


def _target_file(target: str) -> str | None:
    """The file a TARGET names (path.py, path.py:name, path.py@backend), if it names one."""
    head = target.split("@", 1)[0]
    if ".py" in head:
        head = head[:head.index(".py") + 3]
    return head if os.path.isfile(head) else None


def check_html_path(path: str, *, target: str | None = None, report: str | None = None) -> str:
    """Where the HTML report for `path` goes (its real path), or UsageError: an empty name, a
    directory, the TARGET's own file, the JSON report's path, or an existing file that is not
    an attnspec HTML report (a source file, say) is never written over."""
    from .._errors import UsageError

    def refuse(reason: str) -> UsageError:
        return UsageError(option="html", value=path, reason=reason)

    if not path:
        raise refuse("give a file name for the HTML report.")
    where = os.path.realpath(path)
    if os.path.isdir(where) or path.endswith(("/", os.sep)):
        raise refuse("a directory; give a file name (report.html, say).")
    source = None if target is None else _target_file(target)
    if source is not None and os.path.realpath(source) == where:
        raise refuse(f"the TARGET {target!r} itself: the HTML report would overwrite the "
                     "subject's source; give another file name.")
    if report is not None and os.path.realpath(report) == where:
        raise refuse("the same file as --report: the HTML page would overwrite the JSON report "
                     "(or the JSON the page); give each its own file name.")
    try:
        found = os.stat(where)
    except FileNotFoundError:
        found = None
    except OSError as error:
        raise refuse(f"cannot look at this path ({error.strerror or error}).") from None
    if found is None or _is_stream(found) or found.st_size == 0:
        return where
    if not stat.S_ISREG(found.st_mode):
        raise refuse("not a regular file, a device or a pipe; give a file name.")
    try:
        with open(where, "rb") as handle:
            head = handle.read(4096).decode("utf-8", errors="replace")
    except OSError as error:
        raise refuse(f"the file exists and cannot be read to check that it is an attnspec HTML "
                     f"report ({error.strerror or error}), so it will not be replaced.") from None
    if not head.startswith("<!DOCTYPE html>") or _MARK not in head:
        raise refuse("the file exists and is not an attnspec HTML report, so it will not be "
                     "replaced; give a new file name, or remove the file first.")
    return where
