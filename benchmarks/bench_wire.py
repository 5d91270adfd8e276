"""Section 7: the wire's memory. Peak RSS of the runner and of its worker for one forward of a
normal example (the reference, (1, 64, 64)), of a legitimate 64 MiB answer (a subject that
returns x.clone() for a (1, 4096, 4096) float32 input) and of a subject whose output is 512 MiB
(a (1, 64, 64, 32768) float32 tensor for a (1, 64, 64) input), each in a fresh runner process.

    python benchmarks/bench_wire.py probe normal|big|huge   (one measurement; one JSON line)

The probe runs attnspec from whatever `import attnspec` finds, so PYTHONPATH=/path/to/src
measures another checkout (the figures before a change)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MIB = 2**20

BIG = '''"""Its input back, as a fresh tensor: an answer as large as the request allows."""
from torch import nn

class Echo(nn.Module):
    def forward(self, x):
        return x.clone()

def build(n_embd, n_head):
    return Echo()
'''

HUGE = '''"""An output of 4 bytes x 32768 per input element: 512 MiB for a (1, 64, 64) input."""
import torch
from torch import nn

class Huge(nn.Module):
    def forward(self, x):
        return torch.zeros(*x.shape, 32768, dtype=x.dtype)

def build(n_embd, n_head):
    return Huge()
'''


def _hwm(pid: int | str) -> int:
    """Peak resident set of a process (VmHWM), in bytes."""
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise KeyError("VmHWM")


def probe(kind: str) -> dict[str, Any]:
    """One forward in a fresh Worker; the peaks, and the answer."""
    import tempfile

    from attnspec.properties.base import Example, _inputs
    from attnspec.runner.worker import SubjectCrash, Worker

    with tempfile.TemporaryDirectory() as tmp:
        target = "attnspec.subjects.reference"
        if kind in ("big", "huge"):
            target = os.path.join(tmp, f"{kind}_output.py")
            Path(target).write_text(BIG if kind == "big" else HUGE)
        ex = (Example(B=1, T=4096, C=4096, H=4, seed=1) if kind == "big"
              else Example(B=1, T=64, C=64, H=4, seed=1))
        worker = Worker(target, timeout=120)
        try:
            runner_before, worker_before = _hwm("self"), _hwm(worker.pid or 0)
            pid = worker.pid
            try:
                (result,) = worker.run({"build": ex.build(), "steps": [
                    {"op": "forward", "x": _inputs(ex)}]})["results"]
                answer = f"out {tuple(result['out'].shape)} on {result['out'].device.type}"
            except SubjectCrash as crash:
                answer = f"{crash.kind}: {crash}"
            try:
                worker_peak: int | None = _hwm(pid or 0)
            except OSError:  # the worker died (the OOM killer, say)
                worker_peak = None
            return {"kind": kind, "runner_peak": _hwm("self"), "runner_before": runner_before,
                    "worker_peak": worker_peak, "worker_before": worker_before,
                    "answer": answer[:200]}
        finally:
            worker.close()


def wire(cfg: Any) -> dict[str, Any]:
    """Peak RSS of runner and worker, normal vs 512 MiB output, each in a fresh process."""
    from bench_common import table

    rows, data = [], {}
    for kind in ("normal", "big", "huge"):
        done = subprocess.run([sys.executable, __file__, "probe", kind], text=True,
                              capture_output=True, timeout=600, env=dict(os.environ))
        if done.returncode != 0:
            raise RuntimeError(f"bench_wire probe {kind} exited {done.returncode}:\n"
                               f"{done.stderr[-2000:]}")
        got = json.loads(done.stdout.strip().splitlines()[-1])
        data[kind] = got
        peak = got["worker_peak"]
        rows.append([kind, f"{got['runner_peak'] / MIB:,.0f}",
                     f"{(got['runner_peak'] - got['runner_before']) / MIB:,.0f}",
                     "died" if peak is None else f"{peak / MIB:,.0f}",
                     "—" if peak is None else f"{(peak - got['worker_before']) / MIB:,.0f}",
                     got["answer"]])
        cfg.log(f"  {kind}: runner {got['runner_peak'] / MIB:,.0f} MiB, worker "
                f"{'died' if peak is None else f'{peak / MIB:,.0f} MiB'}: {got['answer']}")
    tables = [table(
        "One forward in a fresh runner and worker, float32: peak RSS (VmHWM) in MiB, and its "
        "rise during the request",
        ["subject", "runner peak", "runner rise", "worker peak", "worker rise", "answer"],
        rows, note="normal: the reference on (1, 64, 64). big: x.clone() on (1, 4096, 4096), "
        "64 MiB each way. huge: a (1, 64, 64, 32768) output for a (1, 64, 64) input, 512 MiB.")]
    return {"tables": tables, "goals": [], "data": data}


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "probe":
        print(json.dumps(probe(sys.argv[2])))
    else:
        sys.exit(__doc__)
