"""transformers' Falcon with ALiBi: the eager attention path adds the ALiBi bias twice.

FalconModel folds alibi / sqrt(head_dim) into the 4-D causal mask it hands every layer, and
hands the layer the alibi tensor too. The SDPA path uses the mask alone (ALiBi once); the eager
path adds alibi to the scores, scales, and then adds the mask, which holds alibi again. So
attn_implementation="eager" and "sdpa" of the same weights disagree, and eager matches an
explicit computation with 2 x ALiBi, SDPA the one with 1 x.

Uses torch and transformers alone. Exit 0 when the bug is present, 1 when it is fixed.
Run: python scripts/findings/falcon_alibi_twice.py
"""

from __future__ import annotations

import math
import sys

import torch
import transformers
from transformers import FalconConfig, FalconModel
from transformers.models.falcon.modeling_falcon import build_alibi_tensor

B, T, C, H = 2, 9, 16, 4
D = C // H


def model(impl: str, state: dict[str, torch.Tensor] | None) -> FalconModel:
    # rope_parameters keeps its default: FalconConfig validates it even when alibi=True.
    config = FalconConfig(vocab_size=16, hidden_size=C, num_hidden_layers=1,
                          num_attention_heads=H, alibi=True, new_decoder_architecture=False,
                          multi_query=False, parallel_attn=True, bias=False,
                          attention_dropout=0.0, hidden_dropout=0.0)
    config._attn_implementation = impl
    m = FalconModel(config).eval()
    if state is None:
        torch.manual_seed(0)
        # Weights of a 1/sqrt(C) scale (initializer_range 0.02 makes every score ~0).
        with torch.no_grad():
            for p in m.parameters():
                if p.dim() == 2:
                    p.copy_(torch.randn_like(p) / math.sqrt(p.size(1)))
    else:
        m.load_state_dict(state)
    return m


def attention_output(m: FalconModel, x: torch.Tensor) -> torch.Tensor:
    seen: list[torch.Tensor] = []
    hook = m.h[0].self_attention.register_forward_hook(lambda _m, _i, out: seen.append(out[0]))
    with torch.no_grad():
        m(inputs_embeds=x)
    hook.remove()
    return seen[0]


def explicit(m: FalconModel, x: torch.Tensor, n_alibi: int) -> torch.Tensor:
    """Falcon's attention written out, with n_alibi copies of the ALiBi bias in the scores."""
    layer = m.h[0]
    attn = layer.self_attention
    with torch.no_grad():
        h = layer.input_layernorm(x)
        q, k, v = (t.transpose(1, 2) for t in attn._split_heads(attn.query_key_value(h)))
        alibi = build_alibi_tensor(torch.ones(B, T, dtype=torch.long), H, x.dtype)
        alibi = alibi.view(B, H, 1, T)
        scores = (q @ k.transpose(-1, -2) + n_alibi * alibi) / math.sqrt(D)
        future = torch.ones(T, T, dtype=torch.bool).triu(1)
        probs = scores.masked_fill(future, float("-inf")).softmax(-1)
        out = (probs @ v).transpose(1, 2).reshape(B, T, C)
        result: torch.Tensor = attn.dense(out)
    return result


def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, float32, "
          f"B={B} T={T} C={C} H={H}, seed 0")
    eager = model("eager", None)
    sdpa = model("sdpa", eager.state_dict())
    torch.manual_seed(1)
    x = torch.randn(B, T, C)
    out_eager, out_sdpa = attention_output(eager, x), attention_output(sdpa, x)
    once, twice = explicit(eager, x, 1), explicit(eager, x, 2)
    gap = (out_eager - out_sdpa).abs().max().item()
    with torch.no_grad():
        model_gap = (eager(inputs_embeds=x).last_hidden_state
                     - sdpa(inputs_embeds=x).last_hidden_state).abs().max().item()
    print(f"attention layer: max|eager - sdpa|                 = {gap:.3g}")
    print(f"1-layer model:   max|eager - sdpa|                 = {model_gap:.3g}")
    print(f"max|sdpa  - explicit, ALiBi once| = {(out_sdpa - once).abs().max().item():.3g}")
    print(f"max|eager - explicit, ALiBi once| = {(out_eager - once).abs().max().item():.3g}")
    print(f"max|eager - explicit, ALiBi twice| = {(out_eager - twice).abs().max().item():.3g}")
    present = gap > 1e-4 and (out_eager - twice).abs().max().item() < 1e-5
    print("bug present: eager adds ALiBi twice" if present else "not reproduced: eager == sdpa")
    return 0 if present else 1


if __name__ == "__main__":
    sys.exit(main())
