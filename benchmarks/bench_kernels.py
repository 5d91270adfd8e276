"""Sections 8 to 11: the kernel protocol (PROTOCOL = "kernel") - a default verify of
attnspec.subjects.kernel_sdpa, time to reject each broken kernel of tests/kernels/broken, one
oracle check at (B, H, T, D) = (2, 8, 256, 64), and a cProfile of one default verify.

`python benchmarks/run.py --only kernel_verify,kernel_broken,kernel_oracle,kernel_profile`
(add `--kernel-runs N` for the number of verify runs, 3 by default).
"""

from __future__ import annotations

import cProfile
import glob
import io
import os
import pstats
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from bench_common import (
    ROOT,
    Config,
    Variant,
    interleave,
    median,
    ms,
    paired_ratio,
    ratio_text,
    status,
    summary,
    table,
)
from bench_verify import _expected, _rotated, _verify_once

KERNEL_TARGET = "attnspec.subjects.kernel_sdpa"
KERNEL_VERIFY_GOAL_S = 5.0  # a default `attnspec verify` of kernel_sdpa, on 2 idle cores
KERNEL_REJECT_GOAL_S = 3.0  # the median time to reject a broken kernel (exitfirst)
ORACLE_GOAL_S = 0.1  # "milliseconds": one oracle check at (2, 8, 256, 64) under 100 ms
ORACLE_SHAPE = {"B": 2, "H": 8, "G": 8, "Tq": 256, "Tk": 256, "D": 64}
QUICK_BROKEN = 4
PROFILE_TOP = 25


def _runs(cfg: Config) -> int:
    return cfg.kernel_runs or cfg.pick(3, 1)


def _cli_once(cfg: Config, target: str, *extra: str,
              env: dict[str, str] | None = None) -> dict[str, Any]:
    """One `attnspec verify TARGET` from a shell, as a user runs it: interpreter, imports,
    the supervised worker; no database."""
    command = [sys.executable, "-m", "attnspec", "verify", target, "--profile", cfg.profile,
               "--no-database", "--seed", "0", "--device", cfg.device, "--no-progress", *extra]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False,
                          env=None if env is None else {**os.environ, **env})
    return {"wall": time.perf_counter() - start, "exit": done.returncode,
            "stderr_tail": done.stderr[-1500:] if done.returncode not in (0, 1) else ""}


# ---- section 8 ------------------------------------------------------------------------------


def kernel_verify(cfg: Config) -> dict[str, Any]:
    """A default verify of kernel_sdpa, isolated: from the shell and through attnspec.verify()."""
    runs = _runs(cfg)
    cli: list[dict[str, Any]] = []
    cli_one: list[dict[str, Any]] = []  # the same with one OpenMP thread in every process
    api: list[dict[str, Any]] = []
    for r in range(runs):
        for which in _rotated(["cli", "api", "cli_one_thread"], r):
            cfg.log(f"  kernel verify round {r + 1}/{runs}: {KERNEL_TARGET} ({which})")
            if which == "cli":
                cli.append(_cli_once(cfg, KERNEL_TARGET))
            elif which == "cli_one_thread":
                cli_one.append(_cli_once(cfg, KERNEL_TARGET, env={"OMP_NUM_THREADS": "1"}))
            else:
                api.append(_verify_once(KERNEL_TARGET, cfg))
    bad = [c for c in cli + cli_one if c["exit"] != 0]
    cli_wall = median([c["wall"] for c in cli])
    one_wall = median([c["wall"] for c in cli_one])
    one_ratio = paired_ratio([c["wall"] for c in cli_one], [c["wall"] for c in cli])
    done = [a for a in api if "error" not in a]
    if not done:
        raise RuntimeError(f"verify({KERNEL_TARGET!r}) failed to load: {api[0]['error']}")
    api_wall = median([a["wall"] for a in done])
    outside = median([a["wall"] - sum(p["seconds"] for p in a["properties"].values())
                      for a in done])
    props = done[0]["properties"]
    seconds = {pid: median([a["properties"][pid]["seconds"] for a in done]) for pid in props}
    goal_ok = (max(cli_wall, api_wall) <= KERNEL_VERIFY_GOAL_S and not bad
               if cfg.profile == "default" else None)
    goals = [{"goal": f"default `attnspec verify {KERNEL_TARGET}` within "
                      f"{KERNEL_VERIFY_GOAL_S:g} s on 2 idle cores",
              "measured": f"`attnspec verify` {cli_wall:.1f} s from the shell, "
                          f"`attnspec.verify()` {api_wall:.1f} s (medians of {runs}, profile "
                          f"{cfg.profile})" + (f"; {len(bad)} CLI runs exited "
                                               f"{sorted({c['exit'] for c in bad})}"
                                               if bad else ""),
              "status": status(goal_ok)}]
    rows = [[pid, props[pid]["verdict"], str(props[pid]["examples"]), f"{seconds[pid]:.2f}",
             "" if props[pid]["forwards_per_example"] is None
             else f"{props[pid]['forwards_per_example']:g}"]
            for pid in sorted(props, key=seconds.__getitem__, reverse=True)]
    rows.append(["**sum**", "", str(sum(p["examples"] for p in props.values())),
                 f"{sum(seconds.values()):.1f}", ""])
    tables = [
        table(f"`attnspec verify {KERNEL_TARGET} --profile {cfg.profile} --no-database --seed 0 "
              f"--device {cfg.device}` and attnspec.verify() of the same, isolated: median of "
              f"{runs} interleaved runs",
              ["how", "wall s (median)", "walls s", "outside properties s"],
              [["command line (a fresh interpreter)", f"{cli_wall:.1f}",
                ", ".join(f"{c['wall']:.1f}" for c in cli), ""],
               ["attnspec.verify() in this process (worker isolated)", f"{api_wall:.1f}",
                ", ".join(f"{a['wall']:.1f}" for a in done), f"{outside:.1f}"],
               ["command line, OMP_NUM_THREADS=1 (runner and worker on one torch thread)",
                f"{one_wall:.1f} (ratio to the default {ratio_text(one_ratio, 2)})",
                ", ".join(f"{c['wall']:.1f}" for c in cli_one), ""]],
              "'outside properties' is the wall less the report's per-property seconds: the "
              "worker's start (its import of torch) and stop. The OMP_NUM_THREADS=1 row is "
              "not what users get: it shows what torch's default thread count costs on this "
              "machine (the worker calls the kernel with torch's default threads; the runner "
              "judges with one)."),
        table("Seconds per property (median, the report's own timing, quick pass included)",
              ["property", "verdict", "examples", "s", "calls/example"], rows),
    ]
    data = {"command_line_s": cli_wall, "command_line_walls": [c["wall"] for c in cli],
            "command_line_exits": [c["exit"] for c in cli], "api_s": api_wall,
            "command_line_one_thread_s": one_wall,
            "command_line_one_thread_walls": [c["wall"] for c in cli_one],
            "one_thread_over_default": one_ratio,
            "api_walls": [a["wall"] for a in done], "outside_properties_s": outside,
            "property_seconds": seconds, "properties": props, "ok": done[0]["ok"]}
    return {"tables": tables, "goals": goals, "data": data}


# ---- section 9 ------------------------------------------------------------------------------


def kernel_broken(cfg: Config) -> dict[str, Any]:
    """Time to reject each broken kernel (exitfirst, as section 4 times the module catalogue)."""
    paths = sorted(p for p in glob.glob(os.path.join(ROOT, "tests", "kernels", "broken", "*.py"))
                   if not os.path.basename(p).startswith("_"))
    if not paths:
        return {"skipped": "no tests/kernels/broken/*.py found"}
    found = len(paths)
    if cfg.quick:
        paths = paths[:QUICK_BROKEN]
    rounds = cfg.kernel_runs or 1
    runs: dict[str, list[dict[str, Any]]] = {p: [] for p in paths}
    for r in range(rounds):
        for path in _rotated(paths, r):
            rel = os.path.relpath(path, ROOT)
            cfg.log(f"  kernel broken round {r + 1}/{rounds}: {rel}")
            runs[path].append(_verify_once(rel, cfg, exitfirst=True))
    rows, data, walls = [], {}, []
    rejected = by_expected = 0
    for path in paths:
        name = os.path.basename(path)
        expected = _expected(path) or []
        errors = [run["error"] for run in runs[path] if "error" in run]
        if errors:
            data[name] = {"error": errors[0], "expected": expected}
            rows.append([name, ", ".join(expected), "load error: " + errors[0][:80], "", "",
                         "MISS"])
            continue
        wall = median([run["wall"] for run in runs[path]])
        walls.append(wall)
        first = runs[path][0]["first_rejection"]
        is_rejected = not runs[path][0]["ok"]
        in_expected = bool(first) and first["property"] in expected
        rejected += is_rejected
        by_expected += in_expected
        data[name] = {"expected": expected, "exitfirst_wall_s": wall,
                      "exitfirst_walls": [run["wall"] for run in runs[path]],
                      "first_failing_property": first["property"] if first else None,
                      "first_verdict": first["verdict"] if first else None,
                      "first_rejection_s": first["seconds"] if first else None,
                      "rejected": is_rejected, "by_an_expected_property": in_expected}
        rows.append([name, ", ".join(expected),
                     f"{first['property']} ({first['verdict']})" if first else "NOT REJECTED",
                     f"{wall:.1f}", "yes" if in_expected else "no", status(is_rejected)])
    n = len(paths)
    middle = median(walls) if walls else float("nan")
    quick_note = "" if not cfg.quick else f" (quick: first {n} of {found} kernels)"
    goals = [{"goal": f"each broken kernel rejected, median within {KERNEL_REJECT_GOAL_S:g} s"
                      f"{quick_note}",
              "measured": f"{rejected}/{n} rejected, {by_expected} first by an EXPECTED "
                          f"property (exitfirst wall: median {middle:.1f} s, max "
                          f"{max(walls) if walls else float('nan'):.1f} s, profile "
                          f"{cfg.profile})",
              "status": status(rejected == n and middle <= KERNEL_REJECT_GOAL_S
                               if cfg.profile == "default" else None)}]
    tables = [table(
        f"Time to reject tests/kernels/broken/* (verify(path, profile={cfg.profile!r}, "
        f"database=False, seed=0, device={cfg.device!r}, exitfirst=True)): {n} of {found} "
        f"kernels, median of {rounds}",
        ["kernel", "EXPECTED (the module's own list)", "first failing property",
         "exitfirst wall s", "first failure in EXPECTED", "rejected"], rows,
        "As section 4 times the module catalogue: a full default verify, as a user runs it, "
        "stopped at the first property that does not pass; the wall runs from the call until "
        "it returns and includes starting and stopping the worker process. The first failure "
        "comes from verify's quick first pass (a few examples of every property) unless that "
        "pass misses the bug.")]
    data["median_exitfirst_s"] = middle
    return {"tables": tables, "goals": goals, "data": data}


# ---- section 10 -----------------------------------------------------------------------------


def _threads(fn: Callable[[], object], n: int, default: int) -> Variant:
    """`fn` timed with n torch threads, the default restored after (untimed)."""
    import torch

    return Variant(fn, enter=lambda: torch.set_num_threads(n),
                   exit=lambda: torch.set_num_threads(default))


def _oracle_variants(session: Any, ex: Any, dev: list[Any], qkv: tuple[Any, Any, Any],
                     corner: str, golden: Any, default: int) -> dict[str, Variant | Any]:
    import torch.nn.functional as F

    from attnspec.properties.kernel import checks, judging

    q, k, v = qkv
    return {
        "check": _threads(lambda: session.replay("oracle", ex), 1, default),
        "check_default_threads": _threads(lambda: session.replay("oracle", ex), default,
                                          default),
        "kernel": _threads(lambda: F.scaled_dot_product_attention(*dev, is_causal=True), 1,
                           default),
        "reference": _threads(lambda: checks._golden(ex, q, k, v, corner), 1, default),
        "yardstick": _threads(lambda: judging.Yardstick(ex, q, k, v, corner, golden)["o"], 1,
                              default),
    }


def kernel_oracle(cfg: Config) -> dict[str, Any]:
    """One oracle check of kernel_sdpa at (2, 8, 256, 64), in process: the whole check (the
    kernel call, the float64 reference, the yardstick, the judging) against its pieces."""
    import torch

    from attnspec.common.options import RunOptions
    from attnspec.properties import kernel as kp
    from attnspec.properties.kernel import checks
    from attnspec.session.engine import Session
    from attnspec.subjects import kernel_sdpa

    dtypes = ("float32", "bfloat16") if cfg.device == "cpu" else ("float32", "bfloat16",
                                                                  "float16")
    rounds = cfg.pick(31, 5)
    default_threads = torch.get_num_threads()
    rows, data = [], {}
    options = RunOptions(device=cfg.device, profile="default", database=False, seed=0)
    with Session(kernel_sdpa, options, isolate=False) as session:
        for dtype in dtypes:
            ex = kp.KernelExample(**ORACLE_SHAPE, dtype=dtype, device=cfg.device, seed=0,
                                  scale=1.0)
            q, k, v = kp.inputs(ex)
            dev = [t.to(cfg.device) for t in (q, k, v)]
            corner = session.conventions.causal if session.conventions else "top_left"
            golden = checks._golden(ex, q, k, v, corner)
            first = session.replay("oracle", ex)
            if first.verdict != "pass":
                raise RuntimeError(f"oracle on {ex.describe()}: {first.verdict}: "
                                   f"{first.message}")
            variants = _oracle_variants(session, ex, dev, (q, k, v), corner, golden,
                                        default_threads)
            samples, _ = interleave(variants, rounds=rounds, target_s=0.0, warmup=2,
                                    sync=cfg.sync)
            entry = {name: summary(s) for name, s in samples.items()}
            entry["check_over_kernel"] = paired_ratio(samples["check"], samples["kernel"])
            entry["check_over_reference"] = paired_ratio(samples["check"], samples["reference"])
            entry["default_threads_over_one"] = paired_ratio(samples["check_default_threads"],
                                                             samples["check"])
            data[dtype] = entry
            rows.append([dtype, ms(entry["check"]["median"]), ms(entry["kernel"]["median"]),
                         ms(entry["reference"]["median"]), ms(entry["yardstick"]["median"]),
                         ratio_text(entry["check_over_kernel"], 1),
                         ratio_text(entry["check_over_reference"], 2),
                         f"{ms(entry['check_default_threads']['median'])} ("
                         f"{ratio_text(entry['default_threads_over_one'], 2)})"])
    worst = max(data[d]["check"]["median"] for d in dtypes)
    goals = [{"goal": f"one oracle check at (B, H, T, D) = (2, 8, 256, 64) takes milliseconds "
                      f"(under {ORACLE_GOAL_S * 1e3:g} ms)",
              "measured": f"{worst * 1e3:.1f} ms at most over {', '.join(dtypes)} (median of "
                          f"{rounds}, one torch thread as the runner judges)",
              "status": status(worst <= ORACLE_GOAL_S)}]
    tables = [table(
        f"One oracle check of kernel_sdpa, (B, H, G, Tq, Tk, D) = (2, 8, 8, 256, 256, 64), "
        f"causal, seed 0, inputs x1, on {cfg.device}, in process (isolate=False), one torch "
        f"thread: median ms of {rounds} interleaved rounds",
        ["dtype", "whole check ms", "kernel call alone ms (SDPA)",
         "float64 reference ms", "yardstick ms", "check / kernel call (IQR)",
         "check / reference (IQR)",
         f"whole check at torch's default {default_threads} threads ms (ratio to 1 thread)"],
        rows,
        "'whole check' is Session.replay('oracle', example): draw the inputs, call the kernel "
        "(through the in-process executor: poisoned outputs, alias and layout checks), the "
        "float64 reference, the yardstick (the dtype's own error: the reference again in the "
        "dtype and reordered), and judging. The yardstick column includes its own reference "
        "runs in the low precision. One thread is what the isolated runner judges with "
        "(Session._judging); the last column is the same check with torch's default thread "
        "count, interleaved, which on a shared 2-core machine pays for OpenMP's threads "
        "waiting on each other.")]
    return {"tables": tables, "goals": goals, "data": data}


# ---- section 11 -----------------------------------------------------------------------------


def _top(stats: pstats.Stats, key: str, n: int) -> list[dict[str, Any]]:
    stats.sort_stats(key)
    out = []
    for func in stats.fcn_list[:n]:  # type: ignore[attr-defined]
        cc, nc, tt, ct, _ = stats.stats[func]  # type: ignore[attr-defined]
        filename, line, name = func
        short = filename
        for marker in ("site-packages/", "src/", "lib/python"):
            if marker in filename:
                short = filename.split(marker, 1)[1]
                break
        out.append({"function": f"{short}:{line}({name})", "calls": nc, "tottime_s": tt,
                    "cumtime_s": ct})
    return out


def _profiled(fn: Callable[[], Any]) -> tuple[Any, float, pstats.Stats]:
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    try:
        result = fn()
    finally:
        profiler.disable()
    return result, time.perf_counter() - start, pstats.Stats(profiler, stream=io.StringIO())


def _rows(entries: list[dict[str, Any]], total: float) -> list[list[str]]:
    return [[e["function"], str(e["calls"]), f"{e['tottime_s']:.2f}", f"{e['cumtime_s']:.2f}",
             f"{100 * e['tottime_s'] / total:.1f}"] for e in entries]


def kernel_profile(cfg: Config) -> dict[str, Any]:
    """cProfile of one default verify of kernel_sdpa: in process (isolate=False) with one
    torch thread, so the kernel calls, the references and Hypothesis's drawing show in one
    profile; then the runner's side of an isolated verify (the CLI's way)."""
    import torch

    import attnspec
    from attnspec.subjects import kernel_sdpa

    default_threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the isolated runner judges; two threads on a shared box thrash
    try:
        report, wall, stats = _profiled(lambda: attnspec.verify(
            kernel_sdpa, profile=cfg.profile, database=False, seed=0, device=cfg.device,
            isolate=False))
    finally:
        torch.set_num_threads(default_threads)
    iso_report, iso_wall, iso_stats = _profiled(lambda: attnspec.verify(
        KERNEL_TARGET, profile=cfg.profile, database=False, seed=0, device=cfg.device))
    by_tottime = _top(stats, "tottime", PROFILE_TOP)
    by_cumtime = [f for f in _top(stats, "cumulative", 300)
                  if "attnspec/" in f["function"]][:PROFILE_TOP]
    runner = _top(iso_stats, "tottime", 15)
    total = sum(v[2] for v in stats.stats.values())  # type: ignore[attr-defined]
    iso_total = sum(v[2] for v in iso_stats.stats.values())  # type: ignore[attr-defined]
    headers = ["function", "calls", "own s (tottime)", "with callees s (cumtime)", "own % of all"]
    tables = [
        table(f"cProfile of attnspec.verify(kernel_sdpa, profile={cfg.profile!r}, "
              f"database=False, seed=0, isolate=False), one torch thread: {wall:.1f} s wall "
              f"under the profiler (verdict {'pass' if report.ok else 'FAIL'}); top "
              f"{PROFILE_TOP} by own time", headers, _rows(by_tottime, total),
              "In process, so the kernel's calls appear beside the runner's work; the CLI runs "
              "the kernel in a worker process instead (section 8). cProfile's overhead inflates "
              "Python-heavy code (Hypothesis, the runner) more than torch's C++ kernels."),
        table(f"The same profile: attnspec's functions, top {PROFILE_TOP} by time with callees",
              headers, _rows(by_cumtime, total)),
        table(f"The runner's side of an isolated verify({KERNEL_TARGET!r}) (the CLI's way, "
              f"default threads; the worker is another process): {iso_wall:.1f} s wall under "
              f"the profiler (verdict {'pass' if iso_report.ok else 'FAIL'}); top 15 by own "
              "time", headers, _rows(runner, iso_total),
              "Time the runner spends waiting for the worker shows as the wait/read/poll "
              "functions of the wire."),
    ]
    return {"tables": tables, "goals": [],
            "data": {"wall_s": wall, "ok": report.ok, "by_tottime": by_tottime,
                     "by_cumtime": by_cumtime, "isolated_wall_s": iso_wall,
                     "isolated_runner_by_tottime": runner,
                     "property_seconds": {p.id: p.seconds for p in report.properties},
                     "isolated_property_seconds": {p.id: p.seconds
                                                   for p in iso_report.properties}}}


if __name__ == "__main__":  # `python benchmarks/bench_kernels.py`: all four through run.py
    import run

    sys.exit(run.main(["--only", "kernel_verify,kernel_broken,kernel_oracle,kernel_profile",
                       *sys.argv[1:]]))


# ---- section 15 -----------------------------------------------------------------------------

TRITON_GOAL_S = 60.0  # a default verify of one Triton kernel, interpreted, on 2 idle cores
TRITON_KERNELS = ("tests/kernels/triton/good/flash_fwd.py",
                  "tests/kernels/triton/good/flash_varlen.py",
                  "tests/kernels/triton/good/split_k.py")


def triton_verify(cfg: Config) -> dict[str, Any]:
    """A default `attnspec verify` of each correct Triton kernel of the catalogue, from the shell,
    in Triton's interpreter where no GPU is seen (docs/triton.md): medians of interleaved runs."""
    import importlib.util

    if importlib.util.find_spec("triton") is None:
        return {"tables": [], "goals": [{"goal": "a Triton verify", "measured": "skipped: "
                                         "triton is not installed (pip install -e '.[triton]')",
                                         "status": status(None)}], "data": {}}
    runs = _runs(cfg)
    walls: dict[str, list[dict[str, Any]]] = {k: [] for k in TRITON_KERNELS}
    for r in range(runs):
        for kernel in _rotated(list(TRITON_KERNELS), r):
            cfg.log(f"  triton verify round {r + 1}/{runs}: {kernel}")
            walls[kernel].append(_cli_once(cfg, kernel))
    medians = {k: median([w["wall"] for w in v]) for k, v in walls.items()}
    bad = {k: sorted({w["exit"] for w in v if w["exit"] != 0}) for k, v in walls.items()}
    goals = [{"goal": f"default `attnspec verify {k}` within {TRITON_GOAL_S:g} s on 2 idle cores "
                      "(interpreted)",
              "measured": f"{medians[k]:.1f} s (median of {runs}, profile {cfg.profile})"
                          + (f"; exits {bad[k]}" if bad[k] else ""),
              "status": status(medians[k] <= TRITON_GOAL_S and not bad[k]
                               if cfg.profile == "default" else None)}
             for k in TRITON_KERNELS]
    rows = [[k, f"{medians[k]:.1f}", ", ".join(f"{w['wall']:.1f}" for w in walls[k])]
            for k in TRITON_KERNELS]
    tables = [table(f"`attnspec verify KERNEL --profile {cfg.profile} --no-database --seed 0` "
                    f"from the shell, interpreted: median of {runs} interleaved runs",
                    ["kernel", "wall s (median)", "walls s"], rows)]
    return {"tables": tables, "goals": goals,
            "data": {"medians_s": medians, "walls": {k: [w["wall"] for w in v]
                                                     for k, v in walls.items()}}}
