"""The Triton library adapters' own parts that run without their libraries: SGLang's KV pool
built from attnspec's caches (slot numbers, the new tokens written where SGLang's pool writes
them), the vendored tutorial still the tutorial's bytes, and the sweep's list of adapters naming
real modules and properties. The adapters themselves run in `nox -s triton` (docs/triton.md)."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from attnspec.subjects._sglang import cache_pool, dense_pool

ROOT = Path(__file__).resolve().parents[1]
VENDORED = ROOT / "src" / "attnspec" / "subjects" / "_vendor" / "triton_fused_attention.py"
TUTORIAL_BLOB = "b1283e8ef99cb01a1acc3df0accf2caeba38e506"  # git blob of 06-fused-attention.py


def test_a_dense_call_is_a_pool_of_each_rows_keys_in_order() -> None:
    k = torch.arange(2 * 3 * 1 * 2, dtype=torch.float32).view(2, 3, 1, 2)
    pool = dense_pool(k, k + 100)
    assert [s.tolist() for s in pool.slots] == [[0, 1, 2], [3, 4, 5]]
    assert pool.page_size == 1 and torch.equal(pool.k_buffer[pool.slots[1]], k[1])
    indptr, indices = pool.indices(pool.slots)
    assert indptr.tolist() == [0, 3, 6] and indices.dtype == torch.int32


def test_a_paged_cache_names_slots_page_times_size_plus_offset_and_writes_new_tokens() -> None:
    P, G, D = 4, 1, 2
    k_cache, v_cache = torch.zeros(6, P, G, D), torch.zeros(6, P, G, D)
    table = torch.tensor([[5, 2], [0, 3]], dtype=torch.int32)
    new_k, new_v = torch.ones(2, 2, G, D), 2 * torch.ones(2, 2, G, D)
    pool = cache_pool("here", k_cache, v_cache, torch.tensor([3, 0]), table, new_k, new_v)
    assert pool.page_size == P
    assert pool.slots[0].tolist() == [20, 21, 22, 23, 8]  # 3 cached + 2 new, onto page 2
    assert pool.slots[1].tolist() == [0, 1]
    assert k_cache[5, 3].eq(1).all() and k_cache[2, 0].eq(1).all() and v_cache[0, :2].eq(2).all()
    assert k_cache[5, :3].eq(0).all() and k_cache[3].eq(0).all()  # nothing else written
    assert pool.k_buffer.data_ptr() == k_cache.data_ptr()  # the pool is the cache, not a copy


def test_a_contiguous_cache_is_one_page_per_row() -> None:
    k_cache = torch.zeros(2, 5, 1, 2)
    pool = cache_pool("here", k_cache, k_cache.clone(), torch.tensor([1, 4]), None,
                      torch.ones(2, 1, 1, 2), torch.ones(2, 1, 1, 2))
    assert [s.tolist() for s in pool.slots] == [[0, 1], [5, 6, 7, 8, 9]]
    assert pool.page_size == 1 and k_cache[0, 1].eq(1).all() and k_cache[1, 4].eq(1).all()


@pytest.mark.parametrize(("table", "lens", "match"), [
    (torch.tensor([[0]]), [5], r"block_table must be \(B, pages\) = \(1, >= 2\)"),
    (None, [9], "a contiguous cache needs B=1 rows of room for cache_seqlens \\+ Tnew = \\[9\\]"),
])
def test_a_cache_too_small_for_its_tokens_says_how_much_it_needs(table: torch.Tensor | None,
                                                                 lens: list[int],
                                                                 match: str) -> None:
    with pytest.raises(ValueError, match=match):
        cache_pool("sglang_extend.attention_with_cache(...)", torch.zeros(1, 4, 1, 2),
                   torch.zeros(1, 4, 1, 2), torch.tensor(lens), table, None, None)


def test_a_strided_cache_is_refused_since_the_pool_must_be_written_in_place() -> None:
    cache = torch.zeros(4, 2, 1, 2).transpose(0, 1)
    with pytest.raises(ValueError, match="must be contiguous"):
        cache_pool("here", cache, cache, torch.tensor([0, 0]), None, None, None)


def test_the_vendored_tutorial_is_the_tutorials_bytes() -> None:
    lines = VENDORED.read_bytes().split(b"\n")
    start = next(n for n, line in enumerate(lines) if not line.startswith(b"#"))
    body = b"\n".join(lines[start:])
    blob = hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest()  # noqa: S324 (git's id)
    assert blob == TUTORIAL_BLOB
    assert b"5c846f015d9cfbe94480fea890545888ea33b827" in b"\n".join(lines[:start])


def test_the_sweeps_adapters_are_modules_and_their_expected_failures_properties() -> None:
    from attnspec.properties.kernel import KERNEL_PROPERTIES

    sys.path.insert(0, str(ROOT / "tests" / "kernels" / "triton"))
    try:
        import sweep
    finally:
        sys.path.pop(0)
    ids = {p.id for p in KERNEL_PROPERTIES}
    for adapter, library, _, want in sweep.ADAPTERS:
        name = adapter.rsplit(".", 1)[1]
        assert (ROOT / "src" / "attnspec" / "subjects" / f"{name}.py").is_file(), adapter
        assert library in ("sglang", "vllm", "triton")
        assert want == "none" or set(want.split(", ")) <= ids, want
    assert importlib.util.find_spec("attnspec.subjects._vendor") is not None
