"""The Triton tutorial's fused attention (triton-lang/triton python/tutorials/06-fused-attention.py,
"Flash Attention v2" by the OpenAI kernel team), forward and backward, as a kernel subject
(PROTOCOL = "kernel"). The triton wheel does not ship its tutorials, so the file is vendored
verbatim: attnspec.subjects._vendor.triton_fused_attention, from commit 5c846f015d9c (2025-12-02,
the file's last change before upstream main 6cc4505 of 2025-12-16, version 3.6.0; no v3.9.0 tag
could be read). Called as the tutorial calls it: `attention(q, k, v, causal, sm_scale,
warp_specialize)`, `_attention.apply`; nothing reimplemented.

What it takes, from its code:

- BHSD, q, k and v of one shape (B, H, T, D): no grouped kv heads (its descriptors are built
  from q's shape) and self-attention only, Tq = Tk, so the causal corner is the diagonal.
- `sm_scale` is a required argument: the adapter passes 1/sqrt(D) where attnspec passes no scale.
- o alone. Its forward stores M = m + log2(l), the LSE in base 2 of the scaled scores (scores x
  sm_scale x log2(e)), (B, H, T) float32, but only into the autograd context for its backward
  (reachable as `o.grad_fn.saved_tensors[4]` where the inputs require grad, no output of the
  Function): LSE = None.
- float16 only: the forward casts P to float16 (`dtype = tl.float8e5 if FP8_OUTPUT else
  tl.float16`) and `tl.dot`s it with V, so float32 or bfloat16 inputs stop at "Both operands
  must be same dtype" (float8_e5m2 is forward-only and not drawn).
- head dims: it asserts D in {16, 32, 64, 128, 256}, but every autotune config has BLOCK_N >= 32
  and its kernel `tl.static_assert(BLOCK_N <= HEAD_DIM)`, so D = 16 fails to compile; under
  pytest (PYTEST_VERSION set when it is imported) its one config has BLOCK_N = 64, so D >= 64.
- lengths: T a multiple of 128. Its backward asserts N_CTX % 128 == 0; its forward has no mask:
  the tensor descriptors span all B x H x T rows, so a last query or key block past T reads the
  next head's rows (wrong o), and the M store past T writes past M (heap corruption under the
  interpreter), and the autotune pruner keeps no config where T < BLOCK_M = 64.
- contiguous q, k, v only, though nothing says so: its forward builds its descriptors with
  strides [HEAD_DIM, 1] over B x H x T rows and never reads q.stride(), so (B, T, H, D)
  .transpose(1, 2) views or a k expanded along B give a wrong o with no error, and a view at an
  offset that is not 16-byte aligned stops at "base must be 16-byte aligned" (attnspec's
  fresh_results sends both). The adapter passes them as given, as a caller would.
- `supports(case)` declines everything else, saying why in its docstring.
- BACKWARD = True: dq, dk, dv through autograd (its `_attn_bwd`, causal or not); it asserts that
  dO is contiguous and that q, k, v, o and dO share strides.
- DETERMINISTIC = True: no atomics, one program per block. On a GPU the autotuner times its
  configs in each process and may choose another in another process (the forward's tiles, so
  its rounding, then differ); interpreted, the adapter's benchmarker below makes every process
  choose the first config the pruner keeps.
- KNOBS: `warp_specialize` (False, True), the tutorial's own scheduling switch (Blackwell warp
  specialization; on Hopper True also selects device-side tensor descriptors).

Without a GPU attnspec runs it in Triton's interpreter (docs/triton.md). The tutorial asks the
active Triton driver for its device at import (`DEVICE = triton.runtime.driver.active.
get_active_torch_device()`, used only by its tests and benchmarks) and for its backend
(`is_hip()`, `is_cuda()`): with no GPU there is no active driver ("0 active drivers"), so where
the interpreter is on and no driver is active this adapter installs a minimal one
(`_InterpreterDriver`: torch device "cpu", backend "interpreter", so is_cuda() and is_hip()
are False and the tutorial takes its pointer path, `tl.make_tensor_descriptor`; a benchmarker
that times nothing, so the autotuner keeps the first config its pruner leaves, BLOCK_M = 64 and
BLOCK_N = 32). The vendored file is unchanged; it imports pytest, so pytest must be installed.
"""

from __future__ import annotations

import importlib
import math
import os
from typing import Any

import torch
from torch import Tensor

from ._kernels import KernelUnavailable, check_qkv, require

__all__ = ["PROTOCOL", "LAYOUT", "CAUSAL", "WINDOW", "LSE", "MASKED_ROWS", "BACKWARD",
           "DETERMINISTIC", "FEATURES", "KNOBS", "DTYPES", "TRITON", "attention", "supports"]

PROTOCOL = "kernel"
LAYOUT = "bhsd"
CAUSAL = "top_left"  # Tq = Tk: both corners are the diagonal
WINDOW = None
LSE = None
MASKED_ROWS = "zero"  # never reached: Tq = Tk, so every query sees a key
BACKWARD = True
DETERMINISTIC = True
FEATURES = ("scale", "noncausal")
KNOBS: dict[str, tuple[Any, ...]] = {"warp_specialize": (False, True)}
DTYPES = (torch.float16,)
TRITON = True

_VENDORED = "attnspec.subjects._vendor.triton_fused_attention"
_LIBRARY = "the Triton tutorial's fused attention (vendored) and triton"


def _interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "yes", "on")


def _ensure_driver() -> None:
    """An active Triton driver, as the tutorial's import needs: the real one where there is one,
    else (interpreted) `_InterpreterDriver`."""
    triton = require("triton", subject=__name__, library=_LIBRARY,
                     install="pip install 'attnspec[triton]'", needs_cuda=False)
    # by name: triton is an optional extra, absent where mypy checks the package in CI
    GPUTarget: Any = importlib.import_module("triton.backends.compiler").GPUTarget  # noqa: N806
    DriverBase: Any = importlib.import_module("triton.backends.driver").DriverBase  # noqa: N806

    try:
        triton.runtime.driver.active  # noqa: B018 (the property creates the default driver)
        return
    except RuntimeError as error:
        if not _interpreted():
            raise KernelUnavailable(__name__, f"{_LIBRARY} on a GPU, or Triton's interpreter",
                                    f"triton finds no active driver ({error}) and "
                                    "TRITON_INTERPRET is not set",
                                    "run on a GPU, or set TRITON_INTERPRET=1 before triton is "
                                    "imported (attnspec's workers do where no GPU is seen).",
                                    ) from None

    class _InterpreterDriver(DriverBase):  # type: ignore[misc]
        """What the tutorial asks of the driver where Triton interprets: a CPU device and a
        backend that is neither "cuda" nor "hip"; a benchmarker that runs nothing and reports
        every config alike, so the autotuner keeps the first its pruner leaves."""

        @classmethod
        def is_active(cls) -> bool:
            return False

        def map_python_to_cpp_type(self, ty: str) -> str:
            raise NotImplementedError("the interpreter compiles nothing")

        def get_current_target(self) -> Any:
            return GPUTarget("interpreter", 0, 1)

        def get_active_torch_device(self) -> torch.device:
            return torch.device("cpu")

        def get_benchmarker(self) -> Any:
            return lambda kernel_call, quantiles=None, **_: [1.0, 1.0, 1.0]

    triton.runtime.driver.set_active(_InterpreterDriver())


_ensure_driver()
_tutorial = require(_VENDORED, subject=__name__, library=_LIBRARY,
                    install="pip install 'attnspec[triton]' pytest (the tutorial imports pytest)",
                    needs_cuda=False)
# The forward's autotune configs (the module's own `configs` is rebound to its benchmarks).
_CONFIGS = _tutorial._attn_fwd.configs
_BLOCK_N_MIN = min(int(c.kwargs["BLOCK_N"]) for c in _CONFIGS)
_T_MULTIPLE = math.lcm(128, *(int(c.kwargs["BLOCK_M"]) for c in _CONFIGS))


def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool, scale: float | None = None,
              warp_specialize: bool = True) -> Tensor:
    """o (B, H, T, D), as `attention(q, k, v, causal, sm_scale, warp_specialize)` returns it."""
    B, H, G, Tq, Tk, D = check_qkv(__name__, LAYOUT, q, k, v)
    if G != H or Tq != Tk:
        raise ValueError(f"{__name__}.attention(q {tuple(q.shape)}, k {tuple(k.shape)}): the "
                         "tutorial takes q, k and v of one shape (B, H, T, D).")
    sm_scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    o: Tensor = _tutorial.attention(q, k, v, causal, sm_scale, warp_specialize)
    return o


def supports(case: dict[str, Any]) -> bool:
    """float16; H = G and Tq = Tk (one shape for q, k, v); D in {32, 64, 128, 256} and at least
    the smallest BLOCK_N of its configs (its static_assert BLOCK_N <= HEAD_DIM); T a positive
    multiple of 128 and of every BLOCK_M (its backward's assert; its forward's unmasked tails)."""
    D, T = int(case.get("D", 64)), int(case.get("Tq", 128))
    return (case.get("dtype", torch.float16) in (torch.float16, "float16")
            and int(case.get("H", 1)) == int(case.get("G", case.get("H", 1)))
            and T == int(case.get("Tk", T))
            and D in (32, 64, 128, 256) and D >= _BLOCK_N_MIN
            and T > 0 and T % _T_MULTIPLE == 0
            and not case.get("window") and not case.get("softcap") and not case.get("alibi")
            and not case.get("sinks") and not case.get("varlen"))
