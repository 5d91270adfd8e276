"""CUDA conformance and benchmarks: `nox -s cuda` or `python scripts/cuda_check.py [--budget S]`.

Without a CUDA device (`torch.cuda.is_available()` is False, as on CI) it prints one line,
"no CUDA device: skipped", and exits 0 without touching anything. With one, it runs each step
below in its own subprocess, with a timeout, and records the command, its exit code, its wall
time and its verdicts:

1. `device_agreement`: the reference, CPU against CUDA;
2. the witness: `tests/broken/cuda_only_offset.py` must fail `device_agreement` (exit 1);
3. `attnspec verify` on every built-in subject (`attnspec.subjects.BUILTIN`) on CUDA, in
   float32, bfloat16 and float16;
4. the `sdpa` subject with SDPA pinned to each backend (flash, memory-efficient, math), in
   float16 and bfloat16;
5. the kernel subjects (PROTOCOL = "kernel") on CUDA, a short verify each (--max-examples
   10): `kernel_sdpa` with SDPA pinned to each backend the device has (flash, memory-efficient,
   cuDNN; flash and cuDNN in float16 and bfloat16, efficient in float32 too), and
   `kernel_sdpa_lower_right`, `kernel_flex` and `kernel_blockwise` in float32, bfloat16 and
   float16 (each through a wrapper that adds float16 to its DTYPES; a pinned backend's
   `supports` leaves out the cases it has no kernel for, and says which);
6. forward timings per dtype: the reference (explicit path and `kernel="sdpa"` fast path)
   against bare SDPA at (B, T, C, H) = (8, 256, 768, 12) and (1, 1024, 768, 12);
7. `benchmarks/run.py --device cuda`, sections `kernels` and `checks`.

`--only modules,kernels,bench` runs only those groups (steps 1-4, step 5, steps 6-7).

Steps that have not started when the budget (--budget, 450 s) is spent, or with under 10 s of
it left, are skipped, and say so; a running step is stopped at the budget (Ctrl-C first, so
that verify writes its report and prints its table), so the whole run ends within 8 minutes.
Then it writes docs/cuda.md and docs/cuda.json and prints the Markdown. Exit status: 0 when
every step that ran ended as expected (or there is no CUDA device), 1 otherwise.

It uses whatever torch is installed: under nox that is what constraints.txt pins, which may be
a CPU build even on a GPU machine; then run this script from an environment whose torch has
CUDA.
"""

from __future__ import annotations

import time

_STARTED = time.monotonic()  # the budget counts from here, before torch is imported

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import shlex  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from dataclasses import asdict, dataclass, field  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
BUDGET_S = 450.0
"""Steps start only while less than this has passed (7.5 minutes)."""
MIN_STEP_S = 10.0
"""A step is not started with less than this left of the budget."""
GRACE_S = 10.0
"""After Ctrl-C at a timeout, how long a step has to write its report before it is killed."""
SEED = 0
MAX_EXAMPLES = 30
CUDA_DTYPES = ("float32", "bfloat16", "float16")
HALF_DTYPES = ("float16", "bfloat16")
BACKENDS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "math": "MATH"}
KERNEL_MAX_EXAMPLES = 10  # a smoke verify per kernel step: 7 steps in about 3 minutes
KERNEL_BACKENDS = {"flash": ("FLASH_ATTENTION", HALF_DTYPES),
                   "efficient": ("EFFICIENT_ATTENTION", CUDA_DTYPES),
                   "cudnn": ("CUDNN_ATTENTION", HALF_DTYPES)}
KERNEL_SUBJECTS = ("kernel_sdpa_lower_right", "kernel_flex", "kernel_blockwise")
KERNEL_CONSTANTS = ("PROTOCOL", "LAYOUT", "CAUSAL", "WINDOW", "LSE", "LSE_GRAD", "LSE_LAYOUT",
                    "MASKED_ROWS", "BACKWARD", "DETERMINISTIC", "FEATURES", "KNOBS")
GROUPS = ("modules", "kernels", "bench")
BENCH_SHAPES = ((8, 256, 768, 12), (1, 1024, 768, 12))
BENCH_IMPLS = {"explicit": "reference, explicit", "fastpath": 'reference, kernel="sdpa"',
               "sdpa": "bare SDPA module (attnspec.subjects.sdpa)"}
WITNESS = "tests/broken/cuda_only_offset.py"
PROBE_MARK = "cuda_check: "
KERNEL_MARK = "cuda_check kernel: "

# The sdpa subject with SDPA pinned to one backend; `supports` leaves out the head dims for
# which the backend has no kernel at all (that is not a conformance failure), and says which.
WRAPPER = '''"""attnspec.subjects.sdpa with SDPA pinned to SDPBackend.{backend} (cuda_check.py)."""

from __future__ import annotations

import sys
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from attnspec.subjects import sdpa as _sdpa

BACKEND = SDPBackend.{backend}
DTYPES = ({dtypes})
_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
_RUNS: dict[int, bool] = {{}}


class Pinned(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: Tensor) -> Tensor:
        with sdpa_kernel(BACKEND):
            out: Tensor = self.inner(x)
        return out


def build(n_embd: int, n_head: int) -> nn.Module:
    return Pinned(_sdpa.build(n_embd, n_head))


def export_weights(module: nn.Module) -> Mapping[str, Tensor]:
    assert isinstance(module, Pinned)
    return _sdpa.export_weights(module.inner)


def supports(n_embd: int, n_head: int) -> bool:
    head_dim = n_embd // n_head
    if head_dim not in _RUNS:
        runs = True
        for dtype in DTYPES:
            q = torch.randn(1, 1, 3, head_dim, device=_DEVICE, dtype=dtype)
            try:
                with sdpa_kernel(BACKEND):
                    F.scaled_dot_product_attention(q, q, q, is_causal=True)
            except RuntimeError:
                runs = False
        _RUNS[head_dim] = runs
        print(f"{mark}{{BACKEND.name}} head_dim={{head_dim}} {{'runs' if runs else 'no kernel'}}",
              file=sys.stderr, flush=True)
    return _RUNS[head_dim]
'''


# A built-in kernel subject with float16 added to its DTYPES and, for kernel_sdpa, SDPA pinned
# to one backend; a pinned backend's `supports` probes each kind of case once (dtype, head dim,
# grouped heads, lengths, causal, backward) and leaves out those it has no kernel for.
KERNEL_WRAPPER = '''"""attnspec.subjects.{base}, float16 too{pinned_doc} (cuda_check.py)."""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from attnspec.subjects import {base} as _base

for _name in {constants!r}:
    if hasattr(_base, _name):
        globals()[_name] = getattr(_base, _name)
DTYPES = ({dtypes})
BACKEND = {backend}
_PROBED: dict[tuple[Any, ...], bool] = {{}}


def _pinned() -> Any:
    if BACKEND is None:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(getattr(SDPBackend, BACKEND))


def attention(q: Tensor, k: Tensor, v: Tensor, **kw: Any) -> Any:
    with _pinned():
        return _base.attention(q, k, v, **kw)


def _runs(case: dict[str, Any]) -> bool:
    dtype = getattr(torch, case["dtype"])
    H, G, D = case["H"], case["G"], case["D"]
    # A few rows, keeping what a backend may refuse: Tq vs Tk (cross), Tk = 0.
    Tq = max(1, min(case["Tq"], 4))
    Tk = 0 if case["Tk"] == 0 else Tq if case["Tk"] == case["Tq"] else (
        Tq + 2 if case["Tk"] > case["Tq"] else max(1, Tq - 2))
    gen = torch.Generator(device=case["device"]).manual_seed(0)
    q = torch.randn(1, H, max(Tq, 1), D, device=case["device"], dtype=dtype, generator=gen)
    k = torch.randn(1, G, Tk, D, device=case["device"], dtype=dtype, generator=gen)
    grad = bool(getattr(_base, "BACKWARD", True))
    q, k = q.requires_grad_(grad), k.requires_grad_(grad)
    try:
        with _pinned():
            o = F.scaled_dot_product_attention(q, k, k, is_causal=case["causal"],
                                               enable_gqa=G < H)
            if grad:
                o.sum().backward()
    except RuntimeError:
        return False
    return True


def supports(case: dict[str, Any]) -> bool:
    base = getattr(_base, "supports", None)
    if base is not None and not base(case):
        return False
    if BACKEND is None:
        return True
    kind = (case["dtype"], case["D"], case["G"] < case["H"], case["Tq"] != case["Tk"],
            case["Tk"] == 0, case["causal"])
    if kind not in _PROBED:
        _PROBED[kind] = _runs(case)
        print(f"{mark}{{BACKEND}} dtype={{kind[0]}} head_dim={{kind[1]}} gqa={{kind[2]}} "
              f"cross={{kind[3]}} no_keys={{kind[4]}} causal={{kind[5]}} "
              f"{{'runs' if _PROBED[kind] else 'no kernel'}}", file=sys.stderr, flush=True)
    return _PROBED[kind]
'''


# ---- steps ----------------------------------------------------------------------------------


@dataclass
class Step:
    """One subprocess. `expect` is the exit code that means success; `verdict` names the
    property whose verdict must be `pass` (or `fail` for a witness) as well."""

    name: str
    title: str
    argv: list[str]
    timeout: float
    expect: int = 0
    report: str | None = None
    verdict: tuple[str, str] | None = None
    kind: str = "verify"  # verify | bench | runpy
    section: str | None = None  # the benchmarks/run.py section this step measures
    # filled in by run_step
    shown: str = ""
    exit_code: int | None = None
    wall_s: float | None = None
    status: str = "not run"
    note: str = ""
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    report_status: str | None = None
    stdout_tail: str = ""
    stderr_tail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Plan:
    device: str
    dtypes: tuple[str, ...]
    half_dtypes: tuple[str, ...]
    max_examples: int
    bench_warmup: int
    bench_runs: int
    runpy_args: tuple[str, ...]
    dry_run: bool
    budget: float
    tmp: str
    kernel_max_examples: int = KERNEL_MAX_EXAMPLES
    groups: tuple[str, ...] = GROUPS


def _verify(target: str, plan: Plan, report: str, *extra: str,
            max_examples: int | None = None) -> list[str]:
    return [sys.executable, "-m", "attnspec", "verify", target, *extra,
            "--max-examples", str(max_examples or plan.max_examples), "--no-database",
            "--seed", str(SEED), "--no-progress", "--report", report]


def _kernel_wrapper(plan: Plan, base: str, backend: str | None, dtypes: Sequence[str],
                    name: str) -> str:
    target = os.path.join(plan.tmp, f"{name}.py")
    with open(target, "w") as handle:
        handle.write(KERNEL_WRAPPER.format(
            base=base, constants=KERNEL_CONSTANTS, backend=repr(backend), mark=KERNEL_MARK,
            dtypes="".join(f"torch.{d}, " for d in dtypes),
            pinned_doc="" if backend is None else f", SDPA pinned to SDPBackend.{backend}"))
    return target


def kernel_steps(plan: Plan) -> list[Step]:
    """Step 5: the kernel subjects on the device, a short verify each."""
    from torch.nn.attention import SDPBackend

    steps = []
    runs: list[tuple[str, str, str | None, tuple[str, ...], str]] = []
    for short, (backend, dtypes) in KERNEL_BACKENDS.items():
        wanted = tuple(d for d in dtypes if d in plan.dtypes)
        if getattr(SDPBackend, backend, None) is None:  # an older torch: say so, do not fail
            steps.append(Step(f"kernel sdpa {short}", f"kernel_sdpa under SDPBackend.{backend}",
                              [], timeout=0, status="skipped",
                              note=f"torch {torch.__version__} has no SDPBackend.{backend}"))
            continue
        runs.append((f"kernel sdpa {short}", "kernel_sdpa", backend, wanted,
                     f"kernel_sdpa under sdpa_kernel(SDPBackend.{backend})"))
    for base in KERNEL_SUBJECTS:
        runs.append((f"kernel {base.removeprefix('kernel_')}", base, None, plan.dtypes,
                     f"attnspec.subjects.{base} on {plan.device}"))
    for name, base, backend, dtypes, title in runs:
        slug = name.replace(" ", "_")
        target = _kernel_wrapper(plan, base, backend, dtypes, slug)
        report = f"{plan.tmp}/{slug}.json"
        steps.append(Step(
            name, title + f" ({', '.join(dtypes)})",
            _verify(target, plan, report, "--device", plan.device, "--dtype", ",".join(dtypes),
                    max_examples=plan.kernel_max_examples),
            timeout=75, report=report))
    return steps


def make_steps(plan: Plan) -> list[Step]:
    steps: list[Step] = []
    if "modules" in plan.groups:
        steps += module_steps(plan)
    if "kernels" in plan.groups:
        steps += kernel_steps(plan)
    if "bench" in plan.groups:
        steps += bench_steps(plan)
    return steps


def module_steps(plan: Plan) -> list[Step]:
    """Steps 1-4: device_agreement, its witness, the built-in modules, the sdpa backends."""
    from attnspec.subjects import BUILTIN

    t = plan.tmp
    steps = [
        Step("device_agreement", "device_agreement: the reference, CPU against CUDA",
             _verify("attnspec.subjects.reference", plan, f"{t}/device_agreement.json",
                     "--only", "device_agreement"),
             timeout=150, report=f"{t}/device_agreement.json",
             verdict=("device_agreement", "pass")),
        Step("witness", f"witness: {WITNESS} must fail device_agreement",
             _verify(WITNESS, plan, f"{t}/witness.json", "--only", "device_agreement"),
             timeout=150, expect=1, report=f"{t}/witness.json",
             verdict=("device_agreement", "fail")),
    ]
    for name in BUILTIN:
        report = f"{t}/{name}.json"
        steps.append(Step(
            f"verify {name}", f"attnspec.subjects.{name} on {plan.device}",
            _verify(f"attnspec.subjects.{name}", plan, report, "--device", plan.device,
                    "--dtype", ",".join(plan.dtypes)),
            timeout=180, report=report))
    for short, backend in BACKENDS.items():
        target = os.path.join(t, f"sdpa_{short}.py")
        dtypes = ", ".join(f"torch.{d}" for d in HALF_DTYPES)
        with open(target, "w") as handle:
            handle.write(WRAPPER.format(backend=backend, dtypes=dtypes, mark=PROBE_MARK))
        report = f"{t}/sdpa_{short}.json"
        steps.append(Step(
            f"sdpa {short}", f"the sdpa subject under sdpa_kernel(SDPBackend.{backend})",
            _verify(target, plan, report, "--device", plan.device,
                    "--dtype", ",".join(plan.half_dtypes)),
            timeout=150, report=report))
    return steps


def bench_steps(plan: Plan) -> list[Step]:
    """Steps 6-7: forward timings per dtype, and benchmarks/run.py's sections on the device."""
    t = plan.tmp
    steps = [Step(
        "bench dtypes", f"forward time on {plan.device} per dtype: reference vs bare SDPA",
        [sys.executable, os.path.abspath(__file__), "--bench-worker", f"{t}/bench_dtypes.json",
         "--device", plan.device, "--dtype", ",".join(plan.dtypes),
         "--warmup", str(plan.bench_warmup), "--runs", str(plan.bench_runs)],
        timeout=150, kind="bench")]
    for section in ("kernels", "checks"):
        steps.append(Step(
            f"bench {section}", f"benchmarks/run.py on {plan.device}, section {section}",
            [sys.executable, "benchmarks/run.py", "--device", plan.device, *plan.runpy_args,
             "--only", section, "--out", f"{t}/bench_run"],
            timeout=180, kind="runpy", section=section))
    return steps


def _shown(argv: Sequence[str], tmp: str) -> str:
    words = ["python" if i == 0 and a == sys.executable else a for i, a in enumerate(argv)]
    words = [w.replace(os.path.abspath(__file__), "scripts/cuda_check.py") for w in words]
    return shlex.join(words).replace(tmp, "<tmp>")


def _tail(path: str, n: int = 3000) -> str:
    try:
        with open(path, errors="replace") as handle:
            text = handle.read()
    except OSError:
        return ""
    return text[-n:]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Ctrl-C to the step (verify then writes its report and prints its table), then, after
    GRACE_S, SIGKILL to the step's whole process group (its worker included)."""
    try:
        os.kill(proc.pid, signal.SIGINT)
        proc.wait(timeout=GRACE_S)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    _kill_group(proc)
    proc.wait()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Whatever the step left behind in its own session (only processes this step started)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_step(step: Step, plan: Plan, log: Callable[[str], None]) -> None:
    if step.status == "skipped":  # decided when planned (e.g. a backend this torch lacks)
        log(f"{step.name}: skipped, {step.note}")
        return
    step.shown = _shown(step.argv, plan.tmp)
    left = plan.budget - (time.monotonic() - _STARTED)
    if left < MIN_STEP_S:
        step.status = "skipped"
        step.note = (f"not started: {time.monotonic() - _STARTED:.0f} s of the "
                     f"{plan.budget:.0f} s budget had passed")
        log(f"{step.name}: skipped, {step.note}")
        return
    timeout = min(step.timeout, left)
    out_path = os.path.join(plan.tmp, step.name.replace(" ", "_") + ".out")
    err_path = os.path.join(plan.tmp, step.name.replace(" ", "_") + ".err")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    log(f"{step.name}: {step.shown} (timeout {timeout:.0f} s)")
    start = time.monotonic()
    timed_out = False
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(step.argv, cwd=ROOT, stdout=out, stderr=err, env=env,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _stop(proc)
        except BaseException:
            _stop(proc)
            raise
        _kill_group(proc)
    step.wall_s = round(time.monotonic() - start, 1)
    step.exit_code = proc.returncode
    step.stdout_tail, step.stderr_tail = _tail(out_path), _tail(err_path)
    _judge(step, plan, timed_out, out_path, err_path)
    log(f"{step.name}: exit {step.exit_code} in {step.wall_s:.1f} s: {step.status}"
        + (f" ({step.note})" if step.note else ""))


def _judge(step: Step, plan: Plan, timed_out: bool, out_path: str, err_path: str) -> None:
    notes = []
    if step.report and os.path.exists(step.report):
        try:
            with open(step.report) as handle:
                report = json.load(handle)
            step.report_status = report.get("status")
            step.verdicts = list(report.get("properties") or [])
            if report.get("error"):
                notes.append(str(report["error"])[:300])
        except (OSError, ValueError) as error:
            notes.append(f"report unreadable: {error}")
    elif step.report:
        notes.append("no report was written")
    if not step.verdicts and step.kind == "verify":
        step.extra["table"] = _table_from_stdout(_tail(out_path, 20000))
    probes = [line[len(PROBE_MARK):] for line in _tail(err_path, 200000).splitlines()
              if line.startswith(PROBE_MARK)]
    if probes:
        runs = sorted({int(p.split("head_dim=")[1].split()[0]) for p in probes
                       if p.endswith(" runs")})
        none = sorted({int(p.split("head_dim=")[1].split()[0]) for p in probes
                       if p.endswith("no kernel")})
        step.extra["head_dims_with_kernel"], step.extra["head_dims_without_kernel"] = runs, none
        notes.append("head_dim with a kernel: " + (_ranges(runs) or "none")
                     + ("; left out (no kernel): " + _ranges(none) if none else ""))
    kernel_probes = [line[len(KERNEL_MARK):] for line in _tail(err_path, 200000).splitlines()
                     if line.startswith(KERNEL_MARK)]
    if kernel_probes:
        declined = sorted({p.rsplit(" ", 2)[0] for p in kernel_probes if p.endswith("no kernel")})
        step.extra["cases_probed"] = len(set(kernel_probes))
        step.extra["cases_without_kernel"] = declined
        notes.append(f"{len(set(kernel_probes))} kinds of case probed, {len(declined)} left "
                     "out (no kernel)" + (": " + "; ".join(declined[:6]) if declined else "")
                     + (f" and {len(declined) - 6} more" if len(declined) > 6 else ""))
    if step.kind == "bench":
        step.extra["bench"] = _load_json(os.path.join(plan.tmp, "bench_dtypes.json"))
    if step.kind == "runpy":
        results = _load_json(os.path.join(plan.tmp, "bench_run.json")) or {}
        section = (results.get("sections") or {}).get(step.section)
        if section is not None:
            step.extra["section"] = section
            step.extra["machine"] = results.get("machine")
            if "error" in section:
                notes.append("the section raised (see below)")
            if "skipped" in section:
                notes.append(f"the section skipped itself: {section['skipped']}")
    ok = step.exit_code == step.expect
    if ok and step.verdict is not None:
        prop, wanted = step.verdict
        got = next((v.get("verdict") for v in step.verdicts if v.get("id") == prop), None)
        if got != wanted:
            ok = False
            notes.append(f"{prop} was {got or 'not reported'}, not {wanted}")
    if step.kind == "runpy" and "section" not in step.extra:
        ok = False
    no_kernel_at_all = (step.exit_code == 2 and step.extra.get("cases_probed")
                        and len(step.extra["cases_without_kernel"]) == step.extra["cases_probed"])
    if timed_out:
        step.status = "timeout"
        notes.insert(0, f"stopped after {step.wall_s:.0f} s (step timeout or budget)")
    elif plan.dry_run and step.name in ("device_agreement", "witness"):
        step.status = "dry run"
        notes.insert(0, "needs CUDA: expected exit "
                        f"{step.expect} with {step.verdict[1] if step.verdict else '?'} on a GPU")
    elif no_kernel_at_all:  # the pinned backend has no kernel here: nothing to check
        step.status = "skipped"
        notes.insert(0, "the backend has no kernel on this device for any case probed")
    else:
        step.status = "ok" if ok else "UNEXPECTED"
        if not ok and step.exit_code not in (0, 1):
            last = [ln for ln in step.stderr_tail.strip().splitlines() if ln.strip()]
            if last:
                notes.append(last[-1][:300])
    step.note = "; ".join(n.strip().rstrip(".") for n in notes if n.strip())


def _load_json(path: str) -> Any:
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def _ranges(values: Sequence[int]) -> str:
    out: list[str] = []
    for v in values:
        if out and out[-1].split("-")[-1] == str(v - 1):
            out[-1] = out[-1].split("-")[0] + f"-{v}"
        else:
            out.append(str(v))
    return ", ".join(out)


def _table_from_stdout(text: str) -> str:
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("property") and "verdict" in line:
            block = []
            for row in lines[i:]:
                if not row.strip():
                    break
                block.append(row)
            return "\n".join(block)
    return ""


# ---- the forward-time worker (its own subprocess) -------------------------------------------


def _quartiles(xs: Sequence[float]) -> tuple[float, float]:
    if len(xs) < 2:
        return (xs[0], xs[0]) if xs else (float("nan"), float("nan"))
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[2]


def bench_worker(out: str, device: str, dtypes: Sequence[str], warmup: int, runs: int) -> int:
    """Median seconds per forward (torch.no_grad, eval) of the reference's explicit path, its
    fast path and bare SDPA, each call timed alone between synchronizations; the three are
    interleaved in a shuffled order every round, after `warmup` untimed rounds."""
    os.environ["ATTNSPEC_TYPECHECK"] = "1"  # measured as users get it: checks on
    from attnspec import CausalSelfAttention
    from attnspec.subjects import sdpa as sdpa_subject

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    rows: list[dict[str, Any]] = []
    for shape in BENCH_SHAPES:
        B, T, C, H = shape
        for dtype_name in dtypes:
            dtype = getattr(torch, dtype_name)
            torch.manual_seed(SEED)
            builders: dict[str, Callable[[int, int], torch.nn.Module]] = {
                "explicit": lambda c, h: CausalSelfAttention(c, h),
                "fastpath": lambda c, h: CausalSelfAttention(c, h, kernel="sdpa"),
                "sdpa": sdpa_subject.build,
            }
            x = torch.randn(B, T, C, generator=torch.Generator().manual_seed(1))
            x = x.to(device=device, dtype=dtype)
            modules: dict[str, torch.nn.Module] = {}
            errors: dict[str, str] = {}
            samples: dict[str, list[float]] = {}
            for name, make in builders.items():
                try:
                    modules[name] = make(C, H).eval().to(device=device, dtype=dtype)
                except Exception as error:
                    errors[name] = f"{type(error).__name__}: {error}"[:300]
            with torch.no_grad():
                for name in list(modules):
                    try:
                        for _ in range(warmup):
                            modules[name](x)
                        sync()
                    except Exception as error:
                        errors[name] = f"{type(error).__name__}: {error}"[:300]
                        del modules[name]
                order = list(modules)
                samples = {name: [] for name in order}
                shuffler = random.Random(SEED)
                for _ in range(runs):
                    shuffler.shuffle(order)
                    for name in order:
                        sync()
                        start = time.perf_counter()
                        modules[name](x)
                        sync()
                        samples[name].append(time.perf_counter() - start)
            for name in BENCH_IMPLS:
                row: dict[str, Any] = {"shape": list(shape), "dtype": dtype_name, "impl": name,
                                       "error": errors.get(name)}
                s = samples.get(name)
                if s:
                    q1, q3 = _quartiles(s)
                    row.update(median_s=statistics.median(s), q1_s=q1, q3_s=q3, n=len(s))
                    base = samples.get("sdpa")
                    if base:
                        ratios = [a / b for a, b in zip(s, base, strict=True)]
                        r1, r3 = _quartiles(ratios)
                        row["ratio_to_sdpa"] = {"median": statistics.median(ratios),
                                                "q1": r1, "q3": r3}
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
            del modules
            if device == "cuda":
                torch.cuda.empty_cache()
    result = {"device": device, "warmup": warmup, "runs": runs, "rows": rows,
              "typecheck": os.environ["ATTNSPEC_TYPECHECK"],
              "float32_matmul_precision": torch.get_float32_matmul_precision(),
              "method": "time.perf_counter around one forward, torch.cuda.synchronize before "
                        "and after (on cuda); median over runs; the three implementations "
                        "interleaved in a shuffled order (seeded) every round"}
    with open(out, "w") as handle:
        json.dump(result, handle, indent=2)
    return 0


# ---- the record -----------------------------------------------------------------------------


def _git() -> str | None:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, text=True, capture_output=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty.strip() else "")


def _cudnn_version() -> int | None:
    try:
        version: int | None = torch.backends.cudnn.version()  # type: ignore[no-untyped-call]
    except Exception:
        return None
    return version


def machine(plan: Plan) -> dict[str, Any]:
    import attnspec

    info: dict[str, Any] = {
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "cudnn": _cudnn_version(),
        "python": platform.python_version(), "platform": platform.platform(),
        "attnspec": attnspec.__version__, "git": _git(), "cpu_count": os.cpu_count(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "ATTNSPEC_TYPECHECK": os.environ.get("ATTNSPEC_TYPECHECK", "(unset: on)"),
        "CI": os.environ.get("CI"),
    }
    if plan.device == "cuda":
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=torch.cuda.get_device_name(0), gpu_count=torch.cuda.device_count(),
                    capability=f"{props.major}.{props.minor}",
                    gpu_memory_gib=round(props.total_memory / 2**30, 1))
    else:
        info["gpu"] = "none: dry run on the CPU (--dry-run)"
    return info


def _cell(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(_cell(h) for h in headers) + " |",
             "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _verdict_summary(step: Step) -> str:
    if step.exit_code is None:
        return "—"
    if step.kind == "bench":
        rows = (step.extra.get("bench") or {}).get("rows") or []
        bad = [r for r in rows if r.get("error")]
        return f"{len(rows) - len(bad)} timings" + (f", {len(bad)} errors" if bad else "")
    if step.kind == "runpy":
        sec = step.extra.get("section") or {}
        goals = Counter(g.get("status") for g in sec.get("goals", []))
        return ", ".join(f"{k} {v}" for k, v in goals.items()) or (
            "error" if "error" in sec else "skipped" if "skipped" in sec else "—")
    if not step.verdicts:
        return "—"
    counts = Counter(v.get("verdict") for v in step.verdicts)
    text = ", ".join(f"{k} {n}" for k, n in counts.items())
    bad = [v["id"] for v in step.verdicts
           if v.get("verdict") not in ("pass", "skip", "not_run")]
    return text + (f" ({', '.join(bad)})" if bad else "")


def _drawn(v: dict[str, Any]) -> str:
    d = v.get("drawn") or {}
    if not d:
        return ""
    parts = []
    for axis in ("B", "T", "C", "H"):
        if axis in d and d[axis]:
            lo, hi = d[axis]
            parts.append(f"{axis} {lo}" if lo == hi else f"{axis} {lo}-{hi}")
    for key in ("dtype", "device"):
        if d.get(key):
            parts.append(", ".join(f"{k} {n}" for k, n in d[key].items()))
    return "; ".join(parts)


def render(record: dict[str, Any], steps: Sequence[Step]) -> str:
    m = record["machine"]
    lines = ["# attnspec on CUDA", ""]
    if record["dry_run"]:
        lines += ["**Dry run** (`--dry-run`): the same steps on the CPU with tiny example "
                  "counts, to test this script; these are not CUDA results.", ""]
    lines += [f"Written by `{record['command']}` (or `nox -s cuda`) on {record['finished']}, "
              f"in {record['wall_s']:.0f} s of a {record['budget_s']:.0f} s budget. It skips "
              "cleanly where torch sees no GPU (CI), so this page changes only when it ran on "
              "one.", ""]
    lines += _table(["", ""], [
        ["GPU", f"{m['gpu']}" + (f" (compute capability {m['capability']}, "
                                 f"{m['gpu_memory_gib']} GiB; {m['gpu_count']} visible, "
                                 "device 0 used)" if "capability" in m else "")],
        ["torch / CUDA / cuDNN", f"{m['torch']} / {m['cuda']} / {m['cudnn']}"],
        ["attnspec", f"{m['attnspec']} (git {m['git']})"],
        ["python / platform", f"{m['python']} / {m['platform']}"],
        ["seeds", f"attnspec verify --seed {SEED} --no-database "
                  f"(--max-examples {record['max_examples']} per property); timings "
                  f"torch.manual_seed({SEED})"],
        ["float32 matmul precision", m["float32_matmul_precision"]],
        ["ATTNSPEC_TYPECHECK / CI", f"{m['ATTNSPEC_TYPECHECK']} / {m['CI']}"],
    ])
    ok = sum(s.status == "ok" for s in steps)
    others = Counter(s.status for s in steps if s.status != "ok")
    lines += ["", "## Steps", "",
              f"{ok} of {len(steps)} steps ended as expected"
              + "".join(f"; {status}: {n}" for status, n in others.items()) + ".", ""]
    lines += _table(["step", "exit code (expected)", "wall s", "verdicts", "result"], [
        [s.name, "—" if s.exit_code is None else f"{s.exit_code} ({s.expect})",
         "—" if s.wall_s is None else f"{s.wall_s:.1f}", _verdict_summary(s),
         s.status + (f": {s.note}" if s.note else "")] for s in steps])
    for s in steps:
        lines += ["", f"### {s.name}", "", s.title + ".", "", "```sh", s.shown, "```", ""]
        head = (f"Exit code {s.exit_code} (expected {s.expect}), {s.wall_s:.1f} s: {s.status}"
                if s.exit_code is not None else s.status)
        lines += [head + (f"; {s.note}" if s.note else "") + ".", ""]
        if s.verdicts:
            lines += _table(["property", "verdict", "examples", "s", "drawn",
                             "message / counterexample"], [
                [v.get("id"), v.get("verdict"), v.get("examples"),
                 f"{v.get('seconds') or 0:.1f}", _drawn(v),
                 (v.get("message") or "")[:300]] for v in s.verdicts])
        elif s.extra.get("table"):
            lines += ["```text", s.extra["table"], "```"]
        if s.kind == "bench" and s.extra.get("bench"):
            b = s.extra["bench"]
            lines += [f"{b['method']}; {b['warmup']} warm-up rounds, {b['runs']} timed; "
                      f"ATTNSPEC_TYPECHECK={b['typecheck']}.", ""]
            lines += _table(["(B, T, C, H)", "dtype", "implementation", "median ms",
                             "IQR ms", "ratio to bare SDPA (IQR)"], [
                ["(" + ", ".join(map(str, r["shape"])) + ")", r["dtype"],
                 BENCH_IMPLS.get(r["impl"], r["impl"]),
                 f"{r['median_s'] * 1e3:.3f}" if "median_s" in r else r.get("error") or "—",
                 f"{r['q1_s'] * 1e3:.3f}-{r['q3_s'] * 1e3:.3f}" if "q1_s" in r else "",
                 (f"{r['ratio_to_sdpa']['median']:.3f} ({r['ratio_to_sdpa']['q1']:.3f}-"
                  f"{r['ratio_to_sdpa']['q3']:.3f})") if "ratio_to_sdpa" in r else ""]
                for r in b["rows"]])
        if s.kind == "runpy" and s.extra.get("section"):
            sec = s.extra["section"]
            if sec.get("goals"):
                lines += _table(["goal", "measured", "status"],
                                [[g["goal"], g["measured"], g["status"]]
                                 for g in sec["goals"]]) + [""]
            for t in sec.get("tables", []):
                if t.get("title"):
                    lines += [f"**{t['title']}**", ""]
                lines += _table(t["headers"], t["rows"]) + [""]
                if t.get("note"):
                    lines += [t["note"], ""]
            if "error" in sec:
                lines += ["```text", sec["error"].rstrip()[-3000:], "```"]
        if s.status not in ("ok", "skipped", "dry run") and s.stderr_tail.strip():
            lines += ["", "<details><summary>stderr (last lines)</summary>", "", "```text",
                      "\n".join(s.stderr_tail.strip().splitlines()[-25:]), "```", "",
                      "</details>"]
    return "\n".join(lines).rstrip() + "\n"


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


# ---- main -----------------------------------------------------------------------------------


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/cuda_check.py", description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, default=BUDGET_S, metavar="SECONDS",
                        help=f"start no step after this many seconds ({BUDGET_S:.0f})")
    # Undocumented: the same steps on the CPU with tiny counts, written to a temporary folder.
    parser.add_argument("--dry-run", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--only", metavar="GROUPS", default=",".join(GROUPS),
                        help="comma-separated groups of steps to run: modules (1-4), kernels "
                             "(5), bench (6-7); default all")
    parser.add_argument("--bench-worker", metavar="OUT", help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    parser.add_argument("--dtype", default=",".join(CUDA_DTYPES), help=argparse.SUPPRESS)
    parser.add_argument("--warmup", type=int, default=5, help=argparse.SUPPRESS)
    parser.add_argument("--runs", type=int, default=20, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.budget <= 0:
        parser.error("--budget must be positive")
    args.groups = tuple(g.strip() for g in args.only.split(",") if g.strip())
    unknown = [g for g in args.groups if g not in GROUPS]
    if unknown or not args.groups:
        parser.error(f"--only {args.only!r}: choose groups among {', '.join(GROUPS)} "
                     "(comma-separated)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    if args.bench_worker:
        return bench_worker(args.bench_worker, args.device,
                            [d for d in args.dtype.split(",") if d], args.warmup, args.runs)
    if not args.dry_run and not torch.cuda.is_available():
        print("no CUDA device: skipped")
        return 0

    def log(line: str) -> None:
        print(f"[{time.monotonic() - _STARTED:5.0f} s] {line}", file=sys.stderr, flush=True)

    tmp = tempfile.mkdtemp(prefix="attnspec-cuda-")
    if args.dry_run:
        plan = Plan(device="cpu", dtypes=("float32", "bfloat16"), half_dtypes=("bfloat16",),
                    max_examples=3, bench_warmup=1, bench_runs=3,
                    runpy_args=("--quick",), dry_run=True, budget=args.budget, tmp=tmp,
                    kernel_max_examples=3, groups=args.groups)
        out_dir = os.path.join(tmp, "docs")
    else:
        plan = Plan(device="cuda", dtypes=CUDA_DTYPES, half_dtypes=HALF_DTYPES,
                    max_examples=MAX_EXAMPLES, bench_warmup=5, bench_runs=20, runpy_args=(),
                    dry_run=False, budget=args.budget, tmp=tmp, groups=args.groups)
        out_dir = DOCS
    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    steps = make_steps(plan)
    log(f"{len(steps)} steps, budget {plan.budget:.0f} s, scratch {tmp}")
    for step in steps:
        run_step(step, plan, log)
    shown = " ".join(["python scripts/cuda_check.py", *(sys.argv[1:] if argv is None
                                                       else argv)])
    record: dict[str, Any] = {
        "command": shown.strip(), "dry_run": plan.dry_run, "started": started,
        "finished": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "wall_s": round(time.monotonic() - _STARTED, 1), "budget_s": plan.budget,
        "seed": SEED, "max_examples": plan.max_examples, "machine": machine(plan),
        "skipped": sum(s.status == "skipped" for s in steps),
        "ok": all(s.status in ("ok", "skipped", "dry run") for s in steps),
        "steps": [{k: v for k, v in asdict(s).items() if k not in ("argv", "report")}
                  for s in steps],
    }
    markdown = render(record, steps)
    _write(os.path.join(out_dir, "cuda.json"), json.dumps(record, indent=2, default=str) + "\n")
    _write(os.path.join(out_dir, "cuda.md"), markdown)
    print(markdown)
    where = os.path.relpath(out_dir, ROOT) if out_dir == DOCS else out_dir
    log(f"wrote {where}/cuda.md and {where}/cuda.json")
    if not plan.dry_run:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if record["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
