"""torch CPU float32 F.linear (MKL sgemm) rounds differently by the input's address: the same
values at another 16-byte offset differ by an ulp or so. attnspec's worker decodes tensors from
its wire message in place (torch.frombuffer, 8-byte aligned), so two copies of one input can sit
at different alignments; `determinism` (the same input twice, exactly equal) then fails on the
reference itself (variants, B=1 T=1 C=10 H=1 float32 seed 0: 2.98e-08), and passes with
MKL_CBWR=COMPATIBLE.

Uses torch alone. Exit 0 when the rounding depends on alignment, 1 when it does not.
Run: python scripts/findings/mkl_alignment_rounding.py  (MKL_CBWR=COMPATIBLE: exit 1)
"""

from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F


def main() -> int:
    print(f"torch {torch.__version__}, MKL {torch.backends.mkl.is_available()}, "
          f"MKL_CBWR={os.environ.get('MKL_CBWR')}, float32, seed 0")
    torch.manual_seed(0)
    found = False
    for K in (10, 16, 33, 64):
        w, x = torch.randn(8, K), torch.randn(3, K)
        base = F.linear(x, w)
        diffs = []
        for offset in range(16):  # in elements: 4-byte steps over 64 bytes
            buffer = torch.empty(offset + x.numel())
            buffer[offset:] = x.flatten()
            moved = buffer[offset:].view_as(x)
            assert torch.equal(moved, x)
            diffs.append((F.linear(moved, w) - base).abs().max().item())
        found |= max(diffs) > 0
        print(f"K={K:3}: max|F.linear(x at +4*offset bytes) - F.linear(x)| by offset 0..15: "
              + " ".join(f"{d:.1e}" if d else "0" for d in diffs))
    print("alignment-dependent rounding present" if found else "no alignment dependence")
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
