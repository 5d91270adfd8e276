"""A tiny GPT that consumes attnspec: the typed model a consumer writes around the reference.

`mypy --strict src examples` checks it: `attn(x)` is typed `Tensor` (attnspec types
`CausalSelfAttention.__call__`), and the shapes are jaxtyping annotations built from attnspec's
aliases (`attnspec.Residual` is `Float[Tensor, "B T C"]`). To check those shapes at runtime
too, import this module under jaxtyping's import hook (see docs/consumers.md):

```python
from jaxtyping import install_import_hook

with install_import_hook("tiny_gpt", "beartype.beartype"):
    import tiny_gpt

model = tiny_gpt.TinyGPT(vocab_size=16, block_size=8, n_embd=12, n_head=3, n_layer=2)
model(torch.randint(0, 16, (2, 5)))      # (2, 5, 16) logits
model(torch.randn(2, 5))                 # TypeCheckError: token ids must be integers
```

Run it as a script to print the shapes: `python examples/tiny_gpt.py`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

import attnspec
from attnspec import Residual

__all__ = ["MLP", "Block", "Logits", "TinyGPT", "Tokens"]

Tokens = Int[Tensor, "B T"]
"""Token ids: batch, token positions."""
Logits = Float[Tensor, "B T V"]
"""Next-token scores over a vocabulary of V tokens, at every position."""


class MLP(nn.Module):
    """Position-wise feed-forward sublayer: C -> 4C -> C, applied to each position alone."""

    def __init__(self, n_embd: int) -> None:
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    if TYPE_CHECKING:
        # torch types Module.__call__ as Any; say what mlp(x) returns, as attnspec does.
        def __call__(self, x: Residual) -> Residual: ...

    def forward(self, x: Residual) -> Residual:
        # torch's layers return Any to mypy: annotating the locals gives them a type again.
        hidden: Float[Tensor, "B T 4*C"] = self.gelu(self.c_fc(x))
        out: Residual = self.c_proj(hidden)
        return out


class Block(nn.Module):
    """A pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x)); (B, T, C) throughout.

    **Arguments:** `n_embd` (C) and `n_head` (H), validated by attnspec when the attention is
    made, so `Block(10, 3)` raises `attnspec.DivisibilityError` naming 1, 2, 5, 10.
    """

    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = attnspec.CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd)

    if TYPE_CHECKING:

        def __call__(self, x: Residual) -> Residual: ...

    def forward(self, x: Residual) -> Residual:
        # Each sublayer's update is added back, so the residual stream keeps its width C.
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class TinyGPT(nn.Module):
    """Token + position embeddings, `n_layer` blocks, a final LayerNorm and a vocabulary head.

    ```python
    model = TinyGPT(vocab_size=16, block_size=8, n_embd=12, n_head=3, n_layer=2)
    model(torch.randint(0, 16, (2, 5))).shape   # (2, 5, 16)
    ```

    **Arguments:** `vocab_size` (V), `block_size` (the most positions T), `n_embd` (C),
    `n_head` (H, must divide C), `n_layer`.
    """

    def __init__(
        self, vocab_size: int, block_size: int, n_embd: int, n_head: int, n_layer: int
    ) -> None:
        super().__init__()
        # Validate before building anything, so a bad (C, H) fails with attnspec's message.
        self.config = attnspec.AttentionConfig(n_embd, n_head)
        self.block_size = block_size
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)

    if TYPE_CHECKING:

        def __call__(self, idx: Tokens) -> Logits: ...

    def forward(self, idx: Tokens) -> Logits:
        B, T = idx.shape
        if T > self.block_size:
            raise ValueError(
                f"TinyGPT(block_size={self.block_size}): got T={T} positions (tokens of shape "
                f"{tuple(idx.shape)}); T must be <= block_size."
            )
        pos = torch.arange(T, device=idx.device)
        x: Residual = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            # ModuleList yields plain Modules to mypy; each item is a Block.
            x = cast(Block, block)(x)
        logits: Logits = self.lm_head(self.ln_f(x))
        return logits


def main() -> None:
    """Print the shapes through a tiny model: tokens (B, T) -> logits (B, T, V)."""
    torch.manual_seed(0)
    model = TinyGPT(vocab_size=16, block_size=8, n_embd=12, n_head=3, n_layer=2).eval()
    idx = torch.randint(0, 16, (2, 5))
    with torch.no_grad():
        logits = model(idx)
    print(f"tokens {tuple(idx.shape)} -> logits {tuple(logits.shape)}")
    print(attnspec.trace(12, 3, batch=2, seq=5))


if __name__ == "__main__":
    main()
