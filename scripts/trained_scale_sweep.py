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

`verify` has no option to scale the inputs (only `finite` draws scales, 1 or 4); a replay
JSON's `scale` does. `--input-scales 1,3,5` replays one fixed example per (subject, property,
dtype) on the unwrapped built-ins at each input scale instead, and tabulates those verdicts.
"""

from __future__ import annotations

import argparse
import importlib
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


ROPE = {"kind": "rope", "theta": 10000.0, "fraction": 1.0, "interleaved": False}
# One example spec each, inside what the subject supports; None: a protocol v1 subject.
EXAMPLE_SPECS: dict[str, dict[str, Any] | None] = {
    "reference": None, "reference_sdpa": None, "torch_mha": None, "sdpa": None, "hf_gpt2": None,
    "variants": {"n_embd": 16, "n_head": 4, "n_kv_head": 2, "positions": ROPE},
    "hf_llama": {"n_embd": 16, "n_head": 4, "n_kv_head": 2, "positions": ROPE},
    "hf_mistral": {"n_embd": 16, "n_head": 4, "n_kv_head": 2, "positions": ROPE, "bias": False},
    "hf_bloom": {"n_embd": 16, "n_head": 4, "positions": {"kind": "alibi"}},
    "sdpa_lower_right": {"n_embd": 16, "n_head": 4, "n_kv_head": 2}}
V1_PROPERTIES = ("oracle", "oracle_grad", "prefix")
V2_PROPERTIES = V1_PROPERTIES + ("decode", "padding_invariance", "relative_position")


def replay_sweep(args: argparse.Namespace, subjects: list[str], scales: list[float]) -> str:
    rows = []
    total = 0.0
    dtypes = (args.dtype or "float32,bfloat16").split(",")
    for name in subjects:
        spec = EXAMPLE_SPECS.get(name)
        base = importlib.import_module(f"attnspec.subjects.{name}")
        hooks = {"decode": "decode", "padding_invariance": "padded", "relative_position": "shifted"}
        props = [p for p in (V1_PROPERTIES if spec is None else V2_PROPERTIES)
                 if (args.only is None or p in args.only.split(","))
                 and hasattr(base, hooks.get(p, "build"))]
        cells = []
        for scale in scales:
            bad = []
            for prop in props:
                if prop == "relative_position" and (spec or {}).get("positions") != ROPE:
                    continue
                for dtype in dtypes:
                    example: dict[str, Any] = {"B": 2, "T": 9, "C": 16, "H": 4, "dtype": dtype,
                                               "device": "cpu", "seed": args.seed,
                                               "cuts": [1, 4, 7], "scale": scale}
                    if spec is not None:
                        example["spec"] = spec
                    report = Path(tempfile.mkdtemp(prefix="attnspec-replay-")) / "r.json"
                    command = [sys.executable, "-m", "attnspec", "verify",
                               f"attnspec.subjects.{name}", "--only", prop, "--no-progress",
                               "--no-database", "--report", str(report),
                               "--replay", json.dumps(example)]
                    start = time.monotonic()
                    done = subprocess.run(command, capture_output=True, text=True)
                    total += time.monotonic() - start
                    if not report.exists():
                        bad.append(f"{prop} {dtype}: ERROR {done.stderr[-100:]!r}")
                        continue
                    result = json.loads(report.read_text())
                    for p in result["properties"]:
                        if p["id"] == prop and p["verdict"] not in ("pass", "skip"):
                            bad.append(f"**{prop}** {dtype} {p['verdict']}: "
                                       f"{fmt(p.get('measured'))} vs {fmt(p.get('allowed'))}")
            cells.append("<br>".join(bad) or "all pass")
            print(f"{name} input x{scale}: {len(bad)} not passing", file=sys.stderr, flush=True)
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    head = [f"input x scale (replay JSON `scale`), one example per property and dtype: B=2 T=9 "
            f"C=16 H=4 cuts [1, 4, 7], seed {args.seed}; {total:.0f} s in all", "",
            "| subject | " + " | ".join(f"input x{s}" for s in scales) + " |",
            "|---|" + "---|" * len(scales)]
    return "\n".join(head + rows)


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
    parser.add_argument("--input-scales", default=None,
                        help="replay fixed examples at these input scales instead (1,3,5)")
    args = parser.parse_args()
    subjects = [s for s in args.subjects.split(",") if s]
    if args.input_scales:
        table = replay_sweep(args, subjects, [float(f) for f in args.input_scales.split(",")])
        print(table)
        if args.out:
            args.out.write_text(table + "\n")
        return 0
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
