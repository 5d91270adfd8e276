"""Section 12: a default `attnspec verify hf:TYPE@BACKEND` of the generic transformers adapter
(issue goal: one model type, one backend, default profile, <= 15 s on 2 idle cores).

`python benchmarks/run.py --only hf_verify` (`--kernel-runs N` sets the runs, 3 by default).
The whole matrix (<= 45 min on 2 cores) is timed by scripts/hf_matrix.py itself: its header
in docs/transformers.md says how long the sweep took.
"""

from __future__ import annotations

from typing import Any

from bench_common import Config, median, status, table
from bench_kernels import _cli_once, _runs
from bench_verify import _rotated

HF_TARGETS = ("hf:llama@sdpa", "hf:llama@eager", "hf:gpt_neox@eager")
HF_VERIFY_GOAL_S = 15.0


def hf_verify(cfg: Config) -> dict[str, Any]:
    """Default verifies of three hf: TARGETs from the shell, interleaved."""
    runs = _runs(cfg)
    walls: dict[str, list[dict[str, Any]]] = {t: [] for t in HF_TARGETS}
    for r in range(runs):
        for target in _rotated(list(HF_TARGETS), r):
            cfg.log(f"  hf verify round {r + 1}/{runs}: {target}")
            walls[target].append(_cli_once(cfg, target))
    medians = {t: median([w["wall"] for w in ws]) for t, ws in walls.items()}
    bad = {t: sorted({w["exit"] for w in ws if w["exit"] != 0}) for t, ws in walls.items()}
    bad = {t: e for t, e in bad.items() if e}
    worst = max(medians.values())
    goal_ok = worst <= HF_VERIFY_GOAL_S and not bad if cfg.profile == "default" else None
    goals = [{"goal": f"default `attnspec verify hf:TYPE@BACKEND` within {HF_VERIFY_GOAL_S:g} s "
                      "on 2 idle cores",
              "measured": ", ".join(f"{t} {m:.1f} s" for t, m in medians.items())
              + f" (medians of {runs}, profile {cfg.profile})"
              + (f"; non-zero exits {bad}" if bad else ""),
              "status": status(goal_ok)}]
    tables = [table(f"`attnspec verify TARGET --profile {cfg.profile} --no-database --seed 0 "
                    f"--device {cfg.device}` from the shell: median of {runs} interleaved runs",
                    ["TARGET", "wall s (median)", "walls s", "exit"],
                    [[t, f"{medians[t]:.1f}", ", ".join(f"{w['wall']:.1f}" for w in ws),
                      ",".join(str(w["exit"]) for w in ws)] for t, ws in walls.items()])]
    data = {"medians_s": medians, "walls": {t: [w["wall"] for w in ws]
                                            for t, ws in walls.items()}}
    return {"tables": tables, "goals": goals, "data": data}
