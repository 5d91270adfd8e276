"""FlashAttention 2/3's `flash_attn_with_kvcache` as a kernel subject: the dense calls go to
`flash_attn_func` (as `attnspec.subjects.flash_attn`), the cache calls to flash_attn_with_kvcache
through the protocol's `attention_with_cache`, with a paged cache of FA2's page size (its
`page_block_size` must be a multiple of 256). k and v are appended in place at cache_seqlens;
query i of Tq sits at cache_seqlens + Tnew - Tq + i (the bottom right). Needs the flash_attn
package and a CUDA GPU: without them loading this subject fails with a one-line message."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from ._kernels import require

# First, so that a missing flash_attn is said in this subject's name.
_flash_attn = require("flash_attn", subject=__name__, library="FlashAttention 2/3",
                      install="pip install flash-attn --no-build-isolation", needs_cuda=True)

from .flash_attn import (  # noqa: E402
    BACKWARD,
    CAUSAL,
    DETERMINISTIC,
    DTYPES,
    FEATURES,
    KNOBS,
    LAYOUT,
    LSE,
    LSE_LAYOUT,
    MASKED_ROWS,
    PROTOCOL,
    WINDOW,
    attention,
    supports,
)

__all__ = ["PROTOCOL", "LAYOUT", "CAUSAL", "WINDOW", "LSE", "LSE_LAYOUT", "MASKED_ROWS",
           "BACKWARD", "DETERMINISTIC", "FEATURES", "KNOBS", "DTYPES", "PAGED", "attention",
           "attention_with_cache", "supports"]

PAGED = 256  # FA2: page_block_size must be divisible by 256


def attention_with_cache(q: Tensor, k_cache: Tensor, v_cache: Tensor, *, cache_seqlens: Tensor,
                         causal: bool, block_table: Tensor | None = None,
                         k: Tensor | None = None, v: Tensor | None = None,
                         scale: float | None = None, softcap: float | None = None,
                         **knobs: Any) -> tuple[Tensor, Tensor]:
    """(o, softmax_lse) of flash_attn_with_kvcache in the protocol's keywords."""
    out, lse = _flash_attn.flash_attn_with_kvcache(
        q, k_cache, v_cache, k=k, v=v, cache_seqlens=cache_seqlens, block_table=block_table,
        softmax_scale=scale, causal=causal, softcap=softcap or 0.0, return_softmax_lse=True,
        **knobs)
    # FA2 gives +inf for a row that sees no key on its non-split path; the protocol says -inf.
    return out, lse.masked_fill(lse == float("inf"), float("-inf"))
