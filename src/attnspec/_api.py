"""Small conveniences over the reference."""

from __future__ import annotations

import torch

from ._config import check_config
from ._reference import CausalSelfAttention, Kernel
from ._trace import ShapeTrace


def trace(
    n_embd: int, n_head: int, *, batch: int = 2, seq: int = 5, seed: int = 0,
    kernel: Kernel = "explicit",
) -> ShapeTrace:
    """Trace the shape at every stage of one forward pass of the reference.

    ```python
    print(attnspec.trace(12, 3, batch=2, seq=5))   # (2, 5, 12) -> (2, 3, 5, 4) -> (2, 5, 12)
    ```

    **Arguments:** `n_embd` (C) and `n_head` (H), validated first; `batch` (B) and `seq` (T),
    each >= 1; `seed` for the random weights and input; `kernel` as in `CausalSelfAttention`.

    **Returns:** a `ShapeTrace`; `str()` of it is the table.
    """
    check_config(n_embd, n_head)
    for name, value in (("batch", batch), ("seq", seq)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"trace(n_embd={n_embd}, n_head={n_head}): {name}={value!r}; "
                             f"{name} must be an int >= 1.")
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        attn = CausalSelfAttention(n_embd, n_head, kernel=kernel).eval()
    x = torch.randn(batch, seq, n_embd, generator=gen)
    with torch.no_grad():
        _, result = attn.traced(x)
    return result
