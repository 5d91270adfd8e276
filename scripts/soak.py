"""Run the soak behind docs/soak.md: every built-in subject and the batch-position-rounding
double, in every CPU default dtype, with several seeds. One report per (subject, seed) goes to
docs/soak/NAME.seedN.json; `scripts/soak_table.py` sums them per subject.

    python scripts/soak.py [--examples 500] [--seeds 0,1,2,3] [--out docs/soak] [--only IDS]
                           [NAME ...]

docs/soak/inference/ holds the soak of the inference properties alone (--only decode,
padding_invariance,masked_rows,causal_corner) on the subjects with hooks; docs/soak/sharded/
that of tp_equivalence and cp_equivalence on the sharded double that rounds by batch position
(`sharded_rounding`, by name only).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from attnspec.subjects import BUILTIN

ROOT = Path(__file__).resolve().parents[1]
DOUBLE = "batch_position_rounding"
TARGETS = {**{name: f"attnspec.subjects.{name}" for name in BUILTIN},
           DOUBLE: str(ROOT / "tests" / "good" / f"{DOUBLE}.py"),
           f"{DOUBLE}_v2": str(ROOT / "tests" / "good" / f"{DOUBLE}_v2.py"),
           "sharded_rounding": str(ROOT / "tests" / "good" / "_sharded_rounding.py"),
           # Trained size (q and k x4; ATTNSPEC_TRAINED_FACTOR=8 for x8), by name only.
           "trained_scale_v2": str(ROOT / "tests" / "good" / "trained_scale_v2.py")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"subjects to soak (default all: {', '.join(TARGETS)})")
    parser.add_argument("--examples", type=int, default=500, help="per property and seed")
    parser.add_argument("--seeds", default="0,1,2,3")
    parser.add_argument("--out", default=str(ROOT / "docs" / "soak"))
    parser.add_argument("--only", default=None, help="property ids (default: all)")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in TARGETS]
    if unknown:
        parser.error(f"unknown subject {', '.join(unknown)}; choose from {', '.join(TARGETS)}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    worst = 0
    only = ["--only", args.only] if args.only else []
    for name in args.names or [n for n in TARGETS if not n.endswith(("_v2", "sharded_rounding"))]:
        for seed in (int(s) for s in args.seeds.split(",")):
            start = time.monotonic()
            done = subprocess.run(
                [sys.executable, "-m", "attnspec", "verify", TARGETS[name], "--max-examples",
                 str(args.examples), "--dtype", "float32,float64,bfloat16", "--no-database",
                 "--seed", str(seed), "--no-progress", "--report",
                 str(Path(args.out) / f"{name}.seed{seed}.json"), *only], check=False)
            print(f"soak: {name} seed {seed}: exit {done.returncode} in "
                  f"{time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)
            worst = max(worst, done.returncode)
    return worst


if __name__ == "__main__":
    sys.exit(main())
