"""The HTML report and the failures' pictures: a real failing verify, its pictures' cells, a
hostile subject's text escaped, and the page as headless Chromium renders it."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from attnspec.frontends.html_report import render_html, render_svg

HERE = Path(__file__).parent
BROKEN = HERE / "broken" / "mask_off_by_one.py"
CHROMIUM = "/usr/bin/chromium"


def _verify(tmp_path: Path, *extra: str) -> tuple[dict, str]:
    html, report = tmp_path / "r.html", tmp_path / "r.json"
    run = subprocess.run(
        [sys.executable, "-m", "attnspec", "verify", str(BROKEN), "--only", "causality",
         "--max-examples", "5", "--seed", "0", "--no-database", "--no-progress",
         "--html", str(html), "--report", str(report), *extra],
        capture_output=True, text=True, timeout=240)
    assert run.returncode == 1, run.stdout + run.stderr
    return json.loads(report.read_text()), html.read_text()


@pytest.fixture(scope="module")
def failing(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str, Path]:
    tmp = tmp_path_factory.mktemp("html")
    data, page = _verify(tmp)
    return data, page, tmp / "r.html"


@pytest.mark.slow
def test_causality_picture_marks_exactly_the_leaking_cells(failing: tuple[dict, str, Path]
                                                           ) -> None:
    # tril(diagonal=1): query i sees key i + 1 too, so exactly the cells (i, i + 1) leak.
    data, _, _ = failing
    (prop,) = data["properties"]
    for picture in (prop["picture"], prop["largest"]["picture"]):
        T = len(picture["values"])
        leaking = {(i, j) for i in range(T) for j in range(T)
                   if picture["cells"][i][j] == "f" and picture["values"][i][j] > 0}
        assert leaking == {(i, i + 1) for i in range(T - 1)}
        assert picture["failing"] == T - 1 and picture["allowed"] == 0


@pytest.mark.slow
def test_html_report_has_header_verdicts_replay_and_svg(failing: tuple[dict, str, Path]
                                                        ) -> None:
    data, page, _ = failing
    (prop,) = data["properties"]
    for text in ("torch", "hypothesis", "python", "CPU", data["host"]["date"], "causality",
                 "attnspec-picture", "class='fails'"):
        assert text in page, text
    # The replay command is on the page, escaped once (its quotes as entities).
    import html

    assert html.escape(prop["replay"], quote=True) in page
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert "<script" not in page and "https://" not in page


def test_subject_text_is_escaped() -> None:
    hostile = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    report = {"target": hostile, "subject": hostile, "versions": {"torch": hostile},
              "properties": [{"id": hostile, "verdict": "fail", "examples": 1, "seconds": 0.1,
                              "message": hostile, "replay": hostile,
                              "picture": {"kind": "reach", "property": hostile, "rows": hostile,
                                          "cols": hostile, "row_ticks": [hostile, "1"],
                                          "col_ticks": ["0", hostile], "values": [[1, 2], [1, 1]],
                                          "cells": ["af", "aa"], "judged": "f", "allowed": 0.5,
                                          "failing": 1, "caption": hostile}}]}
    page = render_html(report)
    assert "<script" not in page and "<img" not in page
    assert page.count("&lt;script&gt;") >= 8
    assert render_svg({"error": hostile}).count("<script") == 0


def test_the_policy_comes_first_and_lets_nothing_run_load_or_submit() -> None:
    page = render_html({"target": "t", "properties": []})
    head = page.split("<head>", 1)[1]
    assert head.lstrip().startswith("<meta http-equiv='Content-Security-Policy'"), head[:200]
    policy = re.search(r'content="([^"]*)"', head).group(1)  # type: ignore[union-attr]
    assert "default-src 'none'" in policy and "unsafe" not in policy
    assert "base-uri 'none'" in policy and "form-action 'none'" in policy
    style = re.search(r"<style>(.*?)</style>", page, re.S).group(1)  # type: ignore[union-attr]
    digest = base64.b64encode(hashlib.sha256(style.encode()).digest()).decode()
    assert f"style-src 'sha256-{digest}'" in policy  # the one style sheet on the page, no other


def test_lone_surrogates_are_replaced_and_a_huge_name_is_cut(tmp_path: Path) -> None:
    from attnspec.frontends.html_report import write_pages

    name = "x\udc80" + "n" * 2_000_000
    report = {"target": name, "properties": [
        {"id": "width\ud800", "verdict": "fail", "message": "bad \udcff bytes", "examples": 1}]}
    page = render_html(report)
    assert not re.search("[\ud800-\udfff]", page) and "x\ufffdn" in page
    assert len(page) < 400_000 and "(cut here: 2,000,002 characters in all)" in page
    path = tmp_path / "r.html"
    write_pages([report], str(path))  # UTF-8 on disk, never a UnicodeEncodeError
    assert path.read_text(encoding="utf-8") == page

def test_oracle_picture_is_error_over_allowance() -> None:
    svg = render_svg({"kind": "error", "property": "oracle", "rows": "t", "cols": "c",
                      "row_ticks": ["0"], "col_ticks": ["0", "1"], "values": [[0.5, None]],
                      "cells": None, "judged": "a", "allowed": 1.0, "failing": 1,
                      "caption": ""})
    assert svg.count("class='fails'") == 1  # null (inf) fails; 0.5 is within the allowance


@pytest.mark.slow
def test_chromium_renders_the_failure(failing: tuple[dict, str, Path]) -> None:
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is absent (apt-get install -y chromium): the report is not "
                    "opened in a browser")
    data, _, path = failing
    profile = tempfile.mkdtemp(prefix="attnspec-chromium-")
    try:
        run = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={profile}", "--dump-dom", path.as_uri()],
            capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    dom = run.stdout
    assert run.returncode == 0, run.stderr[-2000:]
    assert "<svg" in dom and 'class="attnspec-picture"' in dom
    assert 'data-property="causality"' in dom and 'class="fails"' in dom
    replay = data["properties"][0]["replay"]
    assert "--only causality --replay" in dom and replay.split("--replay")[0] in dom


@pytest.mark.slow
@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["one process", "xdist"])
def test_plugin_writes_the_html_report(tmp_path: Path, xdist: list[str]) -> None:
    """Under xdist the workers' results travel to the controller, which writes the page."""
    html = tmp_path / "plugin.html"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *xdist,
         "--attnspec-subject", str(BROKEN), "--attnspec-max-examples", "5",
         "--attnspec-seed", "0", "--attnspec-html", str(html), "-k", "causality or width"],
        capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-2000:]
    page = html.read_text()
    assert "test_causality" not in page and "causality" in page
    assert "attnspec-picture" in page and "class='fails'" in page and "--replay" in page
    # Every item's verdict, in the properties' order, whichever process finished first.
    rows = re.findall(r"<tr><td>([a-z_]+)</td><td class=", page)
    assert rows == ["width", "causality", "grad_causality"], rows


def test_plot_replay_draws_the_window_picture(tmp_path: Path) -> None:
    # window_one_too_wide: query i also sees key i - W, so cells (i, i - W) leak.
    example = {"B": 1, "T": 6, "C": 8, "H": 2, "dtype": "float32", "device": "cpu", "seed": 3,
               "cuts": [0], "scale": 1.0,
               "spec": {"n_embd": 8, "n_head": 2, "window": 2}}
    out = tmp_path / "w.svg"
    run = subprocess.run(
        [sys.executable, "-m", "attnspec", "plot", str(HERE / "broken" / "window_one_too_wide.py"),
         "--only", "window", "--replay", json.dumps(example), "-o", str(out)],
        capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    svg = out.read_text()
    assert svg.startswith("<svg") and "data-property='window'" in svg
    assert "wrote" in run.stdout and " 4 failing cells" in run.stdout  # (2,0) .. (5,3)


@pytest.mark.slow
def test_padding_picture_marks_the_real_tokens_the_padding_reaches(tmp_path: Path) -> None:
    # The mask applied to queries, not keys: every real token attends to the padding.
    report = tmp_path / "r.json"
    run = subprocess.run(
        [sys.executable, "-m", "attnspec", "verify", str(HERE / "broken" /
                                                          "padding_mask_on_queries.py"),
         "--only", "padding_invariance", "--max-examples", "10", "--seed", "0",
         "--no-database", "--no-progress", "--report", str(report), "--html",
         str(tmp_path / "r.html")], capture_output=True, text=True, timeout=240)
    assert run.returncode == 1, run.stdout + run.stderr
    (prop,) = json.loads(report.read_text())["properties"]
    for picture in (prop["picture"], prop["largest"]["picture"]):
        cells, values = picture["cells"], picture["values"]
        reached = [(b, t) for b, row in enumerate(cells) for t, kind in enumerate(row)
                   if kind == "r" and (values[b][t] is None or values[b][t] > 0)]
        padding_marked = [(b, t) for b, row in enumerate(cells) for t, kind in enumerate(row)
                          if kind == "p" and values[b][t] != 0]
        assert reached and picture["failing"] == len(reached) and not padding_marked
    assert "data-property='padding_invariance'" in (tmp_path / "r.html").read_text()
