"""`nox -s ray`: many targets over a Ray cluster of two nodes on this machine, one node killed
partway; the JSONL must hold each target exactly once, with the verdicts the local engine gives.

1. A folder of 20 targets: correct (tests/good), broken (tests/broken) and hostile
   (tests/hostile), with the helpers they import.
2. The local engine judges it (`--jobs 2`): the verdicts to match.
3. `ray start --head` and a second `ray start --address` (its raylet on a port of its own);
   `attnspec verify DIR --engine ray --ray-address ...`; once N lines are written, the second
   node's raylet is killed (SIGKILL); its tasks are rerun on the head.
4. Checks: every target once, the same verdicts as the local run, the node killed while targets
   were left, lines from both nodes; `ray stop` at the end, whatever happened.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOOD = ["einops_heads", "blocked_online_softmax", "batch_position_rounding", "hf_llama31_v2",
        "hf_qwen3_v2", "independent_hooks_v2", "hf_gpt_oss_v2", "batch_position_rounding_v2"]
BROKEN = ["global_mean_leak", "head_split_interleaved", "first_key_dropped", "dropout_in_eval",
          "biases_ignored_in_forward", "batch_time_view_mixup", "gqa_tiled", "corner_top_left"]
HOSTILE = ["changes_the_environment", "closes_its_fds", "forks_holding_the_socket",
           "lies_about_shape"]
OPTIONS = ["--only", "width,causality,oracle", "--max-examples", "10", "--seed", "0",
           "--no-database", "--no-progress", "--timeout", "10"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _folder(scratch: Path) -> Path:
    folder = scratch / "candidates"
    folder.mkdir()
    for kind, names in (("good", GOOD), ("broken", BROKEN), ("hostile", HOSTILE)):
        for name in names:
            shutil.copy(ROOT / "tests" / kind / f"{name}.py", folder / f"{name}.py")
        for helper in (ROOT / "tests" / kind).glob("_*.py"):
            shutil.copy(helper, folder / helper.name)
    return folder


def _lines(path: Path) -> list[dict[str, object]]:
    text = path.read_text() if path.exists() else ""
    if text and not text.endswith("\n"):
        raise SystemExit(f"{path}: ends with half a line")
    return [json.loads(raw) for raw in text.splitlines()]


def _raylet(port: int) -> list[int]:
    """The raylet listening as the second node (its --node_manager_port)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"raylet") and f"--node_manager_port={port}".encode() in argv:
            found.append(int(entry.name))
    return found


def _ray(*args: str, env: dict[str, str]) -> None:
    done = subprocess.run(["ray", *args], env=env, capture_output=True, text=True, timeout=180)
    if done.returncode != 0:
        raise SystemExit(f"ray {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kill-after", type=int, default=5,
                        help="lines written before the second node is killed (5)")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="attnspec-ray-check-"))
    # Token authentication, with a token of this check's own that every node and the driver
    # are given (Ray 2.60 turns it on for a head once ~/.ray/auth_token exists, and a second
    # `ray start` on the same machine does not read that file).
    env = {**os.environ, "ATTNSPEC_HOSTILE_DIR": str(scratch), "RAY_DISABLE_USAGE_STATS": "1",
           "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    folder = _folder(scratch)
    targets = sorted(str(p) for p in folder.glob("*.py") if not p.name.startswith("_"))
    assert len(targets) == 20, targets
    verify = [sys.executable, "-m", "attnspec", "verify", str(folder), *OPTIONS]

    started = time.monotonic()
    local = scratch / "local.jsonl"
    subprocess.run([*verify, "--jobs", "2", "--report", str(local)], env=env, check=False,
                   stdout=subprocess.DEVNULL, timeout=1800)
    expected = {str(line["target"]): line for line in _lines(local)}
    print(f"local engine: {len(expected)} lines in {time.monotonic() - started:.1f} s",
          flush=True)

    port, node_port = _free_port(), _free_port()
    address = f"127.0.0.1:{port}"
    failures: list[str] = []
    try:
        _ray("start", "--head", f"--port={port}", "--num-cpus=1", "--include-dashboard=false",
             "--disable-usage-stats", env=env)
        _ray("start", f"--address={address}", "--num-cpus=1", f"--node-manager-port={node_port}",
             "--disable-usage-stats", env=env)
        report = scratch / "ray.jsonl"
        started = time.monotonic()
        run = subprocess.Popen([*verify, "--engine", "ray", "--ray-address", address,
                                "--report", str(report)], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 900
        while len(_lines(report)) < args.kill_after and run.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        before = len(_lines(report))
        killed = _raylet(node_port)
        for pid in killed:
            os.kill(pid, signal.SIGKILL)
        print(f"killed the second node's raylet {killed} after {before} lines, "
              f"{time.monotonic() - started:.1f} s in", flush=True)
        out, _ = run.communicate(timeout=1800)
        seconds = time.monotonic() - started
        lines = _lines(report)
        print(out[-3000:])
        print(f"ray engine: {len(lines)} lines in {seconds:.1f} s, exit {run.returncode}")
        names = [str(line["target"]) for line in lines]
        if sorted(names) != targets:
            failures.append(f"the JSONL holds {len(names)} lines for {len(set(names))} targets "
                            f"of {len(targets)}: each target must be there exactly once")
        if not killed or before >= len(targets):
            failures.append("the second node was not killed while targets were left")
        nodes = {str(line.get("node")) for line in lines}
        if len(nodes) < 2:
            failures.append(f"every line came from one node ({nodes}): nothing ran on the other")
        for line in lines:
            stem = Path(str(line["target"])).stem
            kind = "good" if stem in GOOD else "broken" if stem in BROKEN else "hostile"
            if kind != "hostile" and line["status"] != {"good": "conforms",
                                                         "broken": "fails"}[kind]:
                failures.append(f"{line['target']} ({kind}): {line['status']} "
                                f"{line['conclusion']}")
            want = expected.get(str(line["target"]))
            if want is None or line["properties"] != want["properties"] \
                    or line["status"] != want["status"]:
                failures.append(f"{line['target']}: {line['status']} {line['properties']}, the "
                                f"local engine gave {want and want['status']} "
                                f"{want and want['properties']}")
    finally:
        subprocess.run(["ray", "stop", "--force"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(scratch, ignore_errors=True)
    for failure in failures:
        print("FAILED:", failure)
    if not failures:
        print("ray check passed: each of 20 targets once, the local engine's verdicts, "
              "a node killed partway")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
