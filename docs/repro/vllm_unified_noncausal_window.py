"""vLLM 0.34.0 unified_attention (vllm/v1/attention/ops/triton_unified_attention.py), non-causal
with a sliding window: rows of a query block past its first row lose keys on their right.

kernel_unified_attention (non-causal, SLIDING_WINDOW = W) keeps V only where
(dist < W) & (dist > -W), dist = context_len + qpos_lo - key measured from qpos_lo, the query
block's FIRST query (triton_unified_attention.py:685-698, the `if SLIDING_WINDOW:` block before the
P @ V dot), while compute_kv_seq_mask lets query q see keys up to q + W - 1. Later rows
of the block then weigh keys whose V was replaced by 0. Correct when BLOCK_Q = 1 (H/G = 16).
CPU only: Triton's interpreter; CUDA_VISIBLE_DEVICES="" keeps vllm.triton_utils from replacing
triton by its placeholder on a machine with no GPU driver (triton_utils/importing.py:64)."""
import os

os.environ["TRITON_INTERPRET"] = "1"
os.environ["CUDA_VISIBLE_DEVICES"] = ""
import torch
import torch.nn.functional as F
from vllm.v1.attention.ops.triton_unified_attention import unified_attention


def check(H, G, T=20, D=16, W=4, P=16):
    torch.manual_seed(0)
    q = torch.randn(T, H, D)
    k = torch.randn(T, G, D)
    v = torch.randn(T, G, D)
    pages = -(-T // P)
    kc = torch.zeros(pages * P, G, D)
    kc[:T] = k
    vc = torch.zeros(pages * P, G, D)
    vc[:T] = v
    kc, vc = kc.view(pages, P, G, D), vc.view(pages, P, G, D)
    out = torch.empty_like(q)
    unified_attention(q=q, k=kc, v=vc, out=out,
                      cu_seqlens_q=torch.tensor([0, T], dtype=torch.int32), max_seqlen_q=T,
                      seqused_k=torch.tensor([T], dtype=torch.int32), max_seqlen_k=T,
                      softmax_scale=D ** -0.5, causal=False, window_size=(W - 1, W - 1),
                      block_table=torch.arange(pages, dtype=torch.int32).view(1, pages),
                      softcap=0.0, q_descale=None, k_descale=None, v_descale=None)
    i, j = torch.arange(T)[:, None], torch.arange(T)[None]
    mask = (i - j).abs() < W          # what compute_kv_seq_mask allows: |q - k| < W
    ref = F.scaled_dot_product_attention(
        q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
        attn_mask=mask, enable_gqa=True)[0].transpose(0, 1)
    err = (out - ref).abs().amax(dim=(1, 2))
    print(f"H={H} G={G} (BLOCK_Q={16 // (H // G)}): max|out - sdpa| = {err.max():.3g}; "
          f"rows off by > 1e-4: {torch.nonzero(err > 1e-4).flatten().tolist()}")

check(H=1, G=1)    # BLOCK_Q = 16: wrong
check(H=16, G=1)   # BLOCK_Q = 1: right
