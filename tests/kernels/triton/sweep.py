"""`nox -s triton`: `attnspec verify` on every Triton kernel here (good/ and broken/) and on
the adapters under attnspec.subjects that are Triton's (ADAPTERS), default profile, seed 0, and
the table of what each gave written to docs/triton.md between its markers.

    python tests/kernels/triton/sweep.py [--write docs/triton.md] [--seeds 0,1,2] [--match good]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
BEGIN, END = "<!-- sweep: begin -->", "<!-- sweep: end -->"


# The library adapters that are Triton's: (adapter, the distribution it needs, extra verify
# arguments, the properties expected to fail ("none": conforms; else a finding in
# docs/findings.md)). Skipped where the distribution is absent.
ADAPTERS: list[tuple[str, str, tuple[str, ...], str]] = [
    ("attnspec.subjects.sglang_prefill", "sglang", (), "none"),
    ("attnspec.subjects.sglang_extend", "sglang", (), "none"),
    ("attnspec.subjects.sglang_decode", "sglang", (), "none"),
    ("attnspec.subjects.vllm_prefix_prefill", "vllm", (), "none"),
    ("attnspec.subjects.vllm_unified", "vllm", (), "none"),
    # the non-causal window's V mask (findings.md): drawn rarely, so asked for on its own
    ("attnspec.subjects.vllm_unified", "vllm", ("--only", "window", "--max-examples", "100"),
     "window"),
    # lengths must be multiples of 128 (its backward's assert), past the interpreter's T <= 40
    ("attnspec.subjects.triton_tutorial", "triton", ("--max-seq", "256"), "fresh_results"),
]
VENDORED = {"attnspec.subjects.triton_tutorial": "tutorial @5c846f0"}


class Target(NamedTuple):
    name: str  # a file's path under here, or an adapter's module
    path: str
    args: tuple[str, ...]
    expected: str
    version: str


def targets(match: list[str]) -> list[Target]:
    import importlib.metadata
    import importlib.util

    found = [Target(f"{p.parent.name}/{p.name}", str(p), (), expected(p), "-")
             for p in [*sorted((HERE / "good").glob("*.py")),
                       *sorted((HERE / "broken").glob("*.py"))]]
    for adapter, library, args, want in ADAPTERS:
        if importlib.util.find_spec(library) is None:
            print(f"{adapter}: skipped, {library} is not installed", file=sys.stderr)
            continue
        version = VENDORED.get(adapter) or f"{library} {importlib.metadata.version(library)}"
        label = adapter + (f" ({' '.join(args)})" if args else "")
        found.append(Target(label, adapter, args, want, version))
    return [t for t in found if not match or any(m in t.name for m in match)]


def expected(path: Path) -> str:
    for line in path.read_text().splitlines():
        if line.startswith("EXPECTED"):
            names = line.split("{", 1)[1].split("}")[0] if "{" in line else ""
            return names.replace('"', "") or "none"
    return "?"


def verify(target: Target, seed: int) -> tuple[dict, float]:
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "attnspec", "verify", target.path, "--seed",
                        str(seed), "--no-database", "--no-progress", "--report", str(report),
                        *target.args],
                       cwd=scratch, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=False, timeout=900)
        seconds = time.perf_counter() - start
        return json.loads(report.read_text()), seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", help="a markdown file whose sweep markers get the table")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--match", default="", help="only targets whose name holds one of "
                        "these comma-separated strings")
    args = parser.parse_args()
    import torch
    import triton

    rows, wrong = [], []
    for target in targets([m for m in args.match.split(",") if m]):
        for seed in (int(s) for s in args.seeds.split(",")):
            report, seconds = verify(target, seed)
            failed = sorted(p["id"] for p in report["properties"]
                            if p["verdict"] in ("fail", "error", "crash", "timeout"))
            want = target.expected
            mode = (report.get("triton") or {}).get("mode", "?")  # the header is the report's
            dtypes = ", ".join(d for ds in (report.get("dtypes") or {}).values() for d in ds)
            caught = (report["status"] == "pass" if want == "none" else
                      bool(set(want.split(", ")) & set(failed)))
            name = target.name
            if not caught:
                wrong.append(f"{name} seed {seed}: expected {want}, failed {failed}")
            rows.append(f"| `{name}` | {target.version} | {want} | {report['status']} "
                        f"| {', '.join(failed) or '-'} | {dtypes} | {mode} | {seed} "
                        f"| {seconds:.0f} s | {'yes' if caught else '**no**'} |")
            print(rows[-1], flush=True)
    table = "\n".join([
        f"Measured by `nox -s triton` on {time.strftime('%Y-%m-%d')} ({os.cpu_count()} CPUs, "
        f"torch {torch.__version__}, triton {triton.__version__}, default profile).",
        "",
        "| kernel | library | expected to fail | status | failed | dtypes | triton | seed | time "
        "| as expected |",
        "|---|---|---|---|---|---|---|---|---|---|", *rows])
    if args.write:
        doc = Path(args.write)
        text = doc.read_text()
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END)
        doc.write_text(f"{head}{BEGIN}\n{table}\n{END}{tail}")
    for line in wrong:
        print("NOT AS EXPECTED:", line, file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
