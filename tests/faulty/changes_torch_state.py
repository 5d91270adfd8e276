"""A correct subject that changes global torch state at import, as some libraries do: grad mode
off and float64 as the default dtype. attnspec's own computations, and the next example, must not
care."""

import torch
from _base import export_weights, reference_build

__all__ = ["build", "export_weights"]

torch.set_grad_enabled(False)
torch.set_default_dtype(torch.float64)
build = reference_build
