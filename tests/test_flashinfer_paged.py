"""attnspec.subjects.flashinfer_paged through the plain-torch stand-in of FlashInfer's paged API
(tests/kernels/standins/flashinfer/paged.py): the kernel properties it claims pass, the page
table it builds is FlashInfer's (indptr, indices, last_page_len), bad calls say what and why,
and three broken copies of the library each fail the property meant to catch them."""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

STANDINS = Path(__file__).parent / "kernels" / "standins"
SUBJECT = "attnspec.subjects.flashinfer_paged"
CACHE_PROPERTIES = ["paged", "kv_append"]


@pytest.fixture
def flashinfer(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    """The stand-in imported fresh as `flashinfer`, the adapter loaded on it; both dropped after."""
    ours = ("flashinfer", "_standin_dense", SUBJECT)
    saved = {n: m for n, m in sys.modules.items() if n.split(".")[0] in ours or n == SUBJECT}
    for name in saved:
        del sys.modules[name]
    monkeypatch.syspath_prepend(str(STANDINS))
    lib = importlib.import_module("flashinfer")
    yield lib
    for name in [n for n in sys.modules if n.split(".")[0] in ours or n == SUBJECT]:
        del sys.modules[name]
    sys.modules.update(saved)


def verify(only: list[str], max_examples: int) -> Any:
    import attnspec

    return attnspec.verify(SUBJECT, only=only, profile="ci", max_examples=max_examples, seed=0,
                           isolate=False, database=False)


def failed(report: Any) -> set[str]:
    return {p.id for p in report.properties if p.verdict == "fail"}


def test_the_adapter_passes_what_it_claims(flashinfer: types.ModuleType) -> None:
    """Every property it declares; backward, varlen and knobs skip (it declares none)."""
    report = verify(["oracle", "causality", "masked_rows", "window", "gqa_grouping",
                     "fresh_results", *CACHE_PROPERTIES], max_examples=6)
    assert report.ok, report.summary()
    assert all(p.verdict == "pass" and p.reached for p in report.properties), report.summary()


def test_the_page_table_is_flashinfers(flashinfer: types.ModuleType) -> None:
    """Rows of 0, P, P + 1 and 2P - 1 keys on shuffled pages: indptr counts ceil(n / P) pages,
    indices follow the block table, last_page_len is 1..P (0 only for a row of no pages)."""
    adapter = importlib.import_module(SUBJECT)
    P = 4
    table = torch.tensor([[5, 2], [7, 0], [1, 6], [3, 4]], dtype=torch.int32)
    indptr, indices, last = adapter._page_table([0, P, P + 1, 2 * P - 1], P, table,
                                                torch.device("cpu"))
    assert indptr.tolist() == [0, 0, 1, 3, 5]
    assert indices.tolist() == [7, 1, 6, 3, 4]
    assert last.tolist() == [0, 4, 1, 3]
    lengths = flashinfer.get_seq_lens(indptr, last, P)
    assert lengths.tolist() == [0, P, P + 1, 2 * P - 1]


def test_an_append_lands_where_the_block_table_says(flashinfer: types.ModuleType) -> None:
    """Two rows, cached 3 and 0 tokens, 2 appended each, pages of 2 shuffled: the new keys sit
    at logical positions 3, 4 and 0, 1, i.e. physical (page, slot) (table[0][1], 1),
    (table[0][2], 0) and (table[1][0], 0), (table[1][0], 1); nothing else changes."""
    adapter = importlib.import_module(SUBJECT)
    P, G, D = 2, 1, 3
    k_cache = torch.full((7, P, G, D), float("nan"), dtype=torch.float64)
    v_cache = k_cache.clone()
    table = torch.tensor([[4, 0, 6], [2, 5, 1]], dtype=torch.int32)
    k_new = torch.arange(12, dtype=torch.float64).view(2, 2, G, D)
    before = k_cache.clone()
    q = torch.randn(2, 1, 2, D, dtype=torch.float64)
    adapter.attention_with_cache(q, k_cache, v_cache, cache_seqlens=torch.tensor([3, 0]),
                                 causal=True, block_table=table, k=k_new, v=k_new.clone())
    want = before.clone()
    for (page, slot), key in zip([(0, 1), (6, 0), (2, 0), (2, 1)], k_new.reshape(4, G, D),
                                 strict=True):
        want[page, slot] = key
    assert torch.equal(k_cache.nan_to_num(-1), want.nan_to_num(-1))


def test_bad_calls_say_what_and_why(flashinfer: types.ModuleType) -> None:
    adapter = importlib.import_module(SUBJECT)
    q = torch.randn(2, 1, 4, 8, dtype=torch.float16)
    cache = torch.zeros(6, 4, 2, 8, dtype=torch.float16)
    table = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"block_table must be \(B, pages\) = \(2, >= 3\)"):
        adapter.attention_with_cache(q, cache, cache, cache_seqlens=torch.tensor([9, 0]),
                                     causal=True, block_table=table)
    with pytest.raises(ValueError, match=r"H=4 must be a positive multiple of G=3"):
        adapter.attention_with_cache(q, cache[:, :, :1].expand(6, 4, 3, 8), cache[:, :, :1]
                                     .expand(6, 4, 3, 8), cache_seqlens=torch.tensor([1, 1]),
                                     causal=True, block_table=table)
    with pytest.raises(ValueError, match="give both or neither"):
        adapter.attention_with_cache(q, cache, cache, cache_seqlens=torch.tensor([1, 1]),
                                     causal=True, block_table=table, k=q[:, :, :2])
    with pytest.raises(ValueError, match="causal calls only"):
        adapter.attention(q, q[:, :, :2], q[:, :, :2], causal=False, window=3)
    # the stand-in's own check, copied from FlashInfer's run()
    wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(torch.empty(16, dtype=torch.uint8))
    wrapper.plan(torch.tensor([0, 1, 2]), torch.tensor([0, 1, 2]), torch.tensor([0, 1]),
                 torch.tensor([4, 4]), 4, 2, 8, 4, q_data_type=torch.float16)
    with pytest.raises(ValueError, match=r"q.shape\[0\] \(3\) does not match qo_indptr"):
        wrapper.run(torch.zeros(3, 4, 8, dtype=torch.float16), (cache, cache))


def test_the_adapter_fails_at_load_without_flashinfer(monkeypatch: pytest.MonkeyPatch) -> None:
    from attnspec.subjects._kernels import KernelUnavailable

    monkeypatch.delitem(sys.modules, SUBJECT, raising=False)
    monkeypatch.setitem(sys.modules, "flashinfer", None)  # import raises ImportError
    with pytest.raises(KernelUnavailable, match=r"attnspec.subjects.flashinfer_paged: it needs "
                                                r"FlashInfer \(the Python module 'flashinfer'\)"
                                                r".*pip install flashinfer-python"):
        importlib.import_module(SUBJECT)
    monkeypatch.delitem(sys.modules, SUBJECT, raising=False)


# ---------------------------------------------------------------------------------------------
# Broken copies of the library: each a bug a paged kernel could have, caught by property id.


def _last_page_short(lib: types.ModuleType) -> None:
    """The kernel reads last_page_len - 1 entries of the last page (an off-by-one)."""
    class Short(lib.BatchPrefillWithPagedKVCacheWrapper):
        def plan(self, *args: Any, **kwargs: Any) -> None:
            super().plan(*args, **kwargs)
            self._paged_kv_last_page_len = [max(n - 1, 0) for n in self._paged_kv_last_page_len]
    lib.BatchPrefillWithPagedKVCacheWrapper = Short


def _page_order_ignored(lib: types.ModuleType) -> None:
    """The kernel reads a row's pages in physical order, not in paged_kv_indices' order."""
    class Sorted(lib.BatchPrefillWithPagedKVCacheWrapper):
        def plan(self, *args: Any, **kwargs: Any) -> None:
            super().plan(*args, **kwargs)
            ptr, idx = self._paged_kv_indptr, self._paged_kv_indices
            self._paged_kv_indices = [i for b in range(len(ptr) - 1)
                                      for i in sorted(idx[ptr[b]:ptr[b + 1]])]
    lib.BatchPrefillWithPagedKVCacheWrapper = Sorted


def _append_one_slot_late(lib: types.ModuleType) -> None:
    """append_paged_kv_cache writes entry i at positions[i] + 1."""
    append = lib.append_paged_kv_cache

    def late(key: Any, value: Any, batch_indices: Any, positions: Any, *rest: Any,
             **kwargs: Any) -> None:
        append(key, value, batch_indices, positions + 1, *rest, **kwargs)
    lib.append_paged_kv_cache = late


BROKEN: list[tuple[Callable[[types.ModuleType], None], set[str]]] = [
    (_last_page_short, {"paged", "kv_append"}),
    (_page_order_ignored, {"paged"}),  # a contiguous cache is one page a row: nothing to order
    (_append_one_slot_late, {"paged", "kv_append"}),
]


@pytest.mark.parametrize(("breaks", "expected"), BROKEN, ids=[b.__name__ for b, _ in BROKEN])
def test_a_broken_library_fails_the_property_that_catches_it(
        flashinfer: types.ModuleType, breaks: Callable[[types.ModuleType], None],
        expected: set[str]) -> None:
    breaks(flashinfer)
    report = verify(CACHE_PROPERTIES, max_examples=10)
    assert failed(report) == expected, report.summary()
