"""Small conveniences over the reference."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import TypeVar

import torch
from torch import Tensor, nn

from .._errors import UsageError
from ..reference.config import check_config
from ..reference.module import CausalSelfAttention, Kernel
from ..reference.spec import AttentionSpec
from ..reference.trace import ShapeTrace
from ..reference.variants import SpecAttention

M = TypeVar("M", bound=nn.Module)


def spec_call(spec: AttentionSpec) -> str:
    """The spec as the call that makes it, defaults left out, for messages."""
    given = [f"{f.name}={getattr(spec, f.name)!r}" for f in fields(spec)
             if f.name in ("n_embd", "n_head") or getattr(spec, f.name) != f.default]
    return f"AttentionSpec({', '.join(given)})"


def resolve_spec(
    call: str, n_embd: object, n_head: object, spec: object
) -> AttentionSpec | None:
    """The spec a `call(n_embd, n_head, spec=...)` asks for; None means plain (C, H) attention.

    n_embd and n_head may repeat the spec's own values, never contradict them.
    """
    if spec is None:
        if n_embd is None or n_head is None:
            raise UsageError(f"{call}(n_embd={n_embd!r}, n_head={n_head!r}): give both n_embd "
                             f"(C) and n_head (H), or spec=attnspec.AttentionSpec(...).")
        check_config(n_embd, n_head)
        return None
    if not isinstance(spec, AttentionSpec):
        raise TypeError(f"{call}(spec={spec!r}): expected an attnspec.AttentionSpec, got "
                        f"{type(spec).__name__}.")
    for name, given in (("n_embd", n_embd), ("n_head", n_head)):
        own = getattr(spec, name)
        # bool is an int to Python, but n_head=True is a mistake, not 1.
        if given is not None and (isinstance(given, bool) or given != own):
            raise UsageError(
                f"{call}(n_embd={n_embd!r}, n_head={n_head!r}, spec={spec_call(spec)}): "
                f"{name}={given!r} disagrees with the spec's {name}={own!r}. Give the spec "
                f"alone (it carries n_embd and n_head), or values that match it.")
    return spec


def seeded(build: Callable[[], M], *, batch: int, seq: int, n_embd: int, seed: int,
           ) -> tuple[M, Tensor]:
    """The module and input (B, T, C) one seed gives, leaving torch's global seed alone."""
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = build()
    return module, torch.randn(batch, seq, n_embd, generator=gen)


def trace(
    n_embd: int | None = None, n_head: int | None = None, *,
    spec: AttentionSpec | None = None, batch: int = 2, seq: int = 5, seed: int = 0,
    kernel: Kernel = "explicit",
) -> ShapeTrace:
    """Trace the shape at every stage of one forward pass of the reference.

    ```python
    print(attnspec.trace(12, 3, batch=2, seq=5))   # (2, 5, 12) -> (2, 3, 5, 4) -> (2, 5, 12)
    print(attnspec.trace(spec=attnspec.AttentionSpec(n_embd=12, n_head=4, n_kv_head=2)))
    ```

    **Arguments:** `n_embd` (C) and `n_head` (H), validated first, for `CausalSelfAttention`;
    or `spec`, an `AttentionSpec`, for `SpecAttention` (its trace adds the `"B G T D"` key/value
    heads; n_embd and n_head may then be left out, and must match the spec if given); `batch`
    (B) and `seq` (T), each >= 1; `seed` for the random weights and input; `kernel` as in
    `CausalSelfAttention` (a spec is traced with the explicit math only).

    **Returns:** a `ShapeTrace`; `str()` of it is the table.
    """
    resolved = resolve_spec("trace", n_embd, n_head, spec)
    where = (f"trace(n_embd={n_embd}, n_head={n_head})" if resolved is None
             else f"trace(spec={spec_call(resolved)})")
    for name, value in (("batch", batch), ("seq", seq)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{where}: {name}={value!r}; {name} must be an int >= 1.")
    if resolved is None:
        assert n_embd is not None and n_head is not None  # resolve_spec checked them
        C, H = n_embd, n_head
        attn, x = seeded(lambda: CausalSelfAttention(C, H, kernel=kernel).eval(),
                         batch=batch, seq=seq, n_embd=C, seed=seed)
        with torch.no_grad():
            return attn.traced(x)[1]
    if kernel != "explicit":
        raise UsageError(f"{where}: kernel={kernel!r}; a spec is traced by SpecAttention, which "
                         f"has the explicit math only, so leave kernel='explicit'.")
    spec_attn, x = seeded(lambda: SpecAttention(resolved).eval(), batch=batch, seq=seq,
                          n_embd=resolved.n_embd, seed=seed)
    with torch.no_grad():
        return spec_attn.traced(x)[1]

