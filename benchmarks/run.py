"""attnspec's benchmarks: `nox -s bench` or `python benchmarks/run.py [--quick] [--device cpu|cuda]
[--only SECTION] [--out PREFIX]`.

Sections (docs/benchmarks.md explains each and how to read the numbers):

  checks   1. runtime checking cost: forward with the shape checks on vs off
  kernels  2. the reference (explicit and kernel="sdpa") vs a bare SDPA module and
              nn.MultiheadAttention: time and peak memory
  verify   3. verdict speed: attnspec.verify on each built-in subject, per property
  broken   4. time to reject each deliberately broken subject in tests/broken/
  scaling  5. verify time of the reference as the largest generated T grows
  sharded  6. ranks' start-up and one tp_equivalence / cp_equivalence example (CPU, gloo)
  wire     7. peak RSS of runner and worker: a normal forward, and a 512 MiB output
  kernel_verify   8. a default `attnspec verify` of attnspec.subjects.kernel_sdpa
  kernel_broken   9. time to reject each broken kernel in tests/kernels/broken/
  kernel_oracle  10. one oracle check at (B, H, T, D) = (2, 8, 256, 64), in process
  kernel_profile 11. cProfile of one default verify of kernel_sdpa: where the time goes
  hf_verify      12. a default `attnspec verify hf:TYPE@BACKEND` (transformers adapter)
  workers        13. one runner against two: default verifies and the catalogue's rejections
  zygote         14. workers forked from a zygote against exec'd ones (and --before REF)
  triton_verify  15. a default verify of each correct Triton kernel, interpreted
  many           16. 100 targets: separate processes, verify DIR --jobs 2, --engine ray

Writes PREFIX.md (tables) and PREFIX.json (everything, with the machine); PREFIX defaults to
benchmarks/results (benchmarks/results-cuda with --device cuda). Both are rewritten after every
section. Sections already in PREFIX.json that this run does not measure (with --only, or after
an interruption) are kept; each names the command that measured it. Every figure is a median
over repeated runs, and every comparison is interleaved in one run. Nothing here asserts on
time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

# The benchmarks measure attnspec as users get it: shape checks on (the default).
os.environ["ATTNSPEC_TYPECHECK"] = "1"

import torch  # noqa: E402
from bench_common import HERE, ROOT, Config, load_average, machine, markdown_table  # noqa: E402

SECTIONS: dict[str, str] = {
    "checks": "1. Runtime checking cost",
    "kernels": "2. The reference vs what users would otherwise run",
    "verify": "3. Verdict speed on the built-in subjects",
    "broken": "4. Time to reject the broken subjects",
    "scaling": "5. Verify time as the largest T grows",
    "sharded": "6. Sharded examples",
    "wire": "7. The wire's memory",
    "kernel_verify": "8. Verdict speed on a kernel (kernel_sdpa)",
    "kernel_broken": "9. Time to reject the broken kernels",
    "kernel_oracle": "10. One kernel oracle check",
    "kernel_profile": "11. Where a kernel verify's time goes",
    "hf_verify": "12. Verdict speed on a transformers model type",
    "workers": "13. One runner against two (--workers)",
    "zygote": "14. Forked workers against exec'd ones",
    "triton_verify": "15. Verdict speed on a Triton kernel, interpreted",
    "many": "16. Many targets: one process each, --jobs 2, Ray",
}
ALIASES = {str(i): name for i, name in enumerate(SECTIONS, start=1)}


def _section(name: str) -> Callable[[Config], dict[str, Any]]:
    import bench_forward
    import bench_hf
    import bench_kernels
    import bench_many
    import bench_sharded
    import bench_verify
    import bench_wire

    functions: dict[str, Callable[[Config], dict[str, Any]]] = {
        "checks": bench_forward.checks, "kernels": bench_forward.kernels,
        "verify": bench_verify.verify_speed, "broken": bench_verify.broken,
        "scaling": bench_verify.scaling, "sharded": bench_sharded.sharded,
        "wire": bench_wire.wire,
        "kernel_verify": bench_kernels.kernel_verify,
        "kernel_broken": bench_kernels.kernel_broken,
        "kernel_oracle": bench_kernels.kernel_oracle,
        "kernel_profile": bench_kernels.kernel_profile,
        "hf_verify": bench_hf.hf_verify, "workers": bench_verify.workers,
        "zygote": bench_verify.zygote,
        "triton_verify": bench_kernels.triton_verify,
        "many": bench_many.many,
    }
    return functions[name]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="benchmarks/run.py", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="fewer repeats and the smoke verify profile: a smoke run, not "
                             "numbers to quote")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the modules and verify run (cuda sections are skipped "
                             "when torch sees no GPU)")
    parser.add_argument("--only", action="append", metavar="SECTION",
                        help="run only these sections (repeat or comma-separate): "
                             + ", ".join(SECTIONS) + f" (or 1-{len(SECTIONS)})")
    parser.add_argument("--rejection-only", action="store_true",
                        help="section 4 (broken) times exitfirst once per module, no full "
                             "verifies: the goal's figure in a few minutes")
    parser.add_argument("--kernel-runs", type=int, metavar="N",
                        help="sections 8 and 9: verify runs per figure (the median of N; "
                             "default 3 for section 8, 1 for section 9; 1 with --quick)")
    parser.add_argument("--threads", type=int, metavar="N",
                        help="torch.set_num_threads(N) for the forward timings (sections 1 and "
                             "2); by default torch's own choice is left alone and recorded")
    parser.add_argument("--before", metavar="REF",
                        help="section 14 (zygote): also time this git revision of attnspec "
                             "(checked out in a temporary worktree), interleaved")
    parser.add_argument("--out", metavar="PREFIX",
                        help="write PREFIX.md and PREFIX.json (default benchmarks/results, "
                             "or benchmarks/results-cuda with --device cuda)")
    args = parser.parse_args(argv)
    chosen: list[str] = []
    for value in args.only or []:
        for item in value.split(","):
            item = ALIASES.get(item.strip(), item.strip())
            if item not in SECTIONS:
                parser.error(f"--only {item!r}: choose from {', '.join(SECTIONS)} "
                             f"(or 1-{len(SECTIONS)})")
            if item not in chosen:
                chosen.append(item)
    args.sections = [s for s in SECTIONS if s in chosen] if chosen else list(SECTIONS)
    if args.out is None:
        args.out = os.path.join(HERE, "results" + ("-cuda" if args.device == "cuda" else ""))
    return args


def render(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = [
        "# attnspec benchmarks",
        "",
        f"Last written by `{results['command']}` on {results['finished']}; each section "
        "names the command that measured it. What each section measures and how to read it: "
        "[docs/benchmarks.md](../docs/benchmarks.md).",
        "Every figure is a median over repeated runs; every comparison was interleaved in one "
        "run and is quoted as a ratio (median of per-round ratios, with the interquartile "
        "range).",
        "",
        "## Machine",
        "",
        markdown_table({"title": "", "headers": ["", ""], "rows": [
            ["device", f"{m['device']} ({m['device_name']})"],
            ["CPUs", f"{m['cpu_count']} ({m['cpus_usable']} usable)"],
            ["torch", f"{m['torch']} (torch.get_num_threads() = {m['torch_num_threads']}"
                      + (", left at its default)" if m["torch_num_threads"]
                         == m.get("torch_default_num_threads", m["torch_num_threads"])
                         else f", set by --threads; default {m['torch_default_num_threads']})")],
            ["python / platform", f"{m['python']} / {m['platform']}"],
            ["attnspec", f"{m['attnspec']} (git {m['git']}), ATTNSPEC_TYPECHECK=1"],
            ["load average (1, 5, 15 min) at start / end",
             f"{m.get('load_average_at_start')} / {m.get('load_average_at_end')}"],
        ]}),
        "",
    ]
    goals = []
    for name, title in SECTIONS.items():
        sec = results["sections"].get(name)
        if sec is None:
            continue
        for g in sec.get("goals", []):
            goals.append([title.split(".")[0], g["goal"], g["measured"], g["status"]])
    if goals:
        lines += ["## Goals", "",
                  markdown_table({"title": "", "headers": ["section", "goal", "measured",
                                                         "status"], "rows": goals}), ""]
    for name, title in SECTIONS.items():
        sec = results["sections"].get(name)
        if sec is None:
            continue
        lines += [f"## {title}", ""]
        extra = f"; quick run (profile {sec.get('profile')})" if sec.get("quick") else ""
        if name in ("checks", "kernels") and "torch_num_threads" in sec:
            extra += f"; torch threads {sec['torch_num_threads']}"
        load = sec.get("load_average") or {}
        start, end = load.get("start"), load.get("end")
        shown = (f"{start[0]:g} at the start, {end[0]:g} at the end" if start and end
                 else "unknown")
        lines += [f"_Measured by `{sec.get('command', '?')}` at {sec.get('measured_at')} in "
                  f"{sec.get('seconds', 0):.0f} s; 1-minute load average {shown}{extra}._", ""]
        if "skipped" in sec:
            lines += [f"Skipped: {sec['skipped']}", ""]
            continue
        if "error" in sec:
            lines += ["The section failed:", "", "```", sec["error"].rstrip(), "```", ""]
            continue
        for t in sec.get("tables", []):
            lines += [markdown_table(t), ""]
    return "\n".join(lines).rstrip() + "\n"


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.kernel_runs is not None and args.kernel_runs < 1:
        print(f"benchmarks/run.py --kernel-runs {args.kernel_runs}: the number of verify runs "
              "to take the median of must be at least 1", file=sys.stderr)
        return 2
    cfg = Config(device=args.device, quick=args.quick, threads=args.threads,
                 rejection_only=args.rejection_only, kernel_runs=args.kernel_runs,
                 before=args.before)
    default_threads = torch.get_num_threads()
    if args.threads:
        torch.set_num_threads(args.threads)
    json_path, md_path = args.out + ".json", args.out + ".md"
    results: dict[str, Any] = {"sections": {}}
    if os.path.exists(json_path):  # sections not (yet) remeasured are kept, with their dates
        with open(json_path) as handle:
            old = json.load(handle)
        results["sections"] = {k: v for k, v in old.get("sections", {}).items()
                               if k in SECTIONS}
    shown = " ".join(sys.argv[1:] if argv is None else argv)
    results["command"] = ("python benchmarks/run.py " + shown).strip()
    results["machine"] = machine(args.device)
    results["machine"]["torch_default_num_threads"] = default_threads
    no_gpu = args.device == "cuda" and not torch.cuda.is_available()
    failed = False
    for name in args.sections:
        cfg.log(f"{SECTIONS[name]} ({name})")
        start = time.perf_counter()
        entry: dict[str, Any] = {
            "measured_at": datetime.datetime.now().isoformat(timespec="seconds"),
            "quick": cfg.quick, "profile": cfg.profile, "device": cfg.device,
            "command": results["command"], "torch_num_threads": torch.get_num_threads()}
        load_before = load_average()
        if no_gpu:
            entry["skipped"] = "--device cuda, but torch.cuda.is_available() is False"
        else:
            try:
                entry.update(_section(name)(cfg))
            except Exception:
                failed = True
                entry["error"] = traceback.format_exc()
                cfg.log(entry["error"])
        entry["seconds"] = time.perf_counter() - start
        entry["load_average"] = {"start": load_before, "end": load_average()}
        results["sections"][name] = entry
        cfg.log(f"  done in {entry['seconds']:.0f} s")
        # Written after every section, so an interrupted run keeps what it measured.
        results["machine"]["load_average_at_end"] = load_average()
        results["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
        _write(json_path, json.dumps(results, indent=2) + "\n")
        _write(md_path, render(results))
    cfg.log(f"wrote {os.path.relpath(md_path, ROOT)} and {os.path.relpath(json_path, ROOT)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
