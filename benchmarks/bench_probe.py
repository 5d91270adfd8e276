"""Measurements that need a fresh interpreter; run.py starts this script and reads its last line.

    python benchmarks/bench_probe.py typecheck-path --device cpu --shape 1,8,12,3 --shape ...
        Which path forward takes under this process's ATTNSPEC_TYPECHECK (set by the caller),
        seen with sys.setprofile, and forward vs the switch-free pipeline, interleaved.
    python benchmarks/bench_probe.py memory --impl explicit --shape 1,1024,768,12 --device cpu
        Peak memory of one forward (no_grad, eval): on CPU the peak-RSS rise over the RSS just
        before the call (the peak is reset through /proc/self/clear_refs), on CUDA
        torch.cuda.max_memory_allocated over what was allocated before the call.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from collections.abc import Callable
from typing import Any

import torch


def _status_bytes(key: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
        return True
    except OSError:
        return False


def memory(args: argparse.Namespace) -> dict[str, Any]:
    from bench_impls import build, inputs, parse_shape

    B, T, C, H = parse_shape(args.shape[0])
    module = build(args.impl, C, H, args.device)
    x = inputs(B, T, C, args.device)
    cuda = args.device == "cuda"
    samples: list[int] = []
    with torch.no_grad():
        for _ in range(2):  # warm-up: lazy initialisation is not the forward's own memory
            module(x)
        for _ in range(args.repeats):
            gc.collect()
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                out = module(x)
                torch.cuda.synchronize()
                samples.append(torch.cuda.max_memory_allocated() - base)
            else:
                if not _reset_peak_rss():
                    return {"error": "cannot reset the peak RSS (/proc/self/clear_refs)"}
                base = _status_bytes("VmRSS")
                out = module(x)
                samples.append(_status_bytes("VmHWM") - base)
            del out
    samples.sort()
    return {"impl": args.impl, "shape": args.shape[0], "device": args.device,
            "peak_bytes": samples[len(samples) // 2], "samples": samples,
            "method": "cuda.max_memory_allocated" if cuda else "peak RSS rise (VmHWM)"}


def _calls_during(fn: Callable[[], object]) -> tuple[list[str], list[str]]:
    """(checker functions entered, reference steps entered) while fn runs."""
    seen: list[tuple[str, str]] = []

    def profiler(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            seen.append((frame.f_code.co_filename, frame.f_code.co_name))

    sys.setprofile(profiler)
    try:
        fn()
    finally:
        sys.setprofile(None)
    checker = sorted({f"{os.path.basename(f)}:{n}" for f, n in seen
                      if "beartype" in f or "jaxtyping" in f
                      or f.endswith(os.path.join("attnspec", "_typecheck.py"))})
    steps = [n for f, n in seen if f.endswith(os.path.join("attnspec", "_reference.py"))]
    return checker, steps


def typecheck_path(args: argparse.Namespace) -> dict[str, Any]:
    from bench_common import interleave, paired_ratio, summary
    from bench_impls import build, inputs, is_large, parse_shape

    import attnspec
    from attnspec.reference import module as R

    plain = vars(R._PLAIN)
    result: dict[str, Any] = {
        "ATTNSPEC_TYPECHECK": os.environ.get("ATTNSPEC_TYPECHECK"),
        "typecheck_enabled": attnspec.typecheck_enabled(),
        "checked_steps_are_plain": all(getattr(R._CHECKED, n) is f for n, f in plain.items()),
        "shapes": {},
    }
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    for shape in args.shape:
        B, T, C, H = parse_shape(shape)
        module = build("explicit", C, H, args.device)
        bare = build("bare", C, H, args.device)
        bare.load_state_dict(module.state_dict())
        # The A/A control is a second switch-free module: where weights land in memory moves
        # large-shape timings by a few percent, and forward's module is a different one too.
        bare_aa = build("bare", C, H, args.device)
        bare_aa.load_state_dict(module.state_dict())
        x = inputs(B, T, C, args.device)
        large = is_large(B, T, C, H)
        rounds = args.rounds if large else args.small_rounds
        with torch.no_grad():
            first_checker, first_steps = _calls_during(lambda m=module, x=x: m(x))
            steady_checker, steady_steps = _calls_during(lambda m=module, x=x: m(x))
            samples, inner = interleave(
                {"forward": lambda m=module, x=x: m(x), "bare": lambda b=bare, x=x: b(x),
                 "bare_aa": lambda b=bare_aa, x=x: b(x)},
                rounds=rounds, target_s=0.0 if large else args.target, sync=sync)
        result["shapes"][shape] = {
            "first_call_checker_functions": len(first_checker),
            "first_call_checker_sample": first_checker[:6],
            "steady_call_checker_functions": len(steady_checker),
            "steps": sorted(set(first_steps)),
            "forward_s": summary(samples["forward"]), "bare_s": summary(samples["bare"]),
            "forward_over_bare": paired_ratio(samples["forward"], samples["bare"]),
            "aa": paired_ratio(samples["bare_aa"], samples["bare"]),
            "rounds": rounds, "inner": inner,
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("memory", "typecheck-path"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--shape", action="append", required=True)
    parser.add_argument("--impl", default="explicit")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=15, help="rounds at large shapes")
    parser.add_argument("--small-rounds", type=int, default=201, help="rounds at small shapes")
    parser.add_argument("--target", type=float, default=0.002,
                        help="seconds per timed block at small shapes")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: leave)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    out = memory(args) if args.mode == "memory" else typecheck_path(args)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
