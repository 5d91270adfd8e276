"""A plain-torch stand-in for xformers (only `xformers.ops.memory_efficient_attention` and its
attention biases), for CPU tests of attnspec's adapters."""

ATTNSPEC_STANDIN = True
__version__ = "0.0.32+standin"
