"""`nox -s distributed`'s second half: tp_equivalence and cp_equivalence over 2 and 4 ranks on
every correct sharded subject (they must pass) and every sharded catalogue entry (it must fail).

    python scripts/sharded_check.py [--examples 20] [--seed 0] [--world-sizes 2,4]

Prints one line per (subject, property) and exits 1 if any verdict is not the expected one.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import attnspec

ROOT = Path(__file__).resolve().parents[1]
GOOD = ("attnspec.subjects.reference_tp", "attnspec.subjects.reference_ring",
        str(ROOT / "tests" / "good" / "sharded_gather.py"),
        str(ROOT / "tests" / "good" / "_sharded_rounding.py"),
        str(ROOT / "tests" / "good" / "_sharded_wrapped.py"))
BROKEN = tuple(str(p) for p in sorted((ROOT / "tests" / "broken").glob("*.py"))
               if p.stem.startswith(("tp_", "ring_")))
SHARDED = ("tp_equivalence", "cp_equivalence")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--world-sizes", default="2,4")
    args = parser.parse_args(argv)
    worlds = tuple(int(w) for w in args.world_sizes.split(","))
    bad = 0
    for target in (*GOOD, *BROKEN):
        want_pass = target in GOOD
        start = time.monotonic()
        report = attnspec.verify(target, only=SHARDED, max_examples=args.examples,
                                 seed=args.seed, world_sizes=worlds, database=False)
        ran = [p for p in report.properties if p.verdict != "skip"]
        ok = bool(ran) and (all(p.verdict == "pass" for p in ran) if want_pass
                            else any(p.verdict == "fail" for p in ran))
        bad += not ok
        name = Path(target).stem if target.endswith(".py") else target.rsplit(".", 1)[1]
        for p in ran:
            print(f"{'ok ' if ok else 'BAD'} {name:28s} {p.id:15s} {p.verdict:7s} "
                  f"{p.examples:3d} ex {p.seconds:6.1f} s  {p.message[:120]}", flush=True)
        print(f"    ({time.monotonic() - start:.0f} s)", flush=True)
    print(f"sharded check: {bad} unexpected verdict{'s' * (bad != 1)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
