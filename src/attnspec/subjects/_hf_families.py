"""What `attnspec.subjects.hf` knows of each transformers model type: which spec fields it can
express and how (the config keys), where its attention layer sits, and how its projections are
laid out. Read off transformers 5.24's modeling and configuration code, and checked against
attnspec's oracle by the conformance matrix (docs/transformers.md)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from ..reference.spec import ALiBi, AttentionSpec, LinearScaling, Llama3Scaling, QKNorm, RoPE, YaRN

Weights = dict[str, Tensor | None]

_ATTENTION_NAMES = ("self_attn", "attn", "self_attention", "attention")


def locate(model: nn.Module) -> nn.Module:
    """The first decoder layer's attention module."""
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) > 0:
            layer = module[0]
            for name in _ATTENTION_NAMES:
                found = getattr(layer, name, None)
                if isinstance(found, nn.Module):
                    return found
    raise ValueError(f"{type(model).__name__}: no decoder layer with an attention module named "
                     f"one of {', '.join(_ATTENTION_NAMES)}.")


def rope_parameters(rope: RoPE) -> dict[str, Any]:
    """transformers' rope_parameters for attnspec's RoPE and its scaling (llama3, linear,
    YaRN), with partial_rotary_factor; shared by every hf adapter."""
    out: dict[str, Any] = {"rope_type": "default", "rope_theta": rope.theta}
    out["partial_rotary_factor"] = rope.fraction
    scaling = rope.scaling
    if isinstance(scaling, Llama3Scaling):
        out |= {"rope_type": "llama3", "factor": scaling.factor,
                "low_freq_factor": scaling.low_freq_factor,
                "high_freq_factor": scaling.high_freq_factor,
                "original_max_position_embeddings": scaling.original_max_position}
    elif isinstance(scaling, LinearScaling):
        out |= {"rope_type": "linear", "factor": scaling.factor}
    elif isinstance(scaling, YaRN):
        out |= {"rope_type": "yarn", "factor": scaling.factor, "beta_fast": scaling.beta_fast,
                "beta_slow": scaling.beta_slow, "truncate": scaling.truncate,
                "original_max_position_embeddings": scaling.original_max_position}
        if scaling.attention_factor is not None:
            out["attention_factor"] = scaling.attention_factor
    elif scaling is not None:  # dynamic NTK's cache semantics differ from attnspec's
        raise ValueError(f"attnspec's {type(scaling).__name__} RoPE scaling has no mapping to "
                         "transformers' rope_parameters (llama3, linear and YaRN do).")
    return out


# Small sizes for everything that is not the attention: the model is built per example.
_SMALL = {"num_hidden_layers": 1, "intermediate_size": 8, "vocab_size": 16, "pad_token_id": 0,
          "bos_token_id": 1, "eos_token_id": 2, "max_position_embeddings": 4096,
          "attention_dropout": 0.0}


def _base(spec: AttentionSpec, *, kv: str | None = "num_key_value_heads",
          head_dim: str | None = "head_dim", bias: str | None = "attention_bias",
          rope: bool = True, window: str | None = None, layer_types: bool = True,
          **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"hidden_size": spec.n_embd, "num_attention_heads": spec.n_head,
                           **_SMALL}
    if kv is not None:
        out[kv] = spec.G
    if head_dim is not None:
        out[head_dim] = spec.D
    if bias is not None:
        out[bias] = spec.bias
    if rope and isinstance(spec.positions, RoPE):
        out["rope_parameters"] = rope_parameters(spec.positions)
    if window is not None:
        out[window] = spec.window
        if not layer_types:  # Mistral and Mixtral read sliding_window alone
            pass
        elif spec.window is not None:
            out["layer_types"] = ["sliding_attention"]
        else:
            out["layer_types"] = ["full_attention"]
    return out | extra


def _plain(spec: AttentionSpec) -> bool:
    return spec.window is None and spec.scale is None and spec.softcap is None \
        and spec.qk_norm is None and not spec.sinks


def _rope_ok(spec: AttentionSpec, *, fraction: bool = False, interleaved: bool = False) -> bool:
    rope = spec.positions
    return (isinstance(rope, RoPE) and (fraction or rope.fraction == 1.0)
            and rope.interleaved == interleaved)


def _c_div_h(spec: AttentionSpec) -> bool:
    """Configs that check hidden_size % num_attention_heads even with a head_dim of their own."""
    return spec.n_embd % spec.n_head == 0


def _separate(attn: Any, spec: AttentionSpec) -> Weights:
    o = next(getattr(attn, n) for n in ("o_proj", "dense", "out_proj") if hasattr(attn, n))
    layers = {"q": attn.q_proj, "k": attn.k_proj, "v": attn.v_proj, "o": o}
    out: Weights = {f"{n}_weight": layer.weight for n, layer in layers.items()}
    out |= {f"{n}_bias": layer.bias for n, layer in layers.items()}
    return out


def _fused_concat(weight: Tensor, bias: Tensor | None, spec: AttentionSpec) -> Weights:
    """[q (H·D) | k (G·D) | v (G·D)] rows (Phi-3, MPT, GPT-BigCode)."""
    H, G, D = spec.n_head, spec.G, spec.D
    sizes = [H * D, G * D, G * D]
    out: Weights = dict(zip(("q_weight", "k_weight", "v_weight"), torch.split(weight, sizes),
                            strict=True))
    if bias is not None:
        out |= dict(zip(("q_bias", "k_bias", "v_bias"), torch.split(bias, sizes), strict=True))
    return out


def _fused_per_head(weight: Tensor, bias: Tensor | None, spec: AttentionSpec) -> Weights:
    """(H, 3, D) rows: each head's q, k, v in turn (GPT-NeoX, BLOOM, Persimmon, Falcon-RW)."""
    H, D, C = spec.n_head, spec.D, spec.n_embd
    w = weight.view(H, 3, D, C)
    out: Weights = {f"{n}_weight": w[:, i].reshape(H * D, C) for i, n in enumerate("qkv")}
    if bias is not None:
        b = bias.view(H, 3, D)
        out |= {f"{n}_bias": b[:, i].reshape(H * D) for i, n in enumerate("qkv")}
    return out


def _fused_grouped(weight: Tensor, bias: Tensor | None, spec: AttentionSpec) -> Weights:
    """(G, H/G + 2, D) rows: each kv group's queries, then its key, then its value (Falcon's
    new decoder architecture)."""
    H, G, D, C = spec.n_head, spec.G, spec.D, spec.n_embd
    w = weight.view(G, H // G + 2, D, C)
    out: Weights = {"q_weight": w[:, :-2].reshape(H * D, C),
                    "k_weight": w[:, -2].reshape(G * D, C),
                    "v_weight": w[:, -1].reshape(G * D, C)}
    if bias is not None:
        b = bias.view(G, H // G + 2, D)
        out |= {"q_bias": b[:, :-2].reshape(H * D), "k_bias": b[:, -2].reshape(G * D),
                "v_bias": b[:, -1].reshape(G * D)}
    return out


def _linear_out(layer: Any) -> Weights:
    return {"o_weight": layer.weight, "o_bias": layer.bias}


def _norms_named(q: str, k: str) -> Callable[[Any], tuple[Any, Any]]:
    return lambda attn: (getattr(attn, q), getattr(attn, k))


@dataclass(frozen=True)
class Family:
    """One model type: its config mapping, variants, layout and what it supports."""

    model_type: str
    config: Callable[[AttentionSpec], dict[str, Any]]
    variants: Mapping[str, Any]
    supports: Callable[[AttentionSpec], bool]
    export: Callable[[Any, AttentionSpec], Weights] = _separate
    norms: Callable[[Any], tuple[Any, Any]] = _norms_named("q_norm",
                                                                             "k_norm")
    after: Callable[[AttentionSpec], dict[str, Any]] = lambda spec: {}
    residual: str | None = None
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16)
    hooks: tuple[str, ...] = ("decode", "decode_padded", "shifted", "padded")
    locate: Callable[[nn.Module], nn.Module] = locate
    doc: str = ""
    masked: Mapping[str, tuple[str, str]] = field(default_factory=dict)

    def declarations(self, backend: str) -> tuple[str, str]:
        """MASKED_ROWS and PADDING_VALUES on `backend`, as measured (tests/test_hf_adapter.py
        checks each is the strongest that holds). Every backend multiplies the weights into
        the values, so NaN padding reaches real rows (0 x NaN): "finite". A query that sees
        no key attends evenly under eager ("finite"); transformers' sdpa path zeroes such rows
        ("zero")."""
        default = ("zero", "finite") if backend == "sdpa" else ("finite", "finite")
        return self.masked.get(backend, default)


FAMILIES: dict[str, Family] = {}
REFUSED: dict[str, str] = {}


def _add(family: Family) -> None:
    FAMILIES[family.model_type] = family


_ROPE = [RoPE(), RoPE(theta=500000.0)]
# No window of 1: transformers' sliding-window cache decodes it wrongly (docs/findings.md,
# "sliding-window decoding with a window of 1"), a library bug the matrix would otherwise
# report on every windowed model type.
_WINDOWS = [None, 2, 3, 5, 8, 16]
_GQA = {"n_kv_head": "any", "head_dim": "any"}


def _llama_like(model_type: str, *, bias: str | None = "attention_bias", bias_values: Any = "any",
                head_dim: bool = True, head_dim_any: bool = True, window: str | None = None,
                rope: list[Any] | None = None,
                fraction: bool = False, interleaved: bool = False, c_div_h: bool = True,
                kv: bool = True, extra: Callable[[AttentionSpec], dict[str, Any]] | None = None,
                allow: Callable[[AttentionSpec], bool] | None = None,
                variants: Mapping[str, Any] | None = None, layer_types: bool = True,
                **kwargs: Any) -> None:
    """The separate q/k/v/o projection families (Llama and its many descendants)."""
    def config(spec: AttentionSpec) -> dict[str, Any]:
        out = _base(spec, kv="num_key_value_heads" if kv else None,
                    head_dim="head_dim" if head_dim else None, bias=bias,
                    window=window, layer_types=layer_types)
        return out | (extra(spec) if extra else {})

    def supports(spec: AttentionSpec) -> bool:
        ok = _rope_ok(spec, fraction=fraction, interleaved=interleaved) or (
            spec.positions is None and None in (rope or _ROPE))
        ok = ok and (not c_div_h or _c_div_h(spec))
        ok = ok and ((head_dim and head_dim_any) or spec.head_dim is None
                     or spec.head_dim * spec.n_head == spec.n_embd)
        ok = ok and (kv or spec.G == spec.n_head)
        if allow is not None:
            return ok and allow(spec)
        return ok and _plain(spec) if window is None else ok and (
            spec.scale is None and spec.softcap is None and spec.qk_norm is None
            and not spec.sinks)

    base: dict[str, Any] = {"positions": rope or _ROPE}
    if kv:
        base["n_kv_head"] = "any"
    if head_dim and head_dim_any:
        base["head_dim"] = "any"
    if bias is not None:
        base["bias"] = bias_values
    elif bias_values != "any":
        base["bias"] = bias_values
    if window is not None:
        base["window"] = _WINDOWS
    _add(Family(model_type=model_type, config=config, supports=supports,
                variants=base | dict(variants or {}), **kwargs))


for _mt in ("llama", "arcee", "olmo"):
    _llama_like(_mt)
# Helium and ERNIE 4.5 rotate channel pairs (0, 1), (2, 3), ...; Helium's o_proj is C wide.
_llama_like("helium", head_dim_any=False, interleaved=True, rope=[RoPE(interleaved=True)])
_llama_like("ernie4_5", bias="use_bias", interleaved=True, rope=[RoPE(interleaved=True)])
_llama_like("mixtral", window="sliding_window", layer_types=False)
_llama_like("mistral", window="sliding_window", layer_types=False)
_llama_like("granite", extra=lambda s: {"attention_multiplier": s.attn_scale},
            allow=lambda s: s.window is None and s.softcap is None and s.qk_norm is None
            and not s.sinks,
            variants={"scale": [None, 0.25, 0.0078125]})
_llama_like("granitemoe", extra=lambda s: {"attention_multiplier": s.attn_scale},
            allow=lambda s: s.window is None and s.softcap is None and s.qk_norm is None
            and not s.sinks,
            variants={"scale": [None, 0.25, 0.0078125]})
_llama_like("starcoder2", bias="use_bias", window="sliding_window")
# Qwen2: biases on q, k and v, none on o (exported as zero); sliding layers by layer_types.
_llama_like("qwen2", bias=None, bias_values=[True], window="sliding_window",
            extra=lambda s: {"use_sliding_window": s.window is not None})
_llama_like("qwen2_moe", bias=None, bias_values=[True], window="sliding_window",
            extra=lambda s: {"use_sliding_window": s.window is not None,
                             "qkv_bias": True, "moe_intermediate_size": 8,
                             "shared_expert_intermediate_size": 8, "num_experts": 2,
                             "num_experts_per_tok": 1})
_llama_like("phimoe", window="sliding_window")

_QK_RMS = [QKNorm("rms", 1e-6, True)]


def _qk(spec: AttentionSpec) -> dict[str, Any]:
    return {"rms_norm_eps": spec.qk_norm.eps} if spec.qk_norm is not None else {}


def _qk_only(spec: AttentionSpec) -> bool:
    return spec.scale is None and spec.softcap is None and not spec.sinks \
        and spec.qk_norm is not None


_llama_like("qwen3", window="sliding_window",
            extra=lambda s: _qk(s) | {"use_sliding_window": s.window is not None},
            allow=_qk_only, variants={"qk_norm": _QK_RMS})
_llama_like("qwen3_moe", window="sliding_window",
            extra=lambda s: _qk(s) | {"use_sliding_window": s.window is not None,
                                      "moe_intermediate_size": 8, "num_experts": 2,
                                      "num_experts_per_tok": 1},
            allow=_qk_only, variants={"qk_norm": _QK_RMS})
_llama_like("apertus", extra=_qk, allow=lambda s: _qk_only(s) and s.window is None,
            variants={"qk_norm": _QK_RMS})
_llama_like("olmo2", extra=_qk, allow=lambda s: _qk_only(s) and s.window is None,
            variants={"qk_norm": [QKNorm("rms", 1e-6, False)]})
def _per_layer_type(spec: AttentionSpec) -> dict[str, Any]:
    """Configs with rope_parameters per layer type and a sliding_window always set (OLMo 3)."""
    assert isinstance(spec.positions, RoPE)
    rope = rope_parameters(spec.positions)
    kind = "sliding_attention" if spec.window is not None else "full_attention"
    return {"rope_parameters": {"full_attention": rope, "sliding_attention": rope},
            "layer_types": [kind], "sliding_window": spec.window or 4096}


_llama_like("olmo3", window="sliding_window", extra=lambda s: _qk(s) | _per_layer_type(s),
            allow=_qk_only,
            variants={"qk_norm": [QKNorm("rms", 1e-6, False)]})
_llama_like("exaone4", window="sliding_window", extra=_qk, allow=_qk_only,
            variants={"qk_norm": _QK_RMS})


def _gemma_scalar(spec: AttentionSpec) -> int | None:
    """Gemma 2 and 3 scale scores by query_pre_attn_scalar ** -0.5, a whole number."""
    value = 1.0 / spec.attn_scale ** 2
    return round(value) if abs(value - round(value)) < 1e-9 * value else None


def _gemma_scale(spec: AttentionSpec) -> dict[str, Any]:
    return {"query_pre_attn_scalar": _gemma_scalar(spec)}


_llama_like("gemma")
_llama_like("gemma2", window="sliding_window",
            extra=lambda s: _gemma_scale(s) | {"attn_logit_softcapping": s.softcap,
                                               "final_logit_softcapping": None,
                                               "sliding_window": s.window or 4096},
            allow=lambda s: s.qk_norm is None and not s.sinks and _gemma_scalar(s) is not None,
            variants={"scale": [None, 0.0625, 0.25], "softcap": [None, 50.0, 5.0]})
_llama_like("vaultgemma", window="sliding_window",
            extra=lambda s: _gemma_scale(s) | {"attn_logit_softcapping": s.softcap,
                                               "final_logit_softcapping": None,
                                               "sliding_window": s.window or 4096},
            allow=lambda s: s.qk_norm is None and not s.sinks and _gemma_scalar(s) is not None,
            variants={"scale": [None, 0.0625, 0.25], "softcap": [None, 50.0, 5.0]})


def _gemma3(spec: AttentionSpec) -> dict[str, Any]:
    return _gemma_scale(spec) | _qk(spec) | _per_layer_type(spec)


_llama_like("gemma3_text", window="sliding_window", extra=_gemma3,
            allow=lambda s: s.softcap is None and not s.sinks and s.qk_norm is not None
            and _gemma_scalar(s) is not None,
            variants={"scale": [None, 0.0625, 0.25], "qk_norm": _QK_RMS})


def _gpt_oss(spec: AttentionSpec) -> dict[str, Any]:
    kind = "sliding_attention" if spec.window is not None else "full_attention"
    return {"layer_types": [kind], "sliding_window": spec.window or 4096,
            "num_local_experts": 2, "num_experts_per_tok": 1}


_GPT_OSS_ROPE = RoPE(theta=150000.0, scaling=YaRN(factor=32.0, original_max_position=4096,
                                                   beta_fast=32.0, beta_slow=1.0,
                                                   truncate=False))
_llama_like("gpt_oss", bias=None, bias_values=[True], window="sliding_window", extra=_gpt_oss,
            allow=lambda s: s.sinks and s.bias and s.scale is None and s.softcap is None
            and s.qk_norm is None,
            rope=[_GPT_OSS_ROPE, RoPE()], variants={"sinks": [True]},
            masked={"eager": ("zero", "finite")})  # the sink takes a row that sees no key
_llama_like("cohere", interleaved=True, rope=[RoPE(interleaved=True)],
            extra=lambda s: {"use_qk_norm": False})
# Cohere 2's sliding layers rotate; its full-attention layers have no positions at all.
_llama_like("cohere2", interleaved=True, rope=[RoPE(interleaved=True), None],
            window="sliding_window", extra=lambda s: {"sliding_window": s.window or 4096},
            allow=lambda s: (s.window is None) == (s.positions is None) and s.scale is None
            and s.softcap is None and s.qk_norm is None and not s.sinks
            and s.D % 2 == 0)  # its config validates RoPE even for the full (NoPE) layer
_llama_like("phi", bias=None, bias_values=[True], head_dim=False, kv=True, fraction=True,
            rope=[RoPE(fraction=0.5), RoPE(fraction=1.0)],
            extra=lambda s: {"qk_layernorm": False, "resid_pdrop": 0.0, "embd_pdrop": 0.0})
_llama_like("stablelm", bias="use_qkv_bias", head_dim=False, fraction=True,
            rope=[RoPE(fraction=0.25), RoPE()],
            extra=lambda s: {"qk_layernorm": False, "hidden_dropout": 0.0})


def _simple(model_type: str, config: Callable[[AttentionSpec], dict[str, Any]],
            export: Callable[[Any, AttentionSpec], Weights], variants: Mapping[str, Any],
            supports: Callable[[AttentionSpec], bool], **kwargs: Any) -> None:
    _add(Family(model_type=model_type, config=config, export=export, variants=variants,
                supports=supports, **kwargs))


def _mha(spec: AttentionSpec) -> bool:
    """Plain multi-head widths: G = H, D = C / H."""
    return spec.G == spec.n_head and spec.head_dim in (None, spec.n_embd // spec.n_head) \
        and _c_div_h(spec)


def _neox_export(attn: Any, spec: AttentionSpec) -> Weights:
    fused = attn.query_key_value
    return _fused_per_head(fused.weight, fused.bias, spec) | _linear_out(attn.dense)


# GPT-NeoX: per-head (H, 3, D) fused rows, rotary_pct of each head rotated (rotate-half).
_simple("gpt_neox",
        lambda s: {"hidden_size": s.n_embd, "num_attention_heads": s.n_head, **_SMALL,
                   "attention_bias": s.bias, "use_parallel_residual": True,
                   "rope_parameters": rope_parameters(s.positions)} if isinstance(
                       s.positions, RoPE) else {},
        _neox_export, {"bias": "any", "positions": [RoPE(fraction=0.25), RoPE()]},
        lambda s: _mha(s) and _plain(s) and _rope_ok(s, fraction=True))
# Persimmon: NeoX's fused rows, with LayerNorm over each head's D on q and k (shared).
_simple("persimmon",
        lambda s: {"hidden_size": s.n_embd, "num_attention_heads": s.n_head, **_SMALL,
                   "qk_layernorm": True, "layer_norm_eps": s.qk_norm.eps if s.qk_norm else 1e-5,
                   "rope_parameters": rope_parameters(s.positions)} if isinstance(
                       s.positions, RoPE) else {},
        _neox_export, {"bias": [True], "positions": [RoPE(fraction=0.5)],
                       "qk_norm": [QKNorm("layer", 1e-5, True)]},
        lambda s: _mha(s) and _rope_ok(s, fraction=True) and s.window is None
        and s.scale is None and s.softcap is None and not s.sinks and s.bias
        and s.qk_norm is not None and s.qk_norm.kind == "layer" and s.qk_norm.per_head,
        norms=_norms_named("q_layernorm", "k_layernorm"))


def _bloom_export(attn: Any, spec: AttentionSpec) -> Weights:
    fused = attn.query_key_value
    return _fused_per_head(fused.weight, fused.bias, spec) | _linear_out(attn.dense)


# BLOOM: ALiBi with slope_h * j (a per-row constant from the spec's), fused (H, 3, D) rows,
# and an attention that adds its residual (passed as zero).
_simple("bloom",
        lambda s: {"hidden_size": s.n_embd, "n_head": s.n_head, **{
            k: v for k, v in _SMALL.items() if k != "attention_dropout"},
            "attention_dropout": 0.0, "hidden_dropout": 0.0},
        _bloom_export, {"positions": [ALiBi()], "bias": [True]},
        lambda s: _mha(s) and _plain(s) and isinstance(s.positions, ALiBi)
        and s.positions.slopes is None and s.bias,
        residual="residual", hooks=("decode", "decode_padded", "padded"))


def _mpt_export(attn: Any, spec: AttentionSpec) -> Weights:
    return _fused_concat(attn.Wqkv.weight, attn.Wqkv.bias, spec) | _linear_out(attn.out_proj)


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


# MPT: [q | k | v] fused rows, ALiBi (alibi_bias_max 8: the paper's slopes when H is a power
# of two; other H interleave them differently, not drawn), no biases.
_simple("mpt",
        lambda s: {"d_model": s.n_embd, "n_heads": s.n_head, "n_layers": 1, "vocab_size": 16,
                   "expansion_ratio": 1, "max_seq_len": 4096, "no_bias": not s.bias,
                   "attn_config": {"alibi": True, "attn_pdrop": 0, "alibi_bias_max": 8}},
        _mpt_export, {"positions": [ALiBi()], "bias": [False]},
        lambda s: _mha(s) and _plain(s) and isinstance(s.positions, ALiBi)
        and s.positions.slopes is None and _power_of_two(s.n_head) and not s.bias,
        hooks=("decode", "decode_padded", "padded"))


def _phi3_export(attn: Any, spec: AttentionSpec) -> Weights:
    return _fused_concat(attn.qkv_proj.weight, attn.qkv_proj.bias, spec) | _linear_out(
        attn.o_proj)


# Phi-3: [q | k | v] fused rows, GQA, no biases, rotate-half RoPE (partial where asked).
_simple("phi3",
        lambda s: _base(s, head_dim=None, bias=None, window="sliding_window")
        | {"resid_pdrop": 0.0, "embd_pdrop": 0.0},
        _phi3_export, {"n_kv_head": "any", "bias": [False], "positions": _ROPE,
                       "window": _WINDOWS},
        lambda s: _rope_ok(s) and _c_div_h(s) and s.head_dim in (None, s.n_embd // s.n_head)
        and not s.bias and s.scale is None and s.softcap is None and s.qk_norm is None
        and not s.sinks)


def _gpt2_export(attn: Any, spec: AttentionSpec) -> Weights:
    # Conv1D stores (in, out): the transpose is nn.Linear's layout
    return _fused_concat(attn.c_attn.weight.T, attn.c_attn.bias, spec) | {
        "o_weight": attn.c_proj.weight.T, "o_bias": attn.c_proj.bias}


# GPT-2: learned absolute positions are added to the embeddings, outside the attention, so
# the attention itself has no positions; Conv1D [q | k | v] fused columns, biases.
_simple("gpt2",
        lambda s: {"n_embd": s.n_embd, "n_head": s.n_head, "n_layer": 1, "vocab_size": 16,
                   "n_positions": 4096, "bos_token_id": 1, "eos_token_id": 2,
                   "attn_pdrop": 0.0, "resid_pdrop": 0.0,
                   "embd_pdrop": 0.0, "n_inner": 8},
        _gpt2_export, {"positions": [None], "bias": [True]},
        lambda s: _mha(s) and _plain(s) and s.positions is None and s.bias,
        hooks=("decode", "decode_padded", "padded"))


def _bigcode_export(attn: Any, spec: AttentionSpec) -> Weights:
    if spec.G == spec.n_head:  # without multi_query the rows are per head, (H, 3, D)
        return _fused_per_head(attn.c_attn.weight, attn.c_attn.bias, spec) | _linear_out(
            attn.c_proj)
    return _fused_concat(attn.c_attn.weight, attn.c_attn.bias, spec) | _linear_out(attn.c_proj)


# GPT-BigCode (StarCoder 1): multi-query ([q | k | v] with one kv head) or MHA, biases.
_simple("gpt_bigcode",
        lambda s: {"n_embd": s.n_embd, "n_head": s.n_head, "n_layer": 1, "vocab_size": 16,
                   "n_positions": 4096, "bos_token_id": 1, "eos_token_id": 2,
                   "attn_pdrop": 0.0, "resid_pdrop": 0.0,
                   "embd_pdrop": 0.0, "n_inner": 8, "multi_query": s.G == 1},
        _bigcode_export, {"n_kv_head": [None, 1], "positions": [None], "bias": [True]},
        lambda s: s.G in (1, s.n_head) and s.head_dim in (None, s.n_embd // s.n_head)
        and _c_div_h(s) and _plain(s) and s.positions is None and s.bias,
        hooks=("decode", "decode_padded", "padded"))


def _gptj_export(attn: Any, spec: AttentionSpec) -> Weights:
    return {"q_weight": attn.q_proj.weight, "k_weight": attn.k_proj.weight,
            "v_weight": attn.v_proj.weight, "o_weight": attn.out_proj.weight}


# GPT-J: interleaved (pairs) RoPE on the first rotary_dim channels of each head, no biases.
_simple("gptj",
        lambda s: {"n_embd": s.n_embd, "n_head": s.n_head, "n_layer": 1, "vocab_size": 16,
                   "n_positions": 4096, "bos_token_id": 1, "eos_token_id": 2,
                   "attn_pdrop": 0.0, "resid_pdrop": 0.0,
                   "embd_pdrop": 0.0, "n_inner": 8,
                   "rotary_dim": s.positions.rotary_dim(s.D) if isinstance(s.positions, RoPE)
                   else None},
        _gptj_export, {"positions": [RoPE(interleaved=True, fraction=0.5),
                                     RoPE(interleaved=True)], "bias": [False]},
        lambda s: _mha(s) and _plain(s) and _rope_ok(s, fraction=True, interleaved=True)
        and isinstance(s.positions, RoPE) and s.positions.theta == 10000.0 and not s.bias)


def _opt_export(attn: Any, spec: AttentionSpec) -> Weights:
    return _separate(attn, spec)


# OPT and XGLM: absolute positions outside the attention; separate projections with biases.
_simple("opt",
        lambda s: {"hidden_size": s.n_embd, "num_attention_heads": s.n_head,
                   "num_hidden_layers": 1, "ffn_dim": 8, "vocab_size": 16, "pad_token_id": 0,
                   "max_position_embeddings": 4096, "dropout": 0.0, "attention_dropout": 0.0,
                   "enable_bias": s.bias, "word_embed_proj_dim": s.n_embd},
        _opt_export, {"positions": [None], "bias": "any"},
        lambda s: _mha(s) and _plain(s) and s.positions is None,
        hooks=("decode", "decode_padded", "padded"))


def _falcon_export(attn: Any, spec: AttentionSpec) -> Weights:
    fused = attn.query_key_value
    if spec.G == 1 and spec.n_head > 1 and not getattr(attn, "new_decoder_architecture", False):
        return _fused_concat(fused.weight, fused.bias, spec) | _linear_out(attn.dense)
    if spec.G == spec.n_head and not getattr(attn, "new_decoder_architecture", False):
        return _fused_per_head(fused.weight, fused.bias, spec) | _linear_out(attn.dense)
    return _fused_grouped(fused.weight, fused.bias, spec) | _linear_out(attn.dense)


def _falcon_config(spec: AttentionSpec) -> dict[str, Any]:
    G, H = spec.G, spec.n_head
    out: dict[str, Any] = {"hidden_size": spec.n_embd, "num_attention_heads": H, **_SMALL,
           "bias": spec.bias, "alibi": isinstance(spec.positions, ALiBi),
           "hidden_dropout": 0.0, "parallel_attn": True}
    if G == H:
        out |= {"multi_query": False, "new_decoder_architecture": False}
    elif G == 1:
        out |= {"multi_query": True, "new_decoder_architecture": False}
    else:
        out |= {"new_decoder_architecture": True, "num_kv_heads": G}
    if isinstance(spec.positions, RoPE):
        out["rope_parameters"] = rope_parameters(spec.positions)
    return out


def _falcon_alibi_slopes(n_head: int) -> bool:
    return _power_of_two(n_head)


# Falcon: RoPE (multi-query, MHA or grouped "new decoder architecture" layouts) or, Falcon-RW,
# ALiBi added before the 1/sqrt(D) scale: slopes / sqrt(D) in the spec's terms.
_simple("falcon", _falcon_config, _falcon_export,
        {"n_kv_head": [None, 1, 2], "bias": "any", "positions": [RoPE()]},
        lambda s: s.head_dim in (None, s.n_embd // s.n_head) and _c_div_h(s) and _plain(s)
        and _rope_ok(s))


def _refuse(why: str, *model_types: str) -> None:
    for model_type in model_types:
        REFUSED[model_type] = why


_refuse("its attention compresses keys and values into a latent (multi-head latent attention) "
        "with a decoupled RoPE part: q·k is not one per-head dot product of projected x, which "
        "the spec cannot express", "deepseek_v2", "deepseek_v3", "deepseek_v32",
        "minicpm3", "kimi_linear", "longcat_flash", "sarvam_mla")
_refuse("it has no attention layers (a state-space or recurrent model)", "mamba", "mamba2",
        "falcon_mamba", "rwkv", "xlstm")
_refuse("a hybrid whose layers mix attention with state-space, linear-attention or recurrent "
        "blocks: its first layer is not necessarily softmax attention, and the adapter does "
        "not yet pick an attention layer out of such a stack", "jamba", "bamba", "zamba",
        "zamba2", "falcon_h1", "nemotron_h", "granitemoehybrid", "qwen3_next", "lfm2",
        "lfm2_moe", "minimax", "recurrent_gemma", "olmo_hybrid", "bailing_hybrid")
_refuse("an encoder-decoder or encoder model whose causal-LM head is a decoder with "
        "cross-attention or a bidirectional encoder run with is_decoder: not the decoder-only "
        "self-attention the spec describes", "bart", "mbart", "marian", "pegasus",
        "blenderbot", "blenderbot-small", "plbart", "prophetnet", "bigbird_pegasus", "mvp",
        "whisper", "trocr", "musicgen", "musicgen_melody", "bert", "bert-generation",
        "big_bird", "camembert", "data2vec-text", "electra", "ernie", "megatron-bert",
        "rembert", "roberta", "roberta-prelayernorm", "roc_bert", "roformer", "xlm",
        "xlm-roberta", "xlm-roberta-xl", "xmod", "xlnet", "reformer")
_refuse("a multimodal model: its text decoder is reached through a vision or audio stack the "
        "adapter does not build", "mllama", "emu3", "fuyu", "git", "got_ocr2",
        "phi4_multimodal", "moshi", "gemma3", "gemma3n", "gemma4", "llama4")
_refuse("its attention is not softmax over q·k alone (differential attention, dynamic masks "
        "or chunked local attention with temperature tuning)", "diffllama", "doge",
        "llama4_text")
_refuse("its keys and values are shared across layers or clipped (clip_qkv): the adapter "
        "does not model these yet", "gemma3n_text", "dbrx")


# Later additions of the same separate-projection kind.
_llama_like("seed_oss", bias=None, bias_values="any",
            extra=lambda s: {"attention_bias": s.bias, "attention_out_bias": s.bias})
_llama_like("ministral", bias=None, bias_values=[False], window="sliding_window",
            extra=lambda s: {"sliding_window": s.window or 4096})
_llama_like("smollm3", extra=lambda s: {"no_rope_layers": [1], "use_sliding_window": False})
# OLMoE's q norm is hidden_size wide: H·D must be C.
_llama_like("olmoe", head_dim_any=False,
            extra=lambda s: _qk(s) | {"num_experts": 2, "num_experts_per_tok": 1},
            allow=lambda s: _qk_only(s) and s.window is None,
            variants={"qk_norm": [QKNorm("rms", 1e-5, False)]})
_llama_like("nemotron", fraction=True, rope=[RoPE(fraction=0.5), RoPE()])
for _mt in ("glm", "glm4"):
    # GLM rotates channel pairs of the first half of each head (partial_rotary_factor 0.5)
    _llama_like(_mt, fraction=True, interleaved=True,
                rope=[RoPE(fraction=0.5, interleaved=True), RoPE(interleaved=True)])
