"""Sections 3, 4 and 5: how long verdicts take (built-in subjects, broken subjects, scaling)."""

from __future__ import annotations

import ast
import glob
import os
import time
from typing import Any

from bench_common import ROOT, Config, interleave, median, paired_ratio, ratio_text, status, table

from attnspec.subjects import BUILTIN

SUBJECTS = BUILTIN
VERIFY_GOAL_S = 10.0  # a default verify of the reference, on 2 idle cores
REJECT_GOAL_S = 3.0  # the median time to reject a broken subject (exitfirst)
SPEC_VERIFY_GOAL_S = 30.0  # a default verify of the reference with every variant drawn
SPEC_REJECT_GOAL_S = 5.0  # the median time to reject a broken protocol v2 subject
CAUSALITY_T = (4, 16, 64, 256)
SCALING_MAX_SEQ = (16, 64, 256)
QUICK_BROKEN = 4
CUDA_ONLY = {"device_agreement"}


def _verify_once(target: str, cfg: Config, *, exitfirst: bool = False,
                 workers: int | None = None) -> dict[str, Any]:
    """One `attnspec.verify` call, timed from the call until it returns."""
    import attnspec
    from attnspec import TargetError

    first: dict[str, Any] = {}
    start = time.perf_counter()

    def progress(prop: str, done: int, total: int, result: Any) -> None:
        if result is not None and not result.ok and not first:
            first.update(seconds=time.perf_counter() - start, property=result.id,
                         verdict=result.verdict)

    try:
        report = attnspec.verify(target, profile=cfg.profile, database=False, seed=0,
                                 device=cfg.device, exitfirst=exitfirst, progress=progress,
                                 workers=workers)
    except TargetError as error:
        return {"error": str(error)}
    wall = time.perf_counter() - start
    props = {p.id: {"verdict": p.verdict, "examples": p.examples, "seconds": p.seconds,
                    "forwards_per_example": p.forwards_per_example} for p in report.properties}
    return {"wall": wall, "ok": report.ok, "properties": props, "first_rejection": first or None,
            "workers": report.header.get("workers")}


def _cli_once(cfg: Config) -> float:
    """One `attnspec verify` of the reference from a shell: interpreter, imports and all."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "attnspec", "verify", "attnspec.subjects.reference",
               "--profile", cfg.profile, "--no-database", "--seed", "0", "--device", cfg.device]
    start = time.perf_counter()
    subprocess.run(command, capture_output=True, check=False)
    return time.perf_counter() - start


def _rotated(items: list[Any], r: int) -> list[Any]:
    shift = r % len(items)
    return items[shift:] + items[:shift]


# ---- section 3 ------------------------------------------------------------------------------


def _many_cuts(T: int) -> tuple[int, ...]:
    cuts = {0, 1, T // 2, T - 2}
    power = 2
    while power < T:
        cuts |= {power - 1, power, power + 1}
        power *= 2
    cuts |= {round(i * (T - 2) / 15) for i in range(16)}
    return tuple(sorted(t for t in cuts if 0 <= t < T - 1))


def _causality_vs_T(cfg: Config) -> tuple[dict[str, Any], dict[str, Any]]:
    import attnspec

    B, C, H = 2, 64, 4
    examples = {T: {"B": B, "T": T, "C": C, "H": H, "seed": 0, "device": cfg.device,
                    "cuts": list(_many_cuts(T))} for T in CAUSALITY_T}

    def replay(ex: dict[str, Any]) -> Any:
        report = attnspec.verify("attnspec.subjects.reference", only="causality", replay=ex,
                                 isolate=False, database=False)
        return report.result("causality")

    outcomes = {T: replay(ex) for T, ex in examples.items()}
    rounds = cfg.pick(9, 2)
    samples, _ = interleave({str(T): (lambda ex=ex: replay(ex)) for T, ex in examples.items()},
                            rounds=rounds, target_s=0.0, warmup=1, sync=cfg.sync)
    rows, data = [], {}
    for T, ex in examples.items():
        t = median(samples[str(T)])
        n = len([c for c in ex["cuts"] if c < T - 1])
        data[str(T)] = {"cuts": n, "forwards": outcomes[T].forwards_per_example,
                        "verdict": outcomes[T].verdict, "seconds": t, "rounds": rounds}
        rows.append([str(T), str(n), str(outcomes[T].forwards_per_example), outcomes[T].verdict,
                     str(n * B), f"{t * 1e3:,.1f}", f"{t * 1e3 / n:,.2f}",
                     str(1 + n)])
    return data, table(
        f"causality on one example (B={B}, C={C}, H={H}; reference, explicit path), "
        f"median of {rounds}",
        ["T", "cut points", "forward calls", "verdict", "rows in the stacked batch",
         "ms per example", "ms per cut point", "forwards a per-cut check would need"], rows,
        "All cut points go through two calls of the same shape, [x]*k and the k changed "
        "copies; only where the outputs differ at all is the pair made again, to measure the "
        "subject's own jitter. So the forward count stays at 2 (4) whatever T and the number "
        "of cuts; the time grows with the stacked batch's size instead.")


def verify_speed(cfg: Config) -> dict[str, Any]:
    """Wall time of `attnspec.verify` per built-in subject and property."""
    rounds = cfg.pick(3, 1)
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in SUBJECTS}
    cli_walls: list[float] = []
    for r in range(rounds):
        for name in _rotated([*SUBJECTS, "(command line)"], r):
            cfg.log(f"  verify round {r + 1}/{rounds}: attnspec.subjects.{name}")
            if name == "(command line)":
                cli_walls.append(_cli_once(cfg))
            else:
                runs[name].append(_verify_once(f"attnspec.subjects.{name}", cfg))
    rows, goals, data = [], [], {}
    props_seen: list[str] = []
    per_prop: dict[str, dict[str, float]] = {}
    for name in SUBJECTS:
        done = [run for run in runs[name] if "error" not in run]
        if not done:
            data[name] = {"error": runs[name][0]["error"]}
            rows.append([name, "unavailable: " + runs[name][0]["error"][:80], *[""] * 7])
            continue
        wall = median([run["wall"] for run in done])
        outside = median([run["wall"] - sum(p["seconds"] for p in run["properties"].values())
                          for run in done])
        props = done[0]["properties"]
        for pid in props:
            if pid not in props_seen:
                props_seen.append(pid)
        seconds = {pid: median([run["properties"][pid]["seconds"] for run in done])
                   for pid in props}
        per_prop[name] = seconds
        examples = sum(p["examples"] for p in props.values())
        in_props = sum(seconds.values())
        slowest = sorted(seconds, key=seconds.__getitem__, reverse=True)[:2]
        verdicts = sorted({p["verdict"] for p in props.values()})
        causal = props.get("causality", {}).get("forwards_per_example")
        data[name] = {"wall_s": wall, "walls": [run["wall"] for run in done],
                      "outside_properties_s": outside,
                      "property_seconds": seconds, "examples": examples,
                      "examples_per_s": examples / in_props if in_props else None,
                      "causality_forwards_per_example": causal, "ok": done[0]["ok"],
                      "properties": props}
        rows.append([name, f"{wall:.1f}", f"{in_props:.1f}", f"{outside:.1f}",
                     str(examples), f"{examples / in_props:.1f}" if in_props else "",
                     ", ".join(f"{p} {seconds[p]:.1f}s" for p in slowest),
                     "" if causal is None else f"{causal:g}",
                     "/".join(verdicts)])
        if name == "reference":
            cli = median(cli_walls)
            data["command_line_s"], data["command_line_walls"] = cli, cli_walls
            goal_ok = max(wall, cli) <= VERIFY_GOAL_S if cfg.profile == "default" else None
            goals.append({"goal": f"default verify of the reference within {VERIFY_GOAL_S:g} s",
                          "measured": f"`attnspec verify` {cli:.1f} s from the shell, "
                                      f"`attnspec.verify()` {wall:.1f} s (medians of "
                                      f"{len(done)}, profile {cfg.profile})",
                          "status": status(goal_ok)})
        if name == "variants":
            ok = wall <= SPEC_VERIFY_GOAL_S if cfg.profile == "default" else None
            goals.append({"goal": f"default verify of the reference with every variant drawn "
                                  f"(attnspec.subjects.variants) within {SPEC_VERIFY_GOAL_S:g} s",
                          "measured": f"{wall:.1f} s (median of {len(done)}, profile "
                                      f"{cfg.profile})", "status": status(ok)})
    matrix = []
    for pid in props_seen:
        matrix.append([pid] + [f"{per_prop[s][pid]:.2f}" if s in per_prop and pid in per_prop[s]
                               else "" for s in SUBJECTS])
    matrix.append(["**sum**"] + [f"{sum(per_prop[s].values()):.1f}" if s in per_prop else ""
                                 for s in SUBJECTS])
    cfg.log("  verify: causality forwards vs T")
    causal_data, causal_table = _causality_vs_T(cfg)
    data["causality_vs_T"] = causal_data
    tables = [
        table(f"attnspec.verify(target, profile={cfg.profile!r}, database=False, seed=0, "
              f"device={cfg.device!r}): median of {rounds} interleaved runs",
              ["subject", "wall s", "in properties s (the report's)",
               "outside them s (worker start and stop, verify's quick first pass)",
               "examples", "examples/s", "slowest properties", "causality forwards/example",
               "verdicts"], rows,
              "verify first runs every property on a few examples (its quick first pass); the "
              "full pass continues it, so the report's seconds and examples per property "
              "include it. 'outside' is mostly the worker's start (its import of torch). "
              "examples/s = examples over the time inside properties. Causality's "
              "forwards/example is 2 where outputs come back exactly unchanged, 4 where they "
              "differ (a second pair measures the jitter), 0 where T=1 (no cut point). "
              f"`attnspec verify` from the shell (interleaved with these, median "
              f"{median(cli_walls) if cli_walls else float('nan'):.1f} s) starts its worker "
              "before it imports torch itself."),
        table("Seconds per property (median)", ["property", *SUBJECTS], matrix),
        causal_table,
    ]
    return {"tables": tables, "goals": goals, "data": data}


# ---- section 4 ------------------------------------------------------------------------------


def _protocol(path: str) -> int:
    """2 where the module defines or imports PROTOCOL (the catalogue's v2 subjects), else 1."""
    try:
        with open(path) as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError):
        return 1
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and any(a.name == "PROTOCOL" for a in node.names):
            return 2
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "PROTOCOL" for t in node.targets):
            return 2
    return 1


def _expected(path: str) -> list[str] | None:
    """The module's EXPECTED property ids (a literal set), read without importing it."""
    try:
        with open(path) as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError):
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "EXPECTED" for t in node.targets):
            value = node.value
            if (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
                    and value.func.id in ("frozenset", "set", "tuple", "list")
                    and len(value.args) == 1):
                value = value.args[0]
            try:
                return sorted(str(v) for v in ast.literal_eval(value))
            except (ValueError, TypeError):
                return None
    return None


def broken(cfg: Config) -> dict[str, Any]:
    """Time to reject each module of tests/broken/ (globbed at run time)."""
    paths = sorted(p for p in glob.glob(os.path.join(ROOT, "tests", "broken", "*.py"))
                   if not os.path.basename(p).startswith("_"))
    if not paths:
        return {"skipped": "no tests/broken/*.py found"}
    found = len(paths)
    if cfg.quick:
        paths = paths[:QUICK_BROKEN]
    expected = {p: _expected(p) for p in paths}
    # Only device_agreement catches a CUDA-only bug, and it needs a CUDA device under test.
    cuda_only = [p for p in paths if expected[p] and set(expected[p]) <= CUDA_ONLY
                 and cfg.device != "cuda"]
    timed = [p for p in paths if p not in cuda_only]
    # The full verify of every module is the most expensive measurement of the whole run, so
    # it runs once; exitfirst (the goal's figure) runs twice.
    rounds = {"exitfirst": 1 if cfg.rejection_only else cfg.pick(2, 1),
              "full": 0 if cfg.rejection_only else 1}
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        p: {"exitfirst": [], "full": []} for p in timed}
    for r in range(max(rounds.values())):
        for i, path in enumerate(_rotated(timed, r) if timed else []):
            rel = os.path.relpath(path, ROOT)
            modes = ("exitfirst", "full") if (r + i) % 2 == 0 else ("full", "exitfirst")
            for mode in (m for m in modes if r < rounds[m]):
                cfg.log(f"  broken round {r + 1}: {rel} ({mode})")
                runs[path][mode].append(_verify_once(rel, cfg, exitfirst=mode == "exitfirst"))
    rows, data = [], {}
    rejected = within = 0
    walls: list[float] = []
    spec_walls: list[float] = []  # the protocol v2 modules
    for path in paths:
        name = os.path.basename(path)
        want = ", ".join(expected[path] or ["?"])
        if path in cuda_only:
            data[name] = {"skipped": "only device_agreement catches it; needs --device cuda",
                          "expected": expected[path]}
            rows.append([name, want, "skipped: needs --device cuda (a CUDA-only bug)", "", "",
                         "", "", "—"])
            continue
        ef, full = runs[path]["exitfirst"], runs[path]["full"]
        errors = [run["error"] for run in ef + full if "error" in run]
        if errors:
            data[name] = {"error": errors[0]}
            rows.append([name, want, "load error: " + errors[0][:80], "", "", "", "", "MISS"])
            continue
        ef_wall = median([run["wall"] for run in ef])
        full_wall = median([run["wall"] for run in full]) if full else float("nan")
        first = ef[0]["first_rejection"] or (full[0]["first_rejection"] if full else None)
        in_full = [run["first_rejection"]["seconds"] for run in full if run["first_rejection"]]
        first_s = median(in_full) if in_full else None
        is_rejected = not ef[0]["ok"]
        failing = [pid for pid, p in (full or ef)[0]["properties"].items()
                   if p["verdict"] not in ("pass", "skip", "not_run")]
        rejected += is_rejected
        ok = is_rejected
        within += ok
        walls.append(ef_wall)
        if _protocol(path) == 2:
            spec_walls.append(ef_wall)
        data[name] = {"expected": expected[path], "exitfirst_wall_s": ef_wall,
                      "full_wall_s": full_wall, "first_rejection_in_full_run_s": first_s,
                      "first_failing_property": first["property"] if first else None,
                      "failing_properties": failing, "rejected": is_rejected,
                      "exitfirst_walls": [run["wall"] for run in ef],
                      "full_walls": [run["wall"] for run in full]}
        rows.append([name, want, (first["property"] + f" ({first['verdict']})") if first
                     else "NOT REJECTED", f"{ef_wall:.1f}", f"{full_wall:.1f}",
                     "" if first_s is None else f"{first_s:.1f}",
                     ", ".join(failing), status(ok)])
    n = len(timed)
    quick_note = "" if cfg.profile == "default" else (
        f" (quick: smoke profile, first {len(paths)} of {found} modules)")
    skipped_note = "" if not cuda_only else (
        f"; not timed: {', '.join(os.path.basename(p) for p in cuda_only)} (needs CUDA)")
    middle = median(walls) if walls else float("nan")
    goals = [{"goal": f"each broken subject rejected, median within {REJECT_GOAL_S:g} s"
                      f"{quick_note}",
              "measured": f"{rejected}/{n} rejected (exitfirst wall: median {middle:.1f} s, "
                          f"max {max(walls) if walls else float('nan'):.1f} s)"
                          f"{skipped_note}",
              "status": status(within == n and middle <= REJECT_GOAL_S
                               if cfg.profile == "default" else None)}]
    if spec_walls:
        spec_middle = median(spec_walls)
        goals.append({"goal": f"each broken protocol v2 subject rejected, median within "
                              f"{SPEC_REJECT_GOAL_S:g} s{quick_note}",
                      "measured": f"{len(spec_walls)} modules (exitfirst wall: median "
                                  f"{spec_middle:.1f} s, max {max(spec_walls):.1f} s)",
                      "status": status(spec_middle <= SPEC_REJECT_GOAL_S
                                       if cfg.profile == "default" else None)})
    tables = [table(
        f"Time to reject tests/broken/* (verify(path, profile={cfg.profile!r}, "
        f"database=False, seed=0, device={cfg.device!r})): {len(paths)} of {found} modules",
        ["module", "EXPECTED (the module's own list)", "first failing property",
         f"exitfirst=True wall s (median of {rounds['exitfirst']})",
         f"full verify wall s ({rounds['full']} run)", "first rejection within the full run s",
         "all failing properties", "rejected"], rows,
        "Walls run from the verify call until it returns, and include starting and stopping "
        "the supervised worker process (a fresh interpreter that imports torch). exitfirst and "
        "full runs were interleaved, module by module. The goal column judges the exitfirst "
        "wall. verify first runs every property on a few examples (its quick first pass), so "
        "a bug that only a late property (oracle, oracle_grad) catches does not wait for the "
        "full examples of every earlier property. cuda_only bugs (EXPECTED only "
        "device_agreement) are not timed without --device cuda.")]
    return {"tables": tables, "goals": goals, "data": data}


# ---- section 5 ------------------------------------------------------------------------------


def scaling(cfg: Config) -> dict[str, Any]:
    """Verify time of the reference as the largest generated T (Session's max_seq) grows."""
    import attnspec
    from attnspec import PROPERTIES

    rounds = cfg.pick(2, 1)
    walls: dict[int, list[float]] = {m: [] for m in SCALING_MAX_SEQ}
    props: dict[int, list[dict[str, float]]] = {m: [] for m in SCALING_MAX_SEQ}
    for r in range(rounds):
        for max_seq in _rotated(list(SCALING_MAX_SEQ), r):
            cfg.log(f"  scaling round {r + 1}/{rounds}: max_seq={max_seq}")
            start = time.perf_counter()
            report = attnspec.verify("attnspec.subjects.reference", max_seq=max_seq,
                                     database=False, seed=0, device=cfg.device,
                                     profile=cfg.profile)
            results = report.properties
            walls[max_seq].append(time.perf_counter() - start)
            props[max_seq].append({p.id: p.seconds for p in results})
    base = walls[64]
    rows, data = [], {}
    for max_seq in SCALING_MAX_SEQ:
        seconds = {pid: median([run[pid] for run in props[max_seq]]) for pid in PROPERTIES}
        top = sorted(seconds, key=seconds.__getitem__, reverse=True)[:3]
        r = paired_ratio(walls[max_seq], base)
        data[str(max_seq)] = {"wall_s": median(walls[max_seq]), "walls": walls[max_seq],
                              "ratio_to_64": r, "property_seconds": seconds}
        rows.append([str(max_seq), f"{median(walls[max_seq]):.1f}",
                     ratio_text(r, 2) if rounds > 1 else f"{r['median']:.2f}",
                     ", ".join(f"{p} {seconds[p]:.1f}s" for p in top)])
    matrix = [[pid] + [f"{data[str(m)]['property_seconds'][pid]:.2f}" for m in SCALING_MAX_SEQ]
              for pid in PROPERTIES]
    tables = [
        table(f"verify('attnspec.subjects.reference', max_seq=..., profile={cfg.profile!r}, "
              f"database=False, seed=0): every property, median of {rounds} interleaved runs",
              ["max_seq (largest T drawn)", "wall s", "ratio to max_seq=64 (the default)",
               "slowest properties"], rows),
        table("Seconds per property (median)",
              ["property", *(f"max_seq={m}" for m in SCALING_MAX_SEQ)], matrix),
    ]
    return {"tables": tables, "goals": [], "data": data}


# ---- section 13 -----------------------------------------------------------------------------

WORKERS_TARGETS = ("attnspec.subjects.reference", "attnspec.subjects.kernel_sdpa")


def _cli_workers(cfg: Config, target: str, workers: int) -> dict[str, Any]:
    import subprocess
    import sys

    command = [sys.executable, "-m", "attnspec", "verify", target, "--profile", cfg.profile,
               "--no-database", "--seed", "0", "--device", cfg.device, "--no-progress",
               "--workers", str(workers)]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    return {"wall": time.perf_counter() - start, "exit": done.returncode}


def workers(cfg: Config) -> dict[str, Any]:
    """One runner against two, side by side: default verifies from the shell, and the time to
    reject each module of tests/broken/ (exitfirst), in the same run, order alternating."""
    runs = cfg.kernel_runs or cfg.pick(5, 1)
    walls: dict[tuple[str, int], list[float]] = {(t, w): [] for t in WORKERS_TARGETS
                                                 for w in (1, 2)}
    exits: set[int] = set()
    for r in range(runs):
        for target in WORKERS_TARGETS:
            for w in ((1, 2) if r % 2 == 0 else (2, 1)):
                cfg.log(f"  workers round {r + 1}/{runs}: {target} --workers {w}")
                done = _cli_workers(cfg, target, w)
                walls[(target, w)].append(done["wall"])
                exits.add(done["exit"])
    rows = []
    data: dict[str, Any] = {"runs": runs, "exits": sorted(exits), "verify": {}}
    for target in WORKERS_TARGETS:
        one, two = walls[(target, 1)], walls[(target, 2)]
        ratio = paired_ratio(two, one)
        data["verify"][target] = {"one": one, "two": two, "ratio": ratio}
        rows.append([f"`attnspec verify {target}`", f"{median(one):.2f}", f"{median(two):.2f}",
                     ratio_text(ratio, 2), ", ".join(f"{x:.1f}" for x in one),
                     ", ".join(f"{x:.1f}" for x in two)])
    paths = sorted(p for p in glob.glob(os.path.join(ROOT, "tests", "broken", "*.py"))
                   if not os.path.basename(p).startswith("_"))
    paths = [p for p in paths if not (_expected(p) and set(_expected(p) or []) <= CUDA_ONLY)]
    if cfg.quick:
        paths = paths[:QUICK_BROKEN]
    reject: dict[int, list[float]] = {1: [], 2: []}
    differ: list[str] = []  # rejected with one runner and not with two, or the other way
    raced: list[str] = []  # rejected first by another property: with -x both runners race
    for i, path in enumerate(paths):
        rel = os.path.relpath(path, ROOT)
        seen = {}
        for w in ((1, 2) if i % 2 == 0 else (2, 1)):
            cfg.log(f"  workers: reject {rel} (--workers {w})")
            seen[w] = _verify_once(rel, cfg, exitfirst=True, workers=w)
        if any("error" in run for run in seen.values()):
            differ.append(f"{os.path.basename(path)}: load error")
            continue
        for w in (1, 2):
            reject[w].append(seen[w]["wall"])
        firsts = {w: (seen[w]["first_rejection"] or {}).get("property") for w in (1, 2)}
        if seen[1]["ok"] or seen[2]["ok"]:
            differ.append(f"{os.path.basename(path)}: passed with "
                          f"{'one runner' if seen[1]['ok'] else 'two runners'}")
        elif firsts[1] != firsts[2]:
            raced.append(f"{os.path.basename(path)} ({firsts[1]} / {firsts[2]})")
    ratio = paired_ratio(reject[2], reject[1]) if reject[1] else None
    data["broken"] = {"one": reject[1], "two": reject[2], "ratio": ratio, "differ": differ,
                      "raced": raced, "modules": len(reject[1])}
    goals = [
        {"goal": "a default verify of the reference within 5 s on 2 idle cores",
         "measured": f"{median(walls[(WORKERS_TARGETS[0], 2)]):.2f} s with two runners "
                     f"(the default), {median(walls[(WORKERS_TARGETS[0], 1)]):.2f} s with one",
         "status": status(median(walls[(WORKERS_TARGETS[0], 2)]) <= 5.0
                          if cfg.profile == "default" else None)},
        {"goal": "the catalogue's median rejection within 2 s (`-x`: one runner by default)",
         "measured": (f"{median(reject[1]):.2f} s with one runner, {median(reject[2]):.2f} s "
                      f"with two, over {len(reject[1])} modules" if reject[1] else "none ran"),
         "status": status(bool(reject[1]) and median(reject[1]) <= 2.0
                          if cfg.profile == "default" else None)},
        {"goal": "a default verify of kernel_sdpa within 5 s on 2 idle cores",
         "measured": f"{median(walls[(WORKERS_TARGETS[1], 2)]):.2f} s with two runners, "
                     f"{median(walls[(WORKERS_TARGETS[1], 1)]):.2f} s with one",
         "status": status(median(walls[(WORKERS_TARGETS[1], 2)]) <= 5.0
                          if cfg.profile == "default" else None)},
    ]
    if reject[1]:
        assert ratio is not None
        rows.append([f"reject each of {len(reject[1])} tests/broken modules (`-x` with "
                     "`--workers 1` / `2`, attnspec.verify(), median)", f"{median(reject[1]):.2f}",
                     f"{median(reject[2]):.2f}", ratio_text(ratio, 2), "", ""])
    tables = [table(
        f"One runner (`--workers 1`) against two (`--workers 2`, the default), profile "
        f"{cfg.profile}, seed 0, no database: medians of {runs} runs each, interleaved",
        ["what", "one runner s", "two runners s", "two / one (paired, quartiles)",
         "one runner walls", "two runners walls"], rows,
        "Both columns are this code: `--workers 1` runs the properties one after another as "
        "before lanes existed (and is what `-x` takes unless told otherwise). Modules rejected "
        "by one and not the other: " + ("; ".join(differ) if differ else "none") + ". With "
        "`-x` and two runners the first failure found is whichever runner's comes first: "
        f"{len(raced)} modules were first rejected by another property than with one runner"
        + (f" ({'; '.join(raced)})" if raced else "") + ".")]
    return {"goals": goals, "tables": tables, "data": data}


# ---- section 14 -----------------------------------------------------------------------------


def _cli_arm(cfg: Config, target: str, env: dict[str, str]) -> dict[str, Any]:
    import subprocess
    import sys

    command = [sys.executable, "-m", "attnspec", "verify", target, "--profile", cfg.profile,
               "--no-database", "--seed", "0", "--device", cfg.device, "--no-progress"]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False,
                          env=env)
    return {"wall": time.perf_counter() - start, "exit": done.returncode}


def zygote(cfg: Config) -> dict[str, Any]:
    """Default verifies from the shell (two runners, the default) with workers forked from the
    zygote, with exec'd workers (ATTNSPEC_EXEC_WORKERS=1, same code), and with --before REF's
    code; rounds interleaved, order rotating."""
    import shutil
    import subprocess
    import tempfile

    runs = cfg.kernel_runs or cfg.pick(5, 1)
    arms: dict[str, dict[str, str]] = {
        "forked": {**os.environ},
        "exec'd": {**os.environ, "ATTNSPEC_EXEC_WORKERS": "1"}}
    tree = None
    if cfg.before:
        tree = tempfile.mkdtemp(prefix="attnspec-before-")
        subprocess.run(["git", "worktree", "add", "--detach", tree, cfg.before], cwd=ROOT,
                       check=True, capture_output=True)
        arms[f"before ({cfg.before})"] = {**os.environ, "PYTHONPATH": os.path.join(tree, "src")}
    names = list(arms)
    walls: dict[tuple[str, str], list[float]] = {(t, a): [] for t in WORKERS_TARGETS
                                                 for a in names}
    exits: dict[str, set[int]] = {a: set() for a in names}
    try:
        for r in range(runs):
            for target in WORKERS_TARGETS:
                for arm in _rotated(names, r):
                    cfg.log(f"  zygote round {r + 1}/{runs}: {target} ({arm})")
                    done = _cli_arm(cfg, target, arms[arm])
                    walls[(target, arm)].append(done["wall"])
                    exits[arm].add(done["exit"])
    finally:
        if tree is not None:
            subprocess.run(["git", "worktree", "remove", "--force", tree], cwd=ROOT,
                           check=False, capture_output=True)
            shutil.rmtree(tree, ignore_errors=True)
    rows = []
    data: dict[str, Any] = {"runs": runs, "before": cfg.before,
                            "exits": {a: sorted(e) for a, e in exits.items()}, "verify": {}}
    for target in WORKERS_TARGETS:
        row = [f"`attnspec verify {target}`"]
        entry: dict[str, Any] = {}
        for arm in names:
            entry[arm] = walls[(target, arm)]
            row.append(f"{median(walls[(target, arm)]):.2f}")
        for arm in names[1:]:
            ratio = paired_ratio(walls[(target, "forked")], walls[(target, arm)])
            entry[f"forked / {arm}"] = ratio
            row.append(ratio_text(ratio, 2))
        data["verify"][target] = entry
        rows.append(row)
    ref, kern = (median(walls[(t, "forked")]) for t in WORKERS_TARGETS)
    goals = [
        {"goal": "a default verify of the reference within 5 s on 2 idle cores",
         "measured": f"{ref:.2f} s (forked workers, two runners: the default)",
         "status": status(ref <= 5.0 if cfg.profile == "default" else None)},
        {"goal": "a default verify of kernel_sdpa within 5 s on 2 idle cores",
         "measured": f"{kern:.2f} s (forked workers, two runners: the default)",
         "status": status(kern <= 5.0 if cfg.profile == "default" else None)},
    ]
    tables = [table(
        f"`attnspec verify TARGET --profile {cfg.profile} --no-database --seed 0` from the "
        f"shell: medians of {runs} runs per arm, interleaved",
        ["what", *(f"{a} s" for a in names), *(f"forked / {a} (paired, quartiles)"
                                               for a in names[1:])], rows,
        "forked: workers forked from each runner's zygote (the default on Linux); exec'd: the "
        "same code with ATTNSPEC_EXEC_WORKERS=1, each worker a new interpreter importing torch"
        + (f"; before: the code at {cfg.before}, from a worktree on PYTHONPATH" if cfg.before
           else "") + f". Exit statuses: {data['exits']}.")]
    return {"goals": goals, "tables": tables, "data": data}
