"""Stand-in for `xformers.ops`: the fmha entry points and bias classes it re-exports."""

from .fmha import (
    LowerTriangularMask,
    memory_efficient_attention,
    memory_efficient_attention_forward_requires_grad,
)

ATTNSPEC_STANDIN = True
__all__ = ["LowerTriangularMask", "memory_efficient_attention",
           "memory_efficient_attention_forward_requires_grad"]
