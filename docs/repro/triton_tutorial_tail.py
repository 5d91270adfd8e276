"""The Triton tutorial's fused attention (06-fused-attention.py at triton-lang/triton 5c846f0,
vendored unchanged in src/attnspec/subjects/_vendor/) has no bound on T in its forward: where T
is not a multiple of BLOCK_M, the last query and key blocks read the next head's rows through
descriptors that span all B * H * T rows (a wrong o, no error) and `tl.store(m_ptrs, m_i)`
writes past the end of M (under the interpreter a heap corruption at a later free). Only the
backward asserts N_CTX % 128 == 0. Each case runs in its own process, since an abort ends it.
The tutorial, torch and triton alone; CPU, Triton's interpreter (whose autotuner here keeps the
first config, BLOCK_M = 64, BLOCK_N = 32):

    TRITON_INTERPRET=1 python docs/repro/triton_tutorial_tail.py
"""

import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
from triton.backends.compiler import GPUTarget
from triton.backends.driver import DriverBase

assert os.environ.get("TRITON_INTERPRET") == "1", "set TRITON_INTERPRET=1 before running"


class CPUInterpreterDriver(DriverBase):
    """No GPU: the tutorial asks the active driver for its device and backend at import."""

    @classmethod
    def is_active(cls):
        return False

    def map_python_to_cpp_type(self, ty):
        raise NotImplementedError

    def get_current_target(self):
        return GPUTarget("interpreter", 0, 1)

    def get_active_torch_device(self):
        return torch.device("cpu")

    def get_benchmarker(self):
        return lambda fn, quantiles=None, **_: [1.0, 1.0, 1.0]


triton.runtime.driver.set_active(CPUInterpreterDriver())
VENDOR = Path(__file__).resolve().parents[2] / "src/attnspec/subjects/_vendor"
PATH = VENDOR / "triton_fused_attention.py"
spec = importlib.util.spec_from_file_location("fused_attention", os.environ.get("TUTORIAL", PATH))
tutorial = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tutorial)

B, H, D = 1, 2, 32
if len(sys.argv) == 3:  # one case
    T, causal = int(sys.argv[1]), sys.argv[2] == "1"
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, T, D, dtype=torch.float16) for _ in range(3))
    o = tutorial.attention(q, k, v, causal, 1 / math.sqrt(D))
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
    print(f"T={T:3d} causal={causal!s:5}: max|o - ref| = "
          f"{(o.double() - ref).abs().max().item():.2e}", flush=True)
    del q, k, v, o, ref
    import gc

    gc.collect()
else:
    for T in (128, 96, 100):
        for causal in ("1", "0"):
            done = subprocess.run([sys.executable, __file__, str(T), causal],
                                  capture_output=True, text=True)
            said = (done.stdout + done.stderr).strip().splitlines()
            print(" | ".join(said[-2:]) + (f"   [exit {done.returncode}]" if done.returncode
                                            else ""))
