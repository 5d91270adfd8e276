"""Shared pieces of the benchmarks: interleaved timing, medians, the machine, table rendering.

Every comparison is interleaved: one round runs each variant once, in an order shuffled afresh
every round (seeded), so slow drift on a shared machine hits all variants alike and no variant
always follows the same neighbour (an expensive variant leaves cold caches behind it). Figures
are medians over rounds; ratios are medians of the per-round ratios (paired), not ratios of
medians.
"""

from __future__ import annotations

import gc
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


# ---- configuration --------------------------------------------------------------------------


@dataclass
class Config:
    """What run.py was asked for. `quick` trades repeats for speed (a smoke run)."""

    device: str = "cpu"
    quick: bool = False
    threads: int | None = None
    """torch.set_num_threads for the forward timings (sections 1, 2); None leaves the default."""
    rejection_only: bool = False
    """Section 4 times only the goal's figure (exitfirst, once per module), not full verifies."""
    kernel_runs: int | None = None
    """Sections 8 and 9: verify runs per figure (None: their defaults)."""
    before: str | None = None
    """Section 14: a git revision to time beside this code (a worktree of it, on PYTHONPATH)."""
    log: Callable[[str], None] = field(default=lambda line: print(line, file=sys.stderr,
                                                                  flush=True))

    def pick(self, full: Any, quick: Any) -> Any:
        return quick if self.quick else full

    @property
    def profile(self) -> str:
        """The verify profile: `default` (the goals are stated for it); `smoke` when quick."""
        return self.pick("default", "smoke")

    def probe_args(self) -> list[str]:
        return ["--threads", str(self.threads)] if self.threads else []

    def sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()


# ---- timing ---------------------------------------------------------------------------------


@dataclass
class Variant:
    """One thing to time: `fn` is called `inner` times per round, between `enter` and `exit`
    (which are not timed: e.g. flipping a switch the variant needs)."""

    fn: Callable[[], object]
    enter: Callable[[], None] | None = None
    exit: Callable[[], None] | None = None


def _as_variant(v: Variant | Callable[[], object]) -> Variant:
    return v if isinstance(v, Variant) else Variant(v)


def _block(v: Variant, inner: int, sync: Callable[[], None]) -> float:
    if v.enter is not None:
        v.enter()
    try:
        sync()
        start = time.perf_counter()
        for _ in range(inner):
            v.fn()
        sync()
        return (time.perf_counter() - start) / inner
    finally:
        if v.exit is not None:
            v.exit()


def interleave(variants: dict[str, Variant | Callable[[], object]], *, rounds: int,
               target_s: float, warmup: int = 3,
               sync: Callable[[], None] = lambda: None) -> tuple[dict[str, list[float]], int]:
    """Seconds per call of each variant, one sample per round, the variants interleaved.

    Warm-up calls (not recorded) come first. `inner` (calls per timed block, the same for
    every variant) is chosen so that the slowest variant's block takes about `target_s`. The
    order within a round is shuffled (seeded, so reruns use the same orders). Garbage
    collection is off while timing. Returns (samples per variant, inner).
    """
    vs = {name: _as_variant(v) for name, v in variants.items()}
    names = list(vs)
    for _ in range(warmup):
        for name in names:
            _block(vs[name], 1, sync)
    slowest = max(statistics.median(_block(vs[n], 1, sync) for _ in range(3)) for n in names)
    inner = max(1, min(100_000, round(target_s / max(slowest, 1e-9))))
    samples: dict[str, list[float]] = {name: [] for name in names}
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        order = list(names)
        shuffler = random.Random(0)
        for _ in range(rounds):
            shuffler.shuffle(order)
            for name in order:
                samples[name].append(_block(vs[name], inner, sync))
    finally:
        if was_enabled:
            gc.enable()
    return samples, inner


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def quartiles(xs: Sequence[float]) -> tuple[float, float]:
    if len(xs) < 2:
        return (xs[0], xs[0]) if xs else (float("nan"), float("nan"))
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return float(q[0]), float(q[2])


def paired_ratio(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """Median and quartiles of a[i] / b[i] over rounds."""
    ratios = [x / y for x, y in zip(a, b, strict=True)]
    lo, hi = quartiles(ratios)
    return {"median": median(ratios), "q1": lo, "q3": hi}


def paired_diff(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """Median and quartiles of a[i] - b[i] over rounds."""
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    lo, hi = quartiles(diffs)
    return {"median": median(diffs), "q1": lo, "q3": hi}


def summary(xs: Sequence[float]) -> dict[str, Any]:
    lo, hi = quartiles(xs)
    return {"median": median(xs), "q1": lo, "q3": hi, "n": len(xs)}


# ---- the machine ----------------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_commit() -> str | None:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, text=True, capture_output=True, timeout=10).stdout
        return head + ("+dirty" if dirty.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def machine(device: str) -> dict[str, Any]:
    import attnspec

    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable,
        "cpu": _cpu_model(),
        "torch": torch.__version__,
        "torch_num_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "attnspec": attnspec.__version__,
        "typecheck": attnspec.typecheck_enabled(),
        "git": _git_commit(),
        "device": device,
        "cuda_available": torch.cuda.is_available(),
        "load_average_at_start": load_average(),
    }
    if device == "cuda" and torch.cuda.is_available():
        info["device_name"] = torch.cuda.get_device_name(0)
        info["cuda"] = torch.version.cuda
    elif device == "cuda":
        info["device_name"] = "none: torch sees no CUDA device"
    else:
        info["device_name"] = info["cpu"]
    return info


# ---- tables ---------------------------------------------------------------------------------


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]],
          note: str = "") -> dict[str, Any]:
    return {"title": title, "headers": list(headers), "rows": [[str(c) for c in r] for r in rows],
            "note": note}


def markdown_table(t: dict[str, Any]) -> str:
    def esc(cell: str) -> str:
        return cell.replace("|", "\\|")

    lines = []
    if t.get("title"):
        lines += [f"**{t['title']}**", ""]
    lines.append("| " + " | ".join(esc(h) for h in t["headers"]) + " |")
    lines.append("|" + "|".join("---" for _ in t["headers"]) + "|")
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in t["rows"]]
    if t.get("note"):
        lines += ["", t["note"]]
    return "\n".join(lines)


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f}"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.2f}"


def ratio_text(r: dict[str, float], digits: int = 3) -> str:
    return f"{r['median']:.{digits}f} ({r['q1']:.{digits}f}–{r['q3']:.{digits}f})"


def status(ok: bool | None, *, noisy: bool = False) -> str:
    """PASS / MISS; INCONCLUSIVE where the A/A control's own difference is at least half the
    goal's margin (the measurement cannot resolve the goal); — where no goal applies."""
    if ok is None:
        return "—"
    if noisy:
        return "INCONCLUSIVE"
    return "PASS" if ok else "MISS"


def python_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    return env


def run_probe(args: Sequence[str], env: dict[str, str] | None = None,
              timeout: float = 600) -> dict[str, Any]:
    """Run benchmarks/bench_probe.py in a fresh interpreter; it prints one JSON object last."""
    import json

    cmd = [sys.executable, os.path.join(HERE, "bench_probe.py"), *args]
    done = subprocess.run(cmd, cwd=ROOT, env=env or python_env(), text=True,
                          capture_output=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))
