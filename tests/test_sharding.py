"""Sharded attention: the positions each rank holds, the worlds a spec shards over, and the
one-process simulations of tensor and context parallelism that give sharded subjects their
tolerance (each equal to the reference in float64, and shown to fail when broken)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import pytest
import torch
from torch import Tensor

from attnspec import ALiBi, AttentionSpec, RoPE
from attnspec.reference import sharding as _sharding
from attnspec.reference.sharding import (
    ShardError,
    check_shardable,
    cp_reference,
    shard_positions_of,
    tp_reference,
)
from attnspec.reference.spec import alibi_slopes
from attnspec.reference.variants import spec_attention


def _weights(spec: AttentionSpec, seed: int = 0) -> dict[str, Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {k: torch.randn(shape, generator=gen, dtype=torch.float64) / math.sqrt(shape[-1])
            for k, shape in spec.weight_shapes().items()
            if spec.bias or k.endswith("weight")}


def _x(spec: AttentionSpec, B: int = 2, T: int = 16, seed: int = 1) -> Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, spec.n_embd, generator=gen, dtype=torch.float64)


def _rank_order(T: int, world: int, layout: str) -> list[int]:
    return [p for r in range(world) for p in shard_positions_of(T, r, world, layout)]


# Which positions each rank holds.


@pytest.mark.parametrize(("T", "world"), [(2, 1), (8, 2), (16, 2), (16, 4), (24, 3), (64, 8)])
def test_head_tail_positions_are_torchs_load_balancer(T: int, world: int) -> None:
    try:
        from torch.distributed.tensor.experimental._context_parallel._load_balancer import (
            _HeadTailLoadBalancer,
        )
    except ImportError:
        pytest.skip("torch's private _HeadTailLoadBalancer is gone")
    torchs = _HeadTailLoadBalancer(T, world, "cpu")._generate_indices()
    assert torchs[0].tolist() == _rank_order(T, world, "head_tail")


@pytest.mark.parametrize("layout", ["head_tail", "contiguous"])
@pytest.mark.parametrize(("T", "world"), [(4, 1), (8, 2), (24, 4), (24, 3)])
def test_every_position_is_held_by_one_rank(T: int, world: int, layout: str) -> None:
    held = [shard_positions_of(T, r, world, layout) for r in range(world)]
    assert all(len(h) == T // world for h in held)
    assert sorted(p for h in held for p in h) == list(range(T))


def test_contiguous_positions_are_consecutive_blocks() -> None:
    assert _rank_order(12, 3, "contiguous") == list(range(12))
    assert shard_positions_of(12, 1, 3, "contiguous") == [4, 5, 6, 7]
    assert shard_positions_of(8, 0, 2) == [0, 1, 6, 7]


@pytest.mark.parametrize(("args", "words"), [
    ((10, 0, 3), ["T=10", "world=3", "T % 6 == 0"]),
    ((10, 0, 3, "contiguous"), ["T=10", "T % 3 == 0"]),
    ((8, 2, 2), ["rank=2", "0..1"]),
    ((8, -1, 2), ["rank=-1"]),
    ((8, 0, 2, "zigzag"), ["layout='zigzag'", "'head_tail'", "'contiguous'"]),
    ((8, 0, 0), ["world=0", ">= 1"]),
    ((8, 0, True), ["world=True"]),
])
def test_positions_refusals_say_why(args: tuple[object, ...], words: list[str]) -> None:
    with pytest.raises(ShardError) as caught:
        shard_positions_of(*args)  # type: ignore[arg-type]
    for word in words:
        assert word in str(caught.value)


# Which worlds a spec shards over.


@pytest.mark.parametrize(("spec", "world", "words"), [
    (AttentionSpec(24, 6), 4, ["n_head=6", "world=4", "worlds that work", "2, 3, 6"]),
    (AttentionSpec(32, 8, n_kv_head=2), 4, ["n_kv_head=2", "world=4", "2"]),
    (AttentionSpec(32, 8, n_kv_head=1), 2, ["n_kv_head=1", "none above 1"]),
    (AttentionSpec(24, 6, n_kv_head=3), 4, ["n_head=6 and n_kv_head=3 are", "3"]),
])
def test_heads_refusals_name_the_numbers_and_the_worlds_that_work(
        spec: AttentionSpec, world: int, words: list[str]) -> None:
    with pytest.raises(ShardError) as caught:
        check_shardable(spec, world, "heads")
    for word in words:
        assert word in str(caught.value)


def test_valid_shardings_pass_and_bad_kinds_are_refused() -> None:
    check_shardable(AttentionSpec(32, 8, n_kv_head=2), 2, "heads")
    check_shardable(AttentionSpec(32, 8, n_kv_head=1), 1, "heads")
    check_shardable(AttentionSpec(32, 8, n_kv_head=1), 4, "positions", T=16)
    check_shardable(AttentionSpec(32, 8), 4, "positions", T=12, layout="contiguous")
    with pytest.raises(ShardError, match="T % 8"):
        check_shardable(AttentionSpec(32, 8), 4, "positions", T=12)
    with pytest.raises(ShardError, match="kind='rows'"):
        check_shardable(AttentionSpec(32, 8), 2, "rows")


# The simulations equal the reference in float64.

SPECS = [
    AttentionSpec(16, 4),
    AttentionSpec(32, 8, n_kv_head=2, positions=RoPE()),
    AttentionSpec(32, 4, n_kv_head=4, positions=RoPE(interleaved=True, fraction=0.5), bias=False),
    AttentionSpec(16, 4, n_kv_head=4, head_dim=6, positions=ALiBi(), window=3),
    AttentionSpec(24, 4, n_kv_head=2, head_dim=8, softcap=2.0, scale=0.3, window=5),
    AttentionSpec(16, 8, n_kv_head=8, positions=ALiBi(), bias=False),
]


@pytest.mark.parametrize("world", [1, 2, 4])
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.describe())
def test_tensor_parallel_equals_the_reference(spec: AttentionSpec, world: int) -> None:
    if spec.G % world:
        spec = replace(spec, n_kv_head=None)  # MHA: every world here divides H = G
    w, x = _weights(spec), _x(spec)
    torch.testing.assert_close(tp_reference(x, w, spec, world), spec_attention(x, w, spec),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layout", ["head_tail", "contiguous"])
@pytest.mark.parametrize("world", [1, 2, 4])
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.describe())
def test_ring_attention_equals_the_reference(spec: AttentionSpec, world: int,
                                             layout: str) -> None:
    w, x = _weights(spec), _x(spec)
    torch.testing.assert_close(cp_reference(x, w, spec, world, layout),
                               spec_attention(x, w, spec), rtol=1e-12, atol=1e-12)


def test_mqa_over_two_ranks_holds_its_one_kv_head_on_every_rank_in_the_ring() -> None:
    spec = AttentionSpec(32, 4, n_kv_head=1, positions=RoPE(), window=2)
    w, x = _weights(spec), _x(spec, T=8)
    torch.testing.assert_close(cp_reference(x, w, spec, 2), spec_attention(x, w, spec),
                               rtol=1e-12, atol=1e-12)
    with pytest.raises(ShardError, match="n_kv_head=1"):
        tp_reference(x, w, spec, 2)


def test_simulations_check_the_sharding_first() -> None:
    spec = AttentionSpec(16, 4)
    w, x = _weights(spec), _x(spec, T=6)
    with pytest.raises(ShardError, match="T % 8"):
        cp_reference(x, w, spec, 4)
    with pytest.raises(ShardError, match="n_head=4"):
        tp_reference(x, w, spec, 3)


# The agreement above could fail: a broken sharding is far off.


def test_ring_output_scattered_back_with_the_other_layout_is_far_off() -> None:
    spec = AttentionSpec(32, 8, n_kv_head=2, positions=RoPE())
    w, x = _weights(spec), _x(spec)
    ref = spec_attention(x, w, spec)
    # Rank-order shards read as global order: what a subject that forgot the layout returns.
    misplaced = cp_reference(x, w, spec, 2, "head_tail")[:, _rank_order(16, 2, "head_tail")]
    assert (misplaced - ref).abs().max() > 0.1


def test_tensor_parallel_alibi_with_local_slopes_is_far_off(
        monkeypatch: pytest.MonkeyPatch) -> None:
    spec = AttentionSpec(32, 8, positions=ALiBi())
    w, x = _weights(spec), _x(spec)
    ref = spec_attention(x, w, spec)
    torch.testing.assert_close(tp_reference(x, w, spec, 2), ref, rtol=1e-12, atol=1e-12)
    # Each rank taking the slopes of an H/W-head model, as a rank-local ALiBi would.
    monkeypatch.setattr(_sharding, "_alibi_of", lambda alibi, H, heads: alibi_slopes(len(heads)))
    assert (tp_reference(x, w, spec, 2) - ref).abs().max() > 0.1


# Gradients flow through both, as through the reference.


@pytest.mark.parametrize("kind", ["tp", "cp"])
def test_input_gradients_equal_the_references(kind: str) -> None:
    spec = AttentionSpec(32, 4, n_kv_head=2, positions=RoPE(), window=6, softcap=3.0)
    w, x = _weights(spec), _x(spec)
    c = torch.randn(x.shape, generator=torch.Generator().manual_seed(2), dtype=x.dtype)

    def grad(run: Callable[[Tensor], Tensor]) -> Tensor:
        xg = x.clone().requires_grad_(True)
        (run(xg) * c).sum().backward()
        assert xg.grad is not None
        return xg.grad

    sharded = grad(lambda t: tp_reference(t, w, spec, 2) if kind == "tp"
                   else cp_reference(t, w, spec, 4))
    got = grad(lambda t: spec_attention(t, w, spec))
    assert torch.isfinite(sharded).all()
    torch.testing.assert_close(sharded, got, rtol=1e-10, atol=1e-10)
