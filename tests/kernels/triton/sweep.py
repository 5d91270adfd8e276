"""`nox -s triton`: `attnspec verify` on every Triton kernel here (good/ and broken/; the
adapters under attnspec.subjects that are Triton's, once there are any), default profile, seed
0, and the table of what each gave written to docs/triton.md between its markers.

    python tests/kernels/triton/sweep.py [--write docs/triton.md] [--seeds 0,1,2]
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

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
BEGIN, END = "<!-- sweep: begin -->", "<!-- sweep: end -->"


# The library adapters that are Triton's, by the module each needs (skipped where it is absent).
ADAPTERS = {"attnspec.subjects.sglang_prefill": "sglang"}


def targets() -> list[Path | str]:
    import importlib.util

    found: list[Path | str] = [*sorted((HERE / "good").glob("*.py")),
                               *sorted((HERE / "broken").glob("*.py"))]
    for adapter, library in ADAPTERS.items():
        if importlib.util.find_spec(library) is not None:
            found.append(adapter)
        else:
            print(f"{adapter}: skipped, {library} is not installed", file=sys.stderr)
    return found


def expected(path: Path | str) -> str:
    if isinstance(path, str):
        return "none"  # a library's own kernel: conforms, or a finding (docs/findings.md)
    for line in path.read_text().splitlines():
        if line.startswith("EXPECTED"):
            names = line.split("{", 1)[1].split("}")[0] if "{" in line else ""
            return names.replace('"', "") or "none"
    return "?"


def verify(path: Path | str, seed: int) -> tuple[dict, float]:
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "attnspec", "verify", str(path), "--seed",
                        str(seed), "--no-database", "--no-progress", "--report", str(report)],
                       cwd=scratch, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=False, timeout=900)
        seconds = time.perf_counter() - start
        return json.loads(report.read_text()), seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", help="a markdown file whose sweep markers get the table")
    parser.add_argument("--seeds", default="0")
    args = parser.parse_args()
    import torch
    import triton

    rows, wrong = [], []
    for path in targets():
        for seed in (int(s) for s in args.seeds.split(",")):
            report, seconds = verify(path, seed)
            failed = sorted(p["id"] for p in report["properties"]
                            if p["verdict"] in ("fail", "error", "crash", "timeout"))
            want = expected(path)
            mode = (report.get("triton") or {}).get("mode", "?")  # the header is the report's
            dtypes = ", ".join(d for ds in (report.get("dtypes") or {}).values() for d in ds)
            caught = (report["status"] == "pass" if want == "none" else
                      bool(set(want.split(", ")) & set(failed)))
            name = path if isinstance(path, str) else f"{path.parent.name}/{path.name}"
            if not caught:
                wrong.append(f"{name} seed {seed}: expected {want}, failed {failed}")
            rows.append(f"| `{name}` | {want} | {report['status']} "
                        f"| {', '.join(failed) or '-'} | {dtypes} | {mode} | {seed} "
                        f"| {seconds:.0f} s | {'yes' if caught else '**no**'} |")
            print(rows[-1], flush=True)
    table = "\n".join([
        f"Measured by `nox -s triton` on {time.strftime('%Y-%m-%d')} ({os.cpu_count()} CPUs, "
        f"torch {torch.__version__}, triton {triton.__version__}, default profile).",
        "",
        "| kernel | expected to fail | status | failed | dtypes | triton | seed | time | as "
        "expected |",
        "|---|---|---|---|---|---|---|---|---|", *rows])
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
