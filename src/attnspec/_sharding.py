"""Sharded attention: which positions each rank holds, which worlds a spec can be sharded over.

Tensor parallelism (`heads`) gives each of W ranks n_head / W query heads and n_kv_head / W
key/value heads, the ones its query heads read. Context parallelism (`positions`) gives each
rank T / W positions: contiguous blocks, or the head-tail layout of load-balanced rings (2W
chunks, rank r holding chunks r and 2W - 1 - r, so that every rank has as much causal work).
"""

from __future__ import annotations

from ._errors import ConfigError
from ._spec import AttentionSpec

__all__ = ["LAYOUTS", "ShardError", "check_shardable", "shard_positions_of"]

KINDS = ("heads", "positions")
LAYOUTS = ("head_tail", "contiguous")


class ShardError(ConfigError):
    """A spec, length or world that cannot be sharded as asked (n_head % world, T % 2·world)."""


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
        bad = [f"{name}={n}" for name, n in (("n_head", H), ("n_kv_head", G)) if n % world]
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
