"""Sharded attention: which positions each rank holds, which worlds a spec can be sharded over.

Tensor parallelism (`heads`) gives each of W ranks n_head / W query heads and n_kv_head / W
key/value heads, the ones its query heads read. Context parallelism (`positions`) gives each
rank T / W positions: contiguous blocks, or the head-tail layout of load-balanced rings (2W
chunks, rank r holding chunks r and 2W - 1 - r, so that every rank has as much causal work).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from .._errors import ConfigError
from .spec import ALiBi, AttentionSpec, RoPE

if TYPE_CHECKING:
    import torch
    from torch import Tensor

__all__ = ["LAYOUTS", "ShardError", "check_shardable", "cp_reference", "shard_positions_of",
           "tp_reference"]

KINDS = ("heads", "positions")
LAYOUTS = ("head_tail", "contiguous")


class ShardError(ConfigError):
    """A spec, length or world that cannot be sharded as asked (n_head % world, T % 2·world)."""


ShardError.__module__ = "attnspec"  # tracebacks name it where users import it from


def _check_world(world: int) -> None:
    if not isinstance(world, int) or isinstance(world, bool) or world < 1:
        raise ShardError(f"world={world!r}: the number of ranks must be a whole number >= 1.")


def shard_positions_of(T: int, rank: int, world: int, layout: str = "head_tail") -> list[int]:
    """The global positions rank `rank` of `world` holds, in the order it holds them.

    ```python
    shard_positions_of(8, 0, 2)                 # [0, 1, 6, 7]: chunks 0 and 3 of 4
    shard_positions_of(8, 1, 2, "contiguous")   # [4, 5, 6, 7]
    ```
    """
    _check_world(world)
    if layout not in LAYOUTS:
        raise ShardError(f"layout={layout!r}: the layouts are {', '.join(map(repr, LAYOUTS))}.")
    if not isinstance(rank, int) or not 0 <= rank < world:
        raise ShardError(f"rank={rank!r}: must be in 0..{world - 1} for world={world}.")
    chunks = 2 * world if layout == "head_tail" else world
    if not isinstance(T, int) or T < 1 or T % chunks:
        raise ShardError(f"T={T!r} cannot be split over world={world} in the {layout} layout: "
                         f"it needs T % {chunks} == 0 ({chunks} equal chunks"
                         + (", rank r holding chunks r and 2*world-1-r)" if layout == "head_tail"
                            else ", one per rank)") + ".")
    size = T // chunks
    held = [rank] if layout == "contiguous" else [rank, chunks - 1 - rank]
    return [c * size + i for c in held for i in range(size)]


def _worlds(counts: tuple[int, ...], most: int = 8) -> list[int]:
    return [w for w in range(2, most + 1) if all(n % w == 0 for n in counts)]


def check_shardable(spec: AttentionSpec, world: int, kind: str, T: int | None = None,
                    layout: str = "head_tail") -> None:
    """Raise `ShardError`, saying why and which worlds would work, unless `spec` (and, for
    positions, length T) can be sharded over `world` ranks as `kind` says."""
    _check_world(world)
    if kind not in KINDS:
        raise ShardError(f"kind={kind!r}: the kinds are 'heads' (tensor parallel) and "
                         "'positions' (context parallel).")
    if kind == "heads":
        H, G = spec.n_head, spec.G
        # Without grouped heads n_kv_head is n_head: naming it twice would only confuse.
        named = (("n_head", H),) if spec.n_kv_head is None else (("n_head", H), ("n_kv_head", G))
        bad = [f"{name}={n}" for name, n in named if n % world]
        if bad:
            works = _worlds((H, G))
            raise ShardError(
                f"{' and '.join(bad)} {'is' if len(bad) == 1 else 'are'} not divisible by "
                f"world={world}: tensor parallelism gives each rank n_head / world query heads "
                f"and the n_kv_head / world key/value heads they read, so it needs n_head % "
                f"world == n_kv_head % world == 0 (worlds that work for n_head={H}, "
                f"n_kv_head={G}: {', '.join(map(str, works)) or 'none above 1'}).")
        return
    if T is not None:
        shard_positions_of(T, 0, world, layout)


# The simulations below run every rank in one process (no torch.distributed): their rounding,
# against the float64 reference, is the yardstick for a sharded subject in the same dtype.
# torch is imported inside them, so importing this module stays free of torch.


def _alibi_of(alibi: ALiBi, H: int, heads: range) -> list[float]:
    # ALiBi's slope belongs to the global head: local head i of a rank is global head heads[i].
    return alibi.slopes_for(H)[heads.start:heads.stop]


def _modelled(spec: AttentionSpec, where: str) -> None:
    """The sharded references leave q/k norms and sinks out: refuse them, never misjudge."""
    extras = [n for n in ("qk_norm", "sinks") if getattr(spec, n) not in (None, False)]
    if extras:
        raise ConfigError(f"{where}: the spec has {' and '.join(extras)} ({spec.describe()}), "
                          "which the simulated sharded references do not model yet; leave "
                          f"{', '.join(extras)} out of a sharded subject's VARIANTS.")


def tp_reference(x: Tensor, weights: Mapping[str, Tensor], spec: AttentionSpec,
                 world: int) -> Tensor:
    """Tensor parallelism over heads, simulated as Megatron and DTensor shard attention (q, k, v
    column-wise, o row-wise): rank r computes query heads r·H/W .. (r+1)·H/W - 1 with the kv
    heads they read, and its partial output merged_r @ o_weight[:, cols_r].T without o's bias;
    the partials are summed in rank order in x's dtype (the all-reduce), then the bias is added
    once. Everything is in x's dtype (weights must already be); gradients flow.

    ```python
    tp_reference(x, weights, AttentionSpec(64, 8, n_kv_head=2), world=2)   # ~ spec_attention
    ```
    """
    import torch
    import torch.nn.functional as F

    from .module import merge_heads
    from .pieces import heads_of, rotate, spec_core

    check_shardable(spec, world, "heads")
    _modelled(spec, "tp_reference")
    H, G, D = spec.n_head, spec.G, spec.D
    h, g = H // world, G // world
    plain = replace(spec, positions=None)  # ALiBi goes in below, with the global heads' slopes
    total: Tensor | None = None
    for r in range(world):
        rows = {"q": slice(r * h * D, (r + 1) * h * D), "k": slice(r * g * D, (r + 1) * g * D)}
        rows["v"] = rows["k"]
        q, k, v = (heads_of(F.linear(x, weights[f"{n}_weight"][rows[n]],
                                     _part(weights.get(f"{n}_bias"), rows[n])), n_, D)
                   for n, n_ in (("q", h), ("k", g), ("v", g)))
        if isinstance(spec.positions, RoPE):
            q, k = rotate(q, spec.positions, 0), rotate(k, spec.positions, 0)
        slopes = None if not isinstance(spec.positions, ALiBi) else torch.tensor(
            _alibi_of(spec.positions, H, range(r * h, (r + 1) * h)), dtype=torch.float64,
            device=x.device)
        y, _ = spec_core(q, k, v, plain, alibi=slopes, every_row_sees=True)
        merged = merge_heads(y)
        partial = F.linear(merged, weights["o_weight"][:, rows["q"]])
        total = partial if total is None else total + partial
    assert total is not None
    bias = weights.get("o_bias")
    return total if bias is None else total + bias


def _part(bias: Tensor | None, rows: slice) -> Tensor | None:
    return None if bias is None else bias[rows]


def _block(q: Tensor, k: Tensor, v: Tensor, spec: AttentionSpec, slopes: Tensor | None,
           q_pos: Tensor, k_pos: Tensor, merge: torch.dtype) -> tuple[Tensor, Tensor]:
    """One ring step, the core on one block: queries at global positions q_pos on the keys
    and values held at k_pos; the output (x's dtype) and log-sum-exp (`merge` dtype), zero
    and -inf where a query sees no key of the block."""
    import torch

    from . import core
    from .pieces import spec_core, spec_window

    kept: dict[str, Tensor] = {}
    out, _ = spec_core(q, k, v, spec, alibi=slopes, q_index=q_pos, k_index=k_pos,
                       record=kept.__setitem__)
    some = core.visible_keys(q_pos, k_pos, True, spec_window(spec.window), None)[0].any(
        dim=-1, keepdim=True)
    # The blocks merge in `merge`, so the LSE is taken there from the core's masked scores.
    lse = torch.logsumexp(kept["scores"].masked_fill(~some, 0.0).to(merge), dim=-1,
                          keepdim=True)
    return out, lse.masked_fill(~some, float("-inf"))


def cp_reference(x: Tensor, weights: Mapping[str, Tensor], spec: AttentionSpec, world: int,
                 layout: str = "head_tail") -> Tensor:
    """Context parallelism (ring attention) simulated: rank r holds the positions
    `shard_positions_of(T, r, world, layout)`, projects them with the full weights and rotates
    them at their global positions; its queries meet every rank's keys and values block by
    block (ring order: its own first), masked by global positions, and the blocks merge by the
    online-softmax rule as torch's ring does (in float32 for bfloat16 and float16). The output
    is (B, T, C) in global order; gradients flow.

    ```python
    cp_reference(x, weights, AttentionSpec(64, 8, positions=RoPE()), world=2)  # ~ spec_attention
    ```
    """
    import torch
    import torch.nn.functional as F

    from .inference import rotate_at
    from .module import merge_heads
    from .pieces import project_heads

    T = x.size(1)
    check_shardable(spec, world, "positions", T=T, layout=layout)
    _modelled(spec, "cp_reference")
    H = spec.n_head
    merge = torch.float32 if x.dtype in (torch.bfloat16, torch.float16) else x.dtype
    slopes = (torch.tensor(spec.positions.slopes_for(H), dtype=x.dtype, device=x.device)
              if isinstance(spec.positions, ALiBi) else None)
    held = [torch.tensor(shard_positions_of(T, r, world, layout), device=x.device)
            for r in range(world)]
    qkv = []
    for pos in held:
        q, k, v = (project_heads(x[:, pos], weights, n, spec) for n in "qkv")
        if isinstance(spec.positions, RoPE):
            q = rotate_at(q, spec.positions, pos[None], T)  # T: dynamic NTK's length, global
            k = rotate_at(k, spec.positions, pos[None], T)
        qkv.append((q, k, v))
    shards = []
    for r in range(world):
        out, lse = None, None
        for step in range(world):
            src = (r - step) % world  # the ring passes keys and values on, one rank per step
            block, block_lse = _block(qkv[r][0], qkv[src][1], qkv[src][2], spec, slopes,
                                      held[r], held[src], merge)
            if out is None or lse is None:
                out, lse = block.to(merge), block_lse  # its own block: every query sees itself
            else:  # torch's stable form of exp(lse_b - lse)-weighted sums (ring-flash-attention)
                out = out - torch.sigmoid(block_lse - lse) * (out - block.to(merge))
                lse = lse - F.logsigmoid(lse - block_lse)
        assert out is not None
        shards.append(merge_heads(out.to(x.dtype)))
    order = torch.argsort(torch.cat(held))  # rank-order positions back to global order
    return F.linear(torch.cat(shards, dim=1)[:, order], weights["o_weight"],
                    weights.get("o_bias"))
