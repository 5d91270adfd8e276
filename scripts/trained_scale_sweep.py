"""Run `attnspec verify` on the built-in subjects with their q and k projections scaled, as in a
trained model, and tabulate what fails.

attnspec's yardsticks are measured on its own small random weights (attention logits of std
~0.3); trained models have logits of std ~5. Each (subject, factor) gets a TARGET file in a
temporary folder that imports the built-in and overrides `build`: after the original build, the
q and k projections (weights and biases, so that q and k, and the logits by factor**2, scale
exactly) are multiplied by the factor in place. `export_weights` reads the module's parameters,
so the export stays consistent; the wrapper checks that by exporting before and after.

    python scripts/trained_scale_sweep.py --factors 1,4,8 --max-examples 10 --out sweep.md

Prints a markdown table (subject x factor: each property that does not pass, with measured vs
allowed) and writes the per-run JSON reports next to it (--keep DIR).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# The sharded ones (reference_tp, reference_ring) start 2-4 rank processes per example: opt in.
DEFAULT_SUBJECTS = ("reference", "reference_sdpa", "torch_mha", "sdpa", "hf_gpt2", "variants",
                    "hf_llama", "hf_mistral", "hf_bloom", "sdpa_lower_right")

WRAPPER = '''"""attnspec.subjects.{name}, q and k projections x {factor} (trained_scale_sweep)."""
import torch
from attnspec.subjects import {name} as _base
from attnspec.subjects.{name} import *  # noqa: F403  (PROTOCOL, VARIANTS, DTYPES, hooks...)

_FACTOR = {factor!r}
_NAMES = ("q_weight", "k_weight", "q_bias", "k_bias")


def _scale_bloom(module):
    # BLOOM's export copies (its fused rows are per head): scale the (H, 3, D, C) rows in place.
    attn, H = module.attn, module.n_head
    C = attn.hidden_size
    attn.query_key_value.weight.view(H, 3, C // H, C)[:, :2].mul_(_FACTOR)
    attn.query_key_value.bias.view(H, 3, C // H)[:, :2].mul_(_FACTOR)


def build(*args):
    module = _base.build(*args)
    if _FACTOR == 1:
        return module
    with torch.no_grad():
        before = {{k: v.detach().clone() for k, v in _base.export_weights(module).items()}}
        if {name!r} == "hf_bloom":
            _scale_bloom(module)
        else:
            for key, tensor in _base.export_weights(module).items():
                if key in _NAMES:
                    tensor.mul_(_FACTOR)  # exports are views of the parameters
        after = _base.export_weights(module)
        for key, old in before.items():
            want = old * _FACTOR if key in _NAMES else old
            if not torch.equal(after[key].detach(), want):
                raise RuntimeError(f"trained_scale_sweep: {{key}} of {name} did not scale "
                                   f"by {{_FACTOR}} (its export is a copy, not a view?)")
    return module
'''


def wrapper(folder: Path, name: str, factor: float) -> Path:
    path = folder / f"{name}_x{str(factor).replace('.', 'p')}.py"
    path.write_text(WRAPPER.format(name=name, factor=factor))
    return path


def run(target: Path, report: Path, args: argparse.Namespace) -> tuple[dict[str, Any], float]:
    command = [sys.executable, "-m", "attnspec", "verify", str(target), "--report", str(report),
               "--no-progress", "--no-database", "--seed", str(args.seed)]
    command += ["--max-examples", str(args.max_examples)] if args.max_examples else [
        "--profile", args.profile]
    for flag in ("only", "skip", "dtype", "max_seq", "max_width", "max_heads"):
        value = getattr(args, flag)
        if value is not None:
            command += [f"--{flag.replace('_', '-')}", str(value)]
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.monotonic() - start
    if not report.exists():
        return {"status": "error", "error": (done.stderr or done.stdout)[-400:],
                "properties": []}, seconds
    data: dict[str, Any] = json.loads(report.read_text())
    return data, seconds


def fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.3g}"


def cell(data: dict[str, Any]) -> str:
    if data.get("status") == "error":
        return f"ERROR: {str(data.get('error'))[:120]}".replace("|", "/").replace("\n", " ")
    bad = [p for p in data["properties"] if p["verdict"] not in ("pass", "skip")]
    if not bad:
        return "all pass"
    parts = []
    for p in bad:
        ex = p.get("counterexample") or {}
        where = f" {ex.get('dtype', '')} C={ex.get('C', '')} H={ex.get('H', '')}" if ex else ""
        parts.append(f"**{p['id']}** {p['verdict']}: {fmt(p.get('measured'))} vs "
                     f"{fmt(p.get('allowed'))}{where}")
    return "<br>".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subjects", default=",".join(DEFAULT_SUBJECTS))
    parser.add_argument("--factors", default="1,4,8")
    parser.add_argument("--profile", default="smoke")
    parser.add_argument("--max-examples", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default=None)
    parser.add_argument("--skip", default=None)
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--max-seq", type=int, default=None)
    parser.add_argument("--max-width", type=int, default=None)
    parser.add_argument("--max-heads", type=int, default=None)
    parser.add_argument("--keep", type=Path, default=None, help="folder for TARGETs and reports")
    parser.add_argument("--out", type=Path, default=None, help="write the markdown table here")
    args = parser.parse_args()
    subjects = [s for s in args.subjects.split(",") if s]
    factors = [float(f) if "." in f else int(f) for f in args.factors.split(",") if f]
    folder = args.keep or Path(tempfile.mkdtemp(prefix="attnspec-sweep-"))
    folder.mkdir(parents=True, exist_ok=True)
    rows: dict[str, dict[float, str]] = {}
    total = 0.0
    for name in subjects:
        rows[name] = {}
        for factor in factors:
            target = wrapper(folder, name, factor)
            data, seconds = run(target, target.with_suffix(".json"), args)
            total += seconds
            rows[name][factor] = cell(data)
            print(f"{name} x{factor}: {data.get('status')} ({seconds:.0f} s)", file=sys.stderr,
                  flush=True)
    budget = f"--max-examples {args.max_examples}" if args.max_examples else \
        f"--profile {args.profile}"
    lines = [f"q, k projections x factor (logits x factor^2); attnspec verify {budget} "
             f"--seed {args.seed}; {total:.0f} s in all; reports in {folder}", "",
             "| subject | " + " | ".join(f"x{f}" for f in factors) + " |",
             "|---|" + "---|" * len(factors)]
    lines += [f"| {name} | " + " | ".join(rows[name][f] for f in factors) + " |"
              for name in subjects]
    table = "\n".join(lines)
    print(table)
    if args.out:
        args.out.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
