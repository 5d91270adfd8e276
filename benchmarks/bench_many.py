"""Section 16: many targets. 100 small targets judged three ways, interleaved in one run:
100 separate `attnspec verify TARGET` processes one after another, `attnspec verify DIR --jobs
2` (judges forked on this machine), and `--engine ray` on a local cluster of two nodes of one
CPU each (started once for the section). Also the memory of one lane (a judge, its zygote and
its worker), as PSS (shared pages split between the processes sharing them), and whether any
verdict differs between the three."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench_common import ROOT as _ROOT
from bench_common import Config, median, status, table
from bench_verify import _rotated

ROOT = Path(_ROOT)
SPEEDUP_GOAL = 2.0  # --jobs 2 against one process per target, on 2 cores
RAY_GOAL = 1.2  # the Ray engine against --jobs 2
OPTIONS = ["--only", "width,causality,oracle", "--max-examples", "10", "--seed", "0",
           "--no-database", "--no-progress"]


def _folder(scratch: Path, count: int) -> Path:
    """`count` targets: the correct and broken modules of tests/, each once, then again with a
    comment of their own (another sha256, so each is judged) until there are enough."""
    folder = scratch / "candidates"
    folder.mkdir()
    sources = sorted(p for kind in ("good", "broken") for p in (ROOT / "tests" / kind).glob("*.py")
                     if not p.name.startswith("_"))
    for kind in ("good", "broken"):
        for helper in (ROOT / "tests" / kind).glob("_*.py"):
            shutil.copy(helper, folder / helper.name)
    for k in range(count):
        source = sources[k % len(sources)]
        copy = k // len(sources)
        name = source.stem if copy == 0 else f"{source.stem}_copy{copy}"
        text = source.read_text() + ("" if copy == 0 else f"\n# copy {copy}\n")
        (folder / f"{name}.py").write_text(text)
    return folder


def _verdicts(path: Path) -> dict[str, Any]:
    return {Path(str(line["target"])).name: line["properties"]
            for line in map(json.loads, path.read_text().splitlines())}


class _Memory:
    """The largest PSS of the judges' lanes seen while a run goes, sampled every 0.2 s."""

    def __init__(self) -> None:
        self.most_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> _Memory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            total = 0
            for entry in Path("/proc").glob("[0-9]*"):
                try:
                    name = (entry / "comm").read_text().strip()
                    if name not in ("attnspec-judge", "attnspec-zygote", "attnspec-worker"):
                        continue
                    for row in (entry / "smaps_rollup").read_text().splitlines():
                        if row.startswith("Pss:"):
                            total += int(row.split()[1])
                except (OSError, ValueError):
                    continue
            self.most_kib = max(self.most_kib, total)


def _separate(folder: Path, scratch: Path) -> tuple[float, dict[str, Any]]:
    start = time.perf_counter()
    verdicts: dict[str, Any] = {}
    for path in sorted(folder.glob("*.py")):
        if path.name.startswith("_"):
            continue
        report = scratch / "one.json"
        subprocess.run([sys.executable, "-m", "attnspec", "verify", str(path), *OPTIONS,
                        "--report", str(report)], cwd=ROOT, capture_output=True, check=False)
        data = json.loads(report.read_text())
        verdicts[path.name] = {p["id"]: p["verdict"] for p in data["properties"]}
        report.unlink()
    return time.perf_counter() - start, verdicts


def _many(folder: Path, scratch: Path, *extra: str, env: dict[str, str] | None = None,
          ) -> tuple[float, dict[str, Any], int]:
    report = scratch / "many.jsonl"
    with _Memory() as memory:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "attnspec", "verify", str(folder), *OPTIONS,
                        "--report", str(report), *extra], cwd=ROOT, capture_output=True,
                       check=False, env=env)
        wall = time.perf_counter() - start
    verdicts = _verdicts(report)
    report.unlink()
    return wall, verdicts, memory.most_kib


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def many(cfg: Config) -> dict[str, Any]:
    """The walls of 100 targets three ways (medians of interleaved rounds), lane memory, and
    verdict agreement."""
    import importlib.util

    count = cfg.pick(100, 12)
    rounds = cfg.pick(3, 1)
    scratch = Path(tempfile.mkdtemp(prefix="attnspec-bench-many-"))
    folder = _folder(scratch, count)
    has_ray = importlib.util.find_spec("ray") is not None and shutil.which("ray") is not None
    env = {**os.environ, "RAY_DISABLE_USAGE_STATS": "1", "RAY_AUTH_MODE": "token",
           "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    ways = ["separate", "jobs2"] + (["ray"] if has_ray else [])
    walls: dict[str, list[float]] = {w: [] for w in ways}
    found: dict[str, dict[str, Any]] = {}
    memory: list[int] = []
    address = f"127.0.0.1:{_free_port()}"
    try:
        if has_ray:
            for args in (["--head", f"--port={address.rsplit(':', 1)[1]}",
                          "--include-dashboard=false"], [f"--address={address}"]):
                subprocess.run(["ray", "start", *args, "--num-cpus=1", "--disable-usage-stats"],
                               env=env, capture_output=True, check=True, timeout=180)
        for r in range(rounds):
            for way in _rotated(list(ways), r):
                cfg.log(f"  many round {r + 1}/{rounds}: {way} ({count} targets)")
                if way == "separate":
                    wall, verdicts = _separate(folder, scratch)
                elif way == "jobs2":
                    wall, verdicts, most = _many(folder, scratch, "--jobs", "2")
                    memory.append(most)
                else:
                    wall, verdicts, _ = _many(folder, scratch, "--engine", "ray",
                                              "--ray-address", address, env=env)
                walls[way].append(wall)
                found.setdefault(way, verdicts)
    finally:
        if has_ray:
            subprocess.run(["ray", "stop", "--force"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(scratch, ignore_errors=True)
    medians = {w: median(v) for w, v in walls.items()}
    speedup = median([s / j for s, j in zip(walls["separate"], walls["jobs2"], strict=True)])
    differ = sorted({name for way in found for name in found[way]
                     if found[way][name] != found["separate"].get(name)})
    goals = [{"goal": f"`verify DIR --jobs 2` at least {SPEEDUP_GOAL:g}x faster than {count} "
                      "separate `attnspec verify` processes (2 cores)",
              "measured": f"{speedup:.2f}x (median of {rounds} paired rounds)",
              "status": status(speedup >= SPEEDUP_GOAL if count == 100 else None)},
             {"goal": "no verdict differs between the ways", "measured":
              f"{len(differ)} targets differ" + (f": {', '.join(differ[:5])}" if differ else ""),
              "status": status(not differ)}]
    if "ray" in walls:
        over = median([r / j for r, j in zip(walls["ray"], walls["jobs2"], strict=True)])
        goals.append({"goal": f"--engine ray on a local 2-node cluster at most "
                              f"{(RAY_GOAL - 1) * 100:.0f} % slower than --jobs 2",
                      "measured": f"{over:.2f}x --jobs 2's wall (median of {rounds} paired "
                                  "rounds)",
                      "status": status(over <= RAY_GOAL if count == 100 else None)})
    lane_mib = max(memory) / 1024 / 2 if memory else float("nan")
    goals.append({"goal": "memory per lane bounded (stated)",
                  "measured": f"at most {lane_mib:.0f} MiB PSS per lane (judge, zygote and "
                              "worker; the most of 2 lanes at once, halved)",
                  "status": status(None)})
    rows = [[w, f"{medians[w]:.1f}", f"{medians[w] / count:.2f}",
             ", ".join(f"{x:.1f}" for x in walls[w])] for w in ways]
    tables = [table(f"{count} targets (tests/good and tests/broken, copies made distinct), "
                    f"`{' '.join(OPTIONS)}`: median of {rounds} interleaved rounds",
                    ["way", "wall s (median)", "s per target", "walls s"], rows)]
    return {"tables": tables, "goals": goals,
            "data": {"walls": walls, "medians_s": medians, "speedup": speedup,
                     "lane_pss_mib": lane_mib, "differ": differ, "targets": count}}
