"""Reported: torch 2.13 CPU bfloat16 F.linear with NaN in row r+1 returns NaN in row r, for many
odd K (input features). This scans for it with torch alone: every K in 1..257, row counts 2, 3,
4, 9, 16 and 64, float32 and bfloat16, with and without bias, oneDNN (torch.backends.mkldnn) on
and off, 1 thread and the default; then again in child processes with torch's CPU kernels and
oneDNN held to AVX2 and to no vector ISA (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA,
MKL_ENABLE_INSTRUCTIONS), since the report may come from another CPU.

Each (K, rows) gets two calls: NaN in every odd row (rows r+1 = 1, 3, ...), then in every even
row but 0. A leak is a NaN in a row that holds none. Exit 0 when a leak is found (the bug is
present), 1 when none is. Run: python scripts/findings/bf16_linear_nan_rows.py
"""

from __future__ import annotations

import os
import subprocess
import sys

import torch
import torch.nn.functional as F

KS = range(1, 258)
ROWS = (2, 3, 4, 9, 16, 64)
N = 8
ISAS = {"avx2": ("avx2", "AVX2", "AVX2"), "no vector ISA": ("default", "SSE41", "SSE4_2")}


def leaks(dtype: torch.dtype, bias: bool) -> dict[int, list[tuple[int, int]]]:
    """K -> the (rows, r) whose output row r holds NaN while x's row r holds none."""
    gen = torch.Generator().manual_seed(0)
    found: dict[int, list[tuple[int, int]]] = {}
    for K in KS:
        w = torch.randn(N, K, generator=gen).to(dtype)
        b = torch.randn(N, generator=gen).to(dtype) if bias else None
        for M in ROWS:
            x = torch.randn(M, K, generator=gen).to(dtype)
            for first in (1, 2):
                poisoned = x.clone()
                poisoned[first::2] = float("nan")
                clean = torch.ones(M, dtype=torch.bool)
                clean[first::2] = False
                rows = torch.isnan(F.linear(poisoned, w, b)).any(-1) & clean
                for r in rows.nonzero().flatten().tolist():
                    found.setdefault(K, []).append((M, r))
    return found


def scan(label: str) -> bool:
    any_leak = False
    for threads in sorted({torch.get_num_threads(), 1}, reverse=True):
        torch.set_num_threads(threads)
        for mkldnn in (True, False):
            with torch.backends.mkldnn.flags(enabled=mkldnn):
                for dtype in (torch.float32, torch.bfloat16):
                    for bias in (False, True):
                        found = leaks(dtype, bias)
                        odd = sum(1 for K in found if K % 2)
                        cases = sum(len(v) for v in found.values())
                        print(f"{label}: threads={threads} mkldnn={mkldnn!s:5} "
                              f"{str(dtype)[6:]:8} bias={bias!s:5}: {len(found):3} of "
                              f"{len(KS)} K leak ({odd} odd), {cases} rows; first K: "
                              f"{sorted(found)[:12]}", flush=True)
                        any_leak |= bool(found)
    return any_leak


def main() -> int:
    if len(sys.argv) > 1:  # a child: one ISA setting
        return 0 if scan(sys.argv[1]) else 1
    flags = open("/proc/cpuinfo").read().split() if os.path.exists("/proc/cpuinfo") else []
    bf16 = [f for f in ("avx512_bf16", "amx_bf16", "avx512_vnni", "avx2") if f in flags]
    print(f"torch {torch.__version__}, CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}, CPU flags {bf16}, oneDNN "
          f"{torch.backends.mkldnn.is_available()}, seed 0", flush=True)
    any_leak = scan("native")
    for label, (aten, onednn, mkl) in ISAS.items():
        env = {**os.environ, "ATEN_CPU_CAPABILITY": aten, "ONEDNN_MAX_CPU_ISA": onednn,
               "MKL_ENABLE_INSTRUCTIONS": mkl, "PYTHONWARNINGS": "ignore"}
        any_leak |= subprocess.run([sys.executable, __file__, label], env=env).returncode == 0
    print("bug present: NaN reaches rows that hold none" if any_leak
          else "not reproduced: no NaN outside the poisoned rows")
    return 0 if any_leak else 1


if __name__ == "__main__":
    sys.exit(main())
