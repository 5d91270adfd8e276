"""Section 6: sharded examples. How long ranks take to start, and one tp_equivalence or
cp_equivalence example once they are up, on the built-in sharded subjects."""

from __future__ import annotations

import time
from typing import Any

from bench_common import Config, median, quartiles, status, table

TP_GOAL_S = 0.5  # one tp_equivalence example once the ranks are up, on 2 idle cores
CP_GOAL_S = 1.0  # one cp_equivalence example likewise
CASES = (("tp_equivalence", "attnspec.subjects.reference_tp"),
         ("cp_equivalence", "attnspec.subjects.reference_ring"))


def sharded(cfg: Config) -> dict[str, Any]:
    """Per (property, world): the first example (ranks starting) and the median of the rest,
    on one fixed example (B=2, T=16, C=64, H=8, G=4, RoPE, float32)."""
    from attnspec import AttentionSpec, RoPE
    from attnspec.common.options import RunOptions
    from attnspec.properties.base import Example
    from attnspec.session.engine import Session

    if cfg.device != "cpu":
        return {"skipped": "sharded examples run on CPU ranks (gloo) only"}
    repeats = cfg.pick(15, 3)
    spec = AttentionSpec(64, 8, n_kv_head=4, positions=RoPE())
    rows, goals, data = [], [], {}
    for prop, target in CASES:
        for world in (2, 4):
            ex = Example(B=2, T=16, C=64, H=8, dtype="float32", seed=1, spec=spec, world=world)
            with Session(target, RunOptions(world_sizes=(world,), database=False)) as session:
                times, verdicts = [], set()
                for _ in range(repeats + 1):
                    start = time.perf_counter()
                    verdicts.add(session.replay(prop, ex).verdict)
                    times.append(time.perf_counter() - start)
            first, rest = times[0], times[1:]
            q1, q3 = quartiles(rest)
            cfg.log(f"  {prop} world={world}: first {first:.2f} s, then {median(rest):.3f} s")
            data[f"{prop}/{world}"] = {"first_s": first, "seconds": rest,
                                       "verdicts": sorted(verdicts)}
            rows.append([prop, target.rsplit(".", 1)[1], str(world), f"{first:.2f}",
                         f"{median(rest):.3f} ({q1:.3f}–{q3:.3f})", ", ".join(sorted(verdicts))])
            goal = TP_GOAL_S if prop == "tp_equivalence" else CP_GOAL_S
            goals.append({"goal": f"one {prop} example within {goal:g} s once the ranks are up "
                                  f"(world {world})",
                          "measured": f"{median(rest):.3f} s (median of {len(rest)})",
                          "status": status(median(rest) <= goal)})
    tables = [table(
        f"One example, replayed {repeats + 1} times in one session: B=2, T=16, C=64, H=8, "
        "G=4, RoPE, float32 (the unsharded run in the worker and the sharded one on the ranks, "
        "at once, then judging)",
        ["property", "subject", "world", "first s (ranks start)", "then s, median (q1–q3)",
         "verdicts"], rows)]
    return {"tables": tables, "goals": goals, "data": data}
