"""The Triton tutorial's fused attention (06-fused-attention.py at triton-lang/triton 5c846f0,
vendored unchanged in src/attnspec/subjects/_vendor/) ignores the strides of q, k and v: its
forward builds tensor descriptors with strides [HEAD_DIM, 1] over B * H * T rows, so views that
are not contiguous BHSD give a wrong o with no error. The tutorial, torch and triton alone;
CPU, Triton's interpreter:

    TRITON_INTERPRET=1 python docs/repro/triton_tutorial_strides.py
"""

import importlib.util
import math
import os
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

torch.manual_seed(0)
B, H, T, D = 2, 3, 128, 32
scale = 1 / math.sqrt(D)


def error(q, k, v, causal):
    o = tutorial.attention(q, k, v, causal, scale)
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal,
                                         scale=scale)
    return (o.double() - ref).abs().max().item()


q, k, v = (torch.randn(B, H, T, D, dtype=torch.float16) for _ in range(3))
print(f"contiguous (B,H,T,D):           max|o - ref| = {error(q, k, v, True):.2e}")
qs, ks, vs = (torch.randn(B, T, H, D, dtype=torch.float16).transpose(1, 2) for _ in range(3))
print(f"(B,T,H,D).transpose(1,2) views: max|o - ref| = {error(qs, ks, vs, True):.2e}")
copies = (x.contiguous() for x in (qs, ks, vs))
print(f"the same, .contiguous() first:  max|o - ref| = {error(*copies, True):.2e}")
print(f"k expanded along B (stride 0):  max|o - ref| = "
      f"{error(q, k[:1].expand(B, -1, -1, -1), v, False):.2e}")
