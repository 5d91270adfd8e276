"""Built-in subjects: TARGETs that ship with attnspec (`attnspec verify attnspec.subjects.NAME`).

- `reference`: the explicit path (the oracle itself).
- `reference_sdpa`: the reference's fast path (`kernel="sdpa"`).
- `torch_mha`: `torch.nn.MultiheadAttention` with a causal mask.
- `sdpa`: fused QKV projection + `F.scaled_dot_product_attention(is_causal=True)`.
- `hf_gpt2`: transformers' `GPT2Attention` (needs `attnspec[hf]`).
- `variants`: the reference for every attention spec (protocol v2: GQA, windows, RoPE, ALiBi).
- `hf_llama`: transformers' `LlamaAttention`, GQA with RoPE (protocol v2; needs `attnspec[hf]`).
- `hf_mistral`: transformers' `MistralAttention` with HF's sliding-window mask (protocol v2).
- `hf_bloom`: transformers' `BloomAttention`, ALiBi (protocol v2).
- `sdpa_lower_right`: torch's SDPA with `causal_lower_right`: a cache, padding, Tq < Tk (v2).
- `reference_tp`: the reference sharded over heads with DTensor tensor parallelism (v2,
  `shard_heads`).
- `reference_ring`: ring attention over torch's ring (private API) with the CPU flash kernel,
  positions sharded head-tail (v2, `shard_positions`; RoPE, no window, soft cap or ALiBi).

Kernels (PROTOCOL = "kernel": attention(q, k, v, ...) -> o or (o, lse)):

- `kernel_sdpa`: torch's SDPA, `is_causal` (top-left), `enable_gqa`; no LSE.
- `kernel_sdpa_lower_right`: SDPA with `causal_lower_right` (bottom-right).
- `kernel_flex`: `flex_attention` (eager on CPU: forward only), block mask, score_mod, LSE.
- `kernel_blockwise`: a tiled online-softmax kernel in plain torch: every feature, knobs.
- Adapters, skipped where their library or a GPU is absent: `flash_attn`, `flash_attn_varlen`,
  `flash_attn_kvcache` (`flash_attn_with_kvcache`, paged),
  `xformers`, `xformers_bottom_right`, `flashinfer`, `flashinfer_paged`
  (`BatchPrefillWithPagedKVCacheWrapper`, `append_paged_kv_cache`, paged); Triton's, interpreted
  without a GPU (docs/triton.md): `sglang_prefill`, `sglang_extend`, `sglang_decode` (SGLang's
  `context_attention_fwd`, `extend_attention_fwd`, `decode_attention_fwd`),
  `vllm_prefix_prefill`, `vllm_unified` (vLLM's `context_attention_fwd`, `unified_attention`),
  `triton_tutorial` (the tutorial's fused attention, vendored);
  `flash_style.flash_attn_style` wraps a kernel of your own with `flash_attn_func`'s signature.

Every protocol v2 built-in but `hf_mistral` and `hf_bloom` has inference hooks: `variants` all
three, `hf_llama` decode (its DynamicCache) and padded, `sdpa_lower_right` all three.
"""

BUILTIN = ("reference", "reference_sdpa", "torch_mha", "sdpa", "hf_gpt2", "variants",
           "hf_llama", "hf_mistral", "hf_bloom", "sdpa_lower_right", "reference_tp",
           "reference_ring")
"""Every built-in module subject, in the order reports and tables list them."""

KERNEL_BUILTIN = ("kernel_sdpa", "kernel_sdpa_lower_right", "kernel_flex", "kernel_blockwise")
"""Every built-in kernel subject that runs on any machine (the adapters need their library)."""

EXTRAS = {"hf_gpt2": "transformers", "hf_llama": "transformers", "hf_mistral": "transformers",
          "hf_bloom": "transformers"}
"""The module a built-in subject needs beyond attnspec's own dependencies."""
