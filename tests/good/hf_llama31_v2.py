"""transformers' LlamaAttention (eager) with scaled RoPE: Llama-3.1's `llama3` scaling, linear
scaling and YaRN, from its own rope_parameters (ROPE_INIT_FUNCTIONS; the built-in hf_llama's
builder, `hf_llama.rope_parameters`), with its DynamicCache, padding mask and position ids
through attnspec's HF hooks. A model with RoPE scaling, verified with the oracle on: every
property must pass it."""

from __future__ import annotations

from attnspec import LinearScaling, Llama3Scaling, RoPE, YaRN
from attnspec.subjects.hf_llama import (
    DTYPES,
    MASKED_ROWS,
    PADDING_VALUES,
    PROTOCOL,
    build,
    decode,
    decode_padded,
    export_weights,
    padded,
    shifted,
    supports,
)

EXPECTED: frozenset[str] = frozenset()
VARIANTS = {"n_kv_head": "any", "bias": "any", "positions": [
    RoPE(theta=500000.0, scaling=Llama3Scaling()),
    RoPE(theta=500000.0, scaling=Llama3Scaling(32.0, 1.0, 4.0, 16)),  # Llama-3.2's, short
    RoPE(scaling=LinearScaling(4.0)), RoPE(scaling=YaRN(4.0, 16))]}


__all__ = ["DTYPES", "EXPECTED", "MASKED_ROWS", "PADDING_VALUES", "PROTOCOL", "VARIANTS",
           "build", "decode", "decode_padded", "export_weights", "padded", "shifted",
           "supports"]
