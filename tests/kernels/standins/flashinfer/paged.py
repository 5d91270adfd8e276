"""A plain-torch stand-in for FlashInfer's paged-cache API: BatchPrefillWithPagedKVCacheWrapper
(__init__, plan, run), append_paged_kv_cache, get_batch_indices_positions, get_seq_lens. Any
device and dtype (the real one wants CUDA and fp16/bf16/fp8).

Copied from flashinfer-ai/flashinfer @fb28d724 (0.6.18):
- the signatures and argument names (flashinfer/prefill.py, flashinfer/page.py);
- the cache layouts: a (k_cache, v_cache) tuple or one 5-D tensor split on dim 1, NHD
  [pages, page_size, Hkv, D] or HND [pages, Hkv, page_size, D] (utils._unpack_paged_kv_cache),
  and the KeyError for another kv_layout (_check_kv_layout);
- plan: batch_size = len(qo_indptr) - 1, the host copies of the indptrs, kv lengths by
  get_seq_lens; sm_scale 1/sqrt(D) and soft cap 0 when None (run);
- run: the ValueErrors for q's dtype against q_data_type / k's against kv_data_type
  (utils._check_cached_qkv_data_type) and for q.shape[0] != qo_indptr[-1]; window_left must be
  plan's; page_size is read from the cache's shape, not plan's; lse [nnz, Hq] float32;
- how a row's keys are found: row b has length 0 without pages, else (pages - 1) * page_size +
  last_page_len, key p at page paged_kv_indices[indptr[b] + p // page_size], slot
  p % page_size (page.cuh: get_length, and the page iterator's divmod); nothing checks
  last_page_len against page_size, so a wrong one reads the next row's pages, as the kernel
  would read whatever those addresses hold;
- append_paged_kv_cache: entry i goes to page kv_indices[kv_indptr[batch_indices[i]] +
  positions[i] // page_size], slot positions[i] % page_size (page.cuh's
  AppendPagedKVCacheKernel); kv_last_page_len is not read by it;
- get_batch_indices_positions: positions = seq_len - (append_indptr[b+1] - i) for entry i of
  row b (triton/page.py), so seq_lens counts the tokens after the append.
- lse in base 2 and a row with no key giving o 0, lse -inf (attention/prefill.cuh, FA2
  backend: lse = log2(d) + m from init_states' m = -inf, d = 1).
Guessed, not read: the bottom-right causal corner and window_left's meaning in the batch kernel
(taken from the single-prefill docstring and the wrapper's custom-mask example); where the
num_qo_heads % num_kv_heads check happens (here in plan); the soft cap applied to the scaled
logits; run() before plan() raising RuntimeError; an index outside paged_kv_indices raising
IndexError (the kernel would read out of bounds); the split-kv merge and the FA3, cuDNN and
trtllm-gen backends behaving as the FA2 path does."""

from __future__ import annotations

import math

import torch
from _standin_dense import attend, keep_mask
from torch import Tensor


def _check_kv_layout(kv_layout: str) -> None:
    if kv_layout not in ("NHD", "HND"):
        raise KeyError(f"Invalid kv_layout {kv_layout}")


def _unpack_paged_kv_cache(paged_kv_cache, kv_layout: str) -> tuple[Tensor, Tensor]:
    if isinstance(paged_kv_cache, torch.Tensor):
        paged_k_cache, paged_v_cache = paged_kv_cache.unbind(dim=1)
        return paged_k_cache, paged_v_cache
    if isinstance(paged_kv_cache, tuple):
        paged_k_cache, paged_v_cache = paged_kv_cache
        return paged_k_cache, paged_v_cache
    raise KeyError(f"Unrecognized paged_kv_cache type {type(paged_kv_cache)}, expect a single "
                   "tensor or a tuple of tensor.")


def _nhd(cache: Tensor, kv_layout: str) -> Tensor:
    """[pages, page_size, Hkv, D] whatever the layout (a view)."""
    return cache if kv_layout == "NHD" else cache.transpose(1, 2)


def get_seq_lens(kv_indptr: Tensor, kv_last_page_len: Tensor, page_size: int) -> Tensor:
    return (torch.clamp(kv_indptr[1:] - kv_indptr[:-1] - 1, min=0) * page_size
            + kv_last_page_len)


def get_batch_indices_positions(append_indptr: Tensor, seq_lens: Tensor, nnz: int,
                                batch_indices: Tensor | None = None,
                                positions: Tensor | None = None) -> tuple[Tensor, Tensor]:
    device = append_indptr.device
    if batch_indices is None:
        batch_indices = torch.full((nnz,), -1, device=device, dtype=torch.int32)
    else:
        batch_indices.fill_(-1)
    if positions is None:
        positions = torch.zeros((nnz,), device=device, dtype=torch.int32)
    starts = append_indptr.tolist()
    for b in range(len(starts) - 1):
        start, end, seq_len = starts[b], starts[b + 1], int(seq_lens[b])
        offsets = torch.arange(start, end, device=device, dtype=torch.int32)
        batch_indices[start:end] = b
        positions[start:end] = offsets + seq_len - end
    return batch_indices, positions


def _slot(kv_indices: list[int], kv_indptr: list[int], b: int, p: int, page_size: int,
          ) -> tuple[int, int]:
    """(physical page, slot) of row b's key p, as page.cuh's divmod addresses it."""
    page_iter, entry = divmod(kv_indptr[b] * page_size + p, page_size)
    return kv_indices[page_iter], entry


def append_paged_kv_cache(append_key: Tensor, append_value: Tensor, batch_indices: Tensor,
                          positions: Tensor, paged_kv_cache, kv_indices: Tensor,
                          kv_indptr: Tensor, kv_last_page_len: Tensor,
                          kv_layout: str = "NHD") -> None:
    _check_kv_layout(kv_layout)
    k_cache, v_cache = (_nhd(c, kv_layout) for c in
                        _unpack_paged_kv_cache(paged_kv_cache, kv_layout))
    page_size = k_cache.size(1)
    indices, indptr = kv_indices.tolist(), kv_indptr.tolist()
    with torch.no_grad():
        for i, (b, p) in enumerate(zip(batch_indices.tolist(), positions.tolist(),
                                       strict=True)):
            page, entry = _slot(indices, indptr, b, p, page_size)
            k_cache[page, entry] = append_key[i]
            v_cache[page, entry] = append_value[i]


class BatchPrefillWithPagedKVCacheWrapper:
    """Prefill/append attention over a paged kv cache: plan(...) once, run(q, cache) after."""

    def __init__(self, float_workspace_buffer: Tensor, kv_layout: str = "NHD",
                 use_cuda_graph: bool = False, qo_indptr_buf=None, paged_kv_indptr_buf=None,
                 paged_kv_indices_buf=None, paged_kv_last_page_len_buf=None,
                 custom_mask_buf=None, mask_indptr_buf=None, backend: str = "auto",
                 jit_args=None, jit_kwargs=None) -> None:
        _check_kv_layout(kv_layout)
        if use_cuda_graph or jit_args is not None:
            raise NotImplementedError("flashinfer stand-in: no CUDA graphs, no JIT variants")
        self._kv_layout = kv_layout
        self._float_workspace_buffer = float_workspace_buffer
        self.device = float_workspace_buffer.device
        self._planned = False

    def plan(self, qo_indptr: Tensor, paged_kv_indptr: Tensor, paged_kv_indices: Tensor,
             paged_kv_last_page_len: Tensor, num_qo_heads: int, num_kv_heads: int,
             head_dim_qk: int, page_size: int, head_dim_vo: int | None = None,
             custom_mask=None, packed_custom_mask=None, causal: bool = False,
             pos_encoding_mode: str = "NONE", use_fp16_qk_reduction: bool = False,
             sm_scale: float | None = None, window_left: int = -1,
             logits_soft_cap: float | None = None, rope_scale=None, rope_theta=None,
             q_data_type="float16", kv_data_type=None, o_data_type=None,
             non_blocking: bool = True, **unused) -> None:
        if pos_encoding_mode != "NONE" or custom_mask is not None or packed_custom_mask is not None:
            raise NotImplementedError("flashinfer stand-in: no RoPE, ALiBi or custom masks")
        if num_qo_heads % num_kv_heads:
            raise ValueError("num_qo_heads must be a multiple of num_kv_heads")
        self._batch_size = len(qo_indptr) - 1
        # plan copies the page table to its own buffers: later edits of the caller's do not count
        self._qo_indptr = qo_indptr.to("cpu").tolist()
        self._qo_indptr_last = int(self._qo_indptr[-1])
        self._paged_kv_indptr = paged_kv_indptr.to("cpu").tolist()
        self._paged_kv_indices = paged_kv_indices.to("cpu").tolist()
        self._paged_kv_last_page_len = paged_kv_last_page_len.to("cpu").tolist()
        self._causal, self._window_left = causal, window_left
        self._sm_scale, self._logits_soft_cap = sm_scale, logits_soft_cap
        self._cached_q_data_type = _dtype(q_data_type)
        self._cached_kv_data_type = (self._cached_q_data_type if kv_data_type is None
                                     else _dtype(kv_data_type))
        self._cached_o_data_type = None if o_data_type is None else _dtype(o_data_type)
        self._planned = True

    def run(self, q: Tensor, paged_kv_cache, *args, q_scale=None, k_scale=None, v_scale=None,
            out: Tensor | None = None, lse: Tensor | None = None, return_lse: bool = False,
            enable_pdl=None, window_left: int | None = None, sinks=None, kv_cache_sf=None,
            **unused):
        if not self._planned:
            raise RuntimeError("flashinfer stand-in: run() before plan()")  # guessed
        k_cache, v_cache = _unpack_paged_kv_cache(paged_kv_cache, self._kv_layout)
        if q.dtype != self._cached_q_data_type:
            raise ValueError(f"The dtype of q {q.dtype} does not match the q_data_type "
                             f"{self._cached_q_data_type} specified in plan function.")
        if k_cache.dtype != self._cached_kv_data_type:
            raise ValueError(f"The dtype of k {k_cache.dtype} does not match the kv_data_type "
                             f"{self._cached_kv_data_type} specified in plan function.")
        if q.size(0) != self._qo_indptr_last:
            raise ValueError(
                f"q.shape[0] ({q.size(0)}) does not match qo_indptr[-1] ({self._qo_indptr_last}). "
                "For paged prefill, q must have shape [total_tokens, num_heads, head_dim] "
                "where total_tokens = qo_indptr[-1].")
        window_left = self._window_left if window_left is None else window_left
        assert window_left == self._window_left
        if sinks is not None or q_scale is not None or k_scale is not None:
            raise NotImplementedError("flashinfer stand-in: no sinks, no fp8 scales")
        k_cache, v_cache = _nhd(k_cache, self._kv_layout), _nhd(v_cache, self._kv_layout)
        page_size = k_cache.size(1)
        sm_scale = 1.0 / math.sqrt(q.size(-1)) if self._sm_scale is None else self._sm_scale
        soft_cap = self._logits_soft_cap or 0.0
        indptr, indices, last = (self._paged_kv_indptr, self._paged_kv_indices,
                                 self._paged_kv_last_page_len)
        o = torch.zeros(q.shape[:-1] + (v_cache.size(-1),), dtype=self._cached_o_data_type
                        or q.dtype, device=q.device)
        lse_out = torch.empty((q.size(0), q.size(1)), dtype=torch.float32, device=q.device)
        for b in range(self._batch_size):
            pages = indptr[b + 1] - indptr[b]
            kv_len = 0 if pages == 0 else (pages - 1) * page_size + last[b]
            places = [_slot(indices, indptr, b, p, page_size) for p in range(kv_len)]
            rows = [torch.tensor([r for r, _ in places], dtype=torch.long),
                    torch.tensor([s for _, s in places], dtype=torch.long)]
            keys, values = k_cache[rows[0], rows[1]], v_cache[rows[0], rows[1]]
            q0, q1 = self._qo_indptr[b], self._qo_indptr[b + 1]
            keep = keep_mask(q1 - q0, kv_len, causal=self._causal, left=window_left,
                             right=-1, device=q.device)
            with torch.no_grad():
                got, row_lse, _ = attend(q[None, q0:q1], keys[None], values[None], keep,
                                         scale=sm_scale, softcap=soft_cap)
            o[q0:q1] = got[0].to(o.dtype)
            lse_out[q0:q1] = (row_lse[0].transpose(0, 1) / math.log(2)).float()
        if out is not None:
            out.copy_(o)
            o = out
        if lse is not None:
            lse.copy_(lse_out)
            lse_out = lse
        return (o, lse_out) if return_lse else o


def _dtype(value) -> torch.dtype:
    """canonicalize_torch_dtype: a torch.dtype or its name."""
    return value if isinstance(value, torch.dtype) else getattr(torch, value)
