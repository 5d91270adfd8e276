"""A CUDA kernel whose output drifts from its CPU twin: an extra 1e-2 added on the GPU only
(a stale bias buffer that only the device code path reads)."""

from _common import Attention, export_weights
from torch import Tensor

EXPECTED = frozenset({"device_agreement"})


class CudaOffset(Attention):
    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = super().forward(x)
        return out + 1e-2 if x.is_cuda else out


def build(n_embd: int, n_head: int) -> CudaOffset:
    return CudaOffset(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
