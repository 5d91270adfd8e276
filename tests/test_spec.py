"""The attention spec (protocol v2) and the reference for every variant, each checked against an
independent formulation (torch SDPA with an explicit mask or bias, complex-number RoPE)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from attnspec import (
    ALiBi,
    AttentionSpec,
    ConfigError,
    DivisibilityError,
    DynamicNTK,
    LinearScaling,
    Llama3Scaling,
    QKNorm,
    RoPE,
    YaRN,
)
from attnspec.reference.module import CausalSelfAttention, reference_attention
from attnspec.reference.spec import alibi_slopes
from attnspec.reference.variants import SpecAttention, spec_attention


def _weights(spec: AttentionSpec, seed: int = 0) -> dict[str, Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {k: torch.randn(shape, generator=gen, dtype=torch.float64) / math.sqrt(shape[-1])
            for k, shape in spec.weight_shapes().items()}


def _x(spec: AttentionSpec, B: int = 2, T: int = 9, seed: int = 1) -> Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, spec.n_embd, generator=gen, dtype=torch.float64)


def _sdpa(x: Tensor, w: dict[str, Tensor], spec: AttentionSpec, q_turn=None,
          bias: Tensor | None = None) -> Tensor:
    """The same attention through torch's SDPA: an explicit boolean mask or additive bias."""
    B, T, _ = x.shape
    H, G, D = spec.n_head, spec.G, spec.D
    q = F.linear(x, w["q_weight"], w["q_bias"]).view(B, T, H, D).transpose(1, 2)
    k = F.linear(x, w["k_weight"], w["k_bias"]).view(B, T, G, D).transpose(1, 2)
    v = F.linear(x, w["v_weight"], w["v_bias"]).view(B, T, G, D).transpose(1, 2)
    if q_turn is not None:
        q, k = q_turn(q), q_turn(k)
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    allowed = (j <= i) if spec.window is None else (j <= i) & (j > i - spec.window)
    mask = torch.zeros(T, T, dtype=x.dtype).masked_fill(~allowed, float("-inf"))
    if bias is not None:
        mask = mask + bias
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=spec.attn_scale,
                                       enable_gqa=G != H)
    return F.linear(y.transpose(1, 2).reshape(B, T, H * D), w["o_weight"], w["o_bias"])


def test_plain_spec_is_the_v1_reference_bit_for_bit() -> None:
    module = CausalSelfAttention(12, 3).double()
    x = _x(AttentionSpec(12, 3))
    assert torch.equal(reference_attention(x, module.export_weights(), 3),
                       spec_attention(x, module.export_weights(), AttentionSpec(12, 3)))


@pytest.mark.parametrize(("H", "G", "D", "window", "scale"), [
    (4, 4, 4, None, None), (4, 2, 4, None, None), (4, 1, 8, 3, None), (6, 3, 5, 1, 0.3),
    (8, 2, 4, 4, None)])
def test_gqa_window_and_head_dim_match_sdpa_with_an_explicit_mask(
        H: int, G: int, D: int, window: int | None, scale: float | None) -> None:
    spec = AttentionSpec(16, H, n_kv_head=G, head_dim=D, window=window, scale=scale)
    w, x = _weights(spec), _x(spec)
    torch.testing.assert_close(spec_attention(x, w, spec), _sdpa(x, w, spec),
                               rtol=1e-12, atol=1e-12)


def test_a_window_as_long_as_the_sequence_is_no_window() -> None:
    spec = AttentionSpec(16, 4, n_kv_head=2)
    w, x = _weights(spec), _x(spec, T=9)
    assert torch.equal(spec_attention(x, w, spec),
                       spec_attention(x, w, AttentionSpec(16, 4, n_kv_head=2, window=9)))


def _complex_rope(rope: RoPE, T: int, offset: int = 0):
    """RoPE as complex multiplication (the GPT-J / Meta Llama formulation), for either pairing."""
    def turn(t: Tensor) -> Tensor:
        D = t.size(-1)
        rot = rope.rotary_dim(D)
        freq = rope.theta ** (-torch.arange(0, rot, 2, dtype=torch.float64) / rot)
        phase = torch.polar(torch.ones(T, rot // 2, dtype=torch.float64),
                            torch.arange(offset, offset + T, dtype=torch.float64)[:, None] * freq)
        moved = t[..., :rot]
        if rope.interleaved:
            pairs = torch.view_as_complex(moved.reshape(*moved.shape[:-1], rot // 2, 2)
                                          .contiguous())
            turned = torch.view_as_real(pairs * phase).flatten(-2)
        else:
            pairs = torch.complex(moved[..., :rot // 2], moved[..., rot // 2:]) * phase
            turned = torch.cat((pairs.real, pairs.imag), dim=-1)
        return torch.cat((turned, t[..., rot:]), dim=-1)
    return turn


@pytest.mark.parametrize("rope", [RoPE(), RoPE(interleaved=True), RoPE(fraction=0.5),
                                  RoPE(theta=500000.0, fraction=0.25, interleaved=True)])
def test_rope_matches_complex_rotation(rope: RoPE) -> None:
    spec = AttentionSpec(32, 4, n_kv_head=2, positions=rope)
    w, x = _weights(spec), _x(spec)
    torch.testing.assert_close(spec_attention(x, w, spec),
                               _sdpa(x, w, spec, q_turn=_complex_rope(rope, x.size(1))),
                               rtol=1e-12, atol=1e-12)


def test_rope_pairings_differ_and_an_offset_shifts_positions() -> None:
    spec = AttentionSpec(32, 4, positions=RoPE())
    other = AttentionSpec(32, 4, positions=RoPE(interleaved=True))
    w, x = _weights(spec), _x(spec)
    assert not torch.allclose(spec_attention(x, w, spec), spec_attention(x, w, other))
    # Relative positions only: the same tokens at positions 5.. attend as at 0..
    torch.testing.assert_close(spec_attention(x, w, spec, offset=5), spec_attention(x, w, spec),
                               rtol=1e-10, atol=1e-10)


def test_alibi_matches_sdpa_with_blooms_bias() -> None:
    spec = AttentionSpec(24, 6, positions=ALiBi(), window=5)
    w, x = _weights(spec), _x(spec)
    T = x.size(1)
    # BLOOM adds slope * j; it differs from -slope * (i - j) by a constant per row.
    bias = torch.tensor(alibi_slopes(6), dtype=torch.float64)[:, None, None] * torch.arange(T)
    torch.testing.assert_close(spec_attention(x, w, spec), _sdpa(x, w, spec, bias=bias),
                               rtol=1e-12, atol=1e-12)


def test_alibi_slopes_are_the_papers() -> None:
    assert alibi_slopes(8) == [2.0 ** -(i + 1) for i in range(8)]
    assert alibi_slopes(4) == [2.0 ** -(2 * (i + 1)) for i in range(4)]
    # Not a power of two: the 4 slopes of H=4, then every other one of H=8.
    assert alibi_slopes(6) == [2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8, 2.0 ** -1, 2.0 ** -3]


def test_softcap_bounds_the_scores() -> None:
    spec = AttentionSpec(16, 4, softcap=2.0, scale=10.0)
    w, x = _weights(spec), _x(spec)
    capped = spec_attention(x, w, spec)
    # Large scale without the cap: different; with it: the same as capping by hand.
    assert not torch.allclose(capped, spec_attention(x, w, AttentionSpec(16, 4, scale=10.0)))
    B, T, _ = x.shape
    q = F.linear(x, w["q_weight"], w["q_bias"]).view(B, T, 4, 4).transpose(1, 2)
    k = F.linear(x, w["k_weight"], w["k_bias"]).view(B, T, 4, 4).transpose(1, 2)
    v = F.linear(x, w["v_weight"], w["v_bias"]).view(B, T, 4, 4).transpose(1, 2)
    s = 2.0 * torch.tanh(q @ k.transpose(-1, -2) * 10.0 / 2.0)
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    y = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, 16)
    torch.testing.assert_close(capped, F.linear(y, w["o_weight"], w["o_bias"]))


def test_spec_attention_module_builds_from_a_spec_and_exports_v2_shapes() -> None:
    spec = AttentionSpec(16, 4, n_kv_head=2, head_dim=6, bias=False)
    module = SpecAttention(spec)
    assert module(torch.randn(2, 3, 16)).shape == (2, 3, 16)
    shapes = {k: tuple(v.shape) for k, v in module.export_weights().items()}
    assert shapes == {"q_weight": (24, 16), "k_weight": (12, 16), "v_weight": (12, 16),
                      "o_weight": (16, 24)}


@pytest.mark.parametrize(("kwargs", "error", "says"), [
    ({"n_embd": 16, "n_head": 4, "n_kv_head": 3}, DivisibilityError,
     "n_kv_head values that divide n_head=4: 1, 2, 4."),
    ({"n_embd": 10, "n_head": 3}, DivisibilityError, "Head counts that divide n_embd=10"),
    ({"n_embd": 12, "n_head": 4, "positions": RoPE(fraction=0.5)}, ConfigError,
     "int(head_dim * fraction) = 1 must be even"),
    ({"n_embd": 16, "n_head": 4, "window": 0}, ConfigError, "window=0; window must be >= 1"),
    ({"n_embd": 16, "n_head": 4, "softcap": -1.0}, ConfigError, "softcap=-1.0"),
    ({"n_embd": 16, "n_head": 4, "positions": "rope"}, ConfigError, "attnspec.RoPE(...)"),
    ({"n_embd": 16, "n_head": 4, "sinks": 1}, ConfigError, "sinks=1; it must be a bool"),
    ({"n_embd": 16, "n_head": 4, "qk_norm": "rms"}, ConfigError,
     "qk_norm='rms'; it must be None or attnspec.QKNorm("),
])
def test_an_impossible_spec_fails_at_construction_saying_why(
        kwargs: dict[str, object], error: type[Exception], says: str) -> None:
    with pytest.raises(error) as raised:
        AttentionSpec(**kwargs)  # type: ignore[arg-type]
    assert says in str(raised.value)


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"kind": "l2"}, "kind='l2'; it must be 'rms' (RMSNorm: Qwen3, Gemma3, OLMo2) or 'layer'"),
    ({"eps": 0.0}, "Invalid QKNorm: eps=0.0; it must be a finite number > 0."),
    ({"per_head": 1}, "per_head=1; it must be a bool"),
])
def test_an_impossible_qk_norm_fails_saying_why(kwargs: dict[str, object], says: str) -> None:
    with pytest.raises(ConfigError) as raised:
        QKNorm(**kwargs)  # type: ignore[arg-type]
    assert says in str(raised.value)


def test_head_dim_lifts_the_divisibility_rule() -> None:
    spec = AttentionSpec(10, 3, head_dim=4)
    assert (spec.D, spec.G, spec.weight_shapes()["o_weight"]) == (4, 3, (10, 12))


@pytest.mark.parametrize("spec", [
    AttentionSpec(16, 4), AttentionSpec(16, 4, n_kv_head=1, window=3, softcap=30.0),
    AttentionSpec(10, 3, head_dim=4, scale=0.5, bias=False, positions=ALiBi()),
    AttentionSpec(32, 4, positions=RoPE(theta=1e6, fraction=0.5, interleaved=True)),
    AttentionSpec(16, 4, n_kv_head=2, qk_norm=QKNorm()),
    AttentionSpec(16, 4, qk_norm=QKNorm(kind="layer", eps=1e-5, per_head=False)),
    AttentionSpec(16, 4, n_kv_head=1, sinks=True, window=2)])
def test_spec_round_trips_through_json(spec: AttentionSpec) -> None:
    assert AttentionSpec.from_json(spec.to_json()) == spec


def test_a_malformed_spec_json_says_what_is_wrong() -> None:
    with pytest.raises(ConfigError, match="unknown attention spec fields"):
        AttentionSpec.from_json({"n_embd": 4, "n_head": 2, "windw": 3})
    with pytest.raises(ConfigError, match="positions="):
        AttentionSpec.from_json({"n_embd": 4, "n_head": 2, "positions": {"kind": "xpos"}})


def _v2(**attrs: object) -> object:
    from types import SimpleNamespace

    return SimpleNamespace(__name__="v2", PROTOCOL=2, build=SpecAttention,
                           export_weights=lambda m: m.export_weights(), **attrs)


def test_a_v2_subject_is_checked_on_the_variants_it_declares() -> None:
    import attnspec

    subject = _v2(VARIANTS={"n_kv_head": "any", "window": [2, 3]})
    report = attnspec.verify(subject, only="oracle,window", max_examples=15, seed=0,
                             database=False)
    assert report.ok, report.summary()
    assert report.result("window").examples == 15


def test_variants_that_name_no_spec_field_are_a_target_error() -> None:
    import attnspec
    from attnspec import TargetError

    with pytest.raises(TargetError, match="the fields that can vary are n_kv_head"):
        attnspec.verify(_v2(VARIANTS={"kv_heads": "any"}), only="width", max_examples=2)


def test_specs_that_supports_declines_are_not_examples() -> None:
    import attnspec

    never = attnspec.verify(_v2(VARIANTS={"window": "any"}, supports=lambda spec: False),
                            only="width", max_examples=5, seed=0, database=False)
    assert never.result("width").verdict == "skip"
    assert "declined all" in never.result("width").message
    # Declining the windowed specs leaves the rest: width runs, window has nothing to check.
    some = attnspec.verify(_v2(VARIANTS={"window": "any"},
                               supports=lambda spec: spec.window is None),
                           only="width,window", max_examples=5, seed=0, database=False)
    assert some.result("width").verdict == "pass" and some.result("width").examples == 5
    assert some.result("window").verdict == "skip"


def test_a_v1_subject_has_no_window_to_check() -> None:
    import attnspec

    report = attnspec.verify("attnspec.subjects.reference", only="window", max_examples=2)
    assert report.result("window").verdict == "skip"
    assert "protocol 1" in report.result("window").message


def test_attention_weights_show_the_window_and_sum_to_one() -> None:
    spec = AttentionSpec(16, 4, n_kv_head=2, window=3, positions=ALiBi())
    module = SpecAttention(spec).double()
    x = _x(spec, B=1, T=6)
    with torch.no_grad():
        weights = module.attention_weights(x)
    assert weights.shape == (1, 4, 6, 6)
    torch.testing.assert_close(weights.sum(-1), torch.ones(1, 4, 6, dtype=torch.float64))
    i, j = torch.arange(6)[:, None], torch.arange(6)[None, :]
    outside = (j > i) | (j <= i - 3)
    assert bool((weights[..., outside] == 0).all()) and bool((weights[..., ~outside] > 0).all())


def test_the_trace_shows_grouped_keys_and_their_sharing() -> None:
    spec = AttentionSpec(12, 6, n_kv_head=2, head_dim=4, window=3, positions=RoPE())
    out, trace = SpecAttention(spec).traced(torch.randn(2, 5, 12))
    assert out.shape == (2, 5, 12)
    assert [s.name for s in trace.stages] == [
        "input", "projection", "head split", "kv heads", "rotary", "shared kv", "scores",
        "weights", "attend", "merge", "output projection"]
    assert trace.shape("projection") == (2, 5, 24) and trace.shape("kv heads") == (2, 2, 5, 4)
    assert trace.shape("shared kv") == (2, 6, 5, 4) and trace.shape("scores") == (2, 6, 5, 5)
    text = str(trace)
    assert text.startswith("spec: C=12, H=6, n_kv_head=2, head_dim=4, window=3")
    assert "B G T D" in text and "causal, window 3" in text


def test_a_key_too_light_to_show_in_bfloat16_is_no_window_violation() -> None:
    # The soak's false alarm (reference_tp, seed 2): C=1, D=1 and a window of 12 in bfloat16;
    # the change at position 1 moves the output at 12 by less than bfloat16 can show. The
    # reference with the exported weights says so, and the window's inside edge is not judged.
    import attnspec

    replay = {"B": 1, "T": 29, "C": 1, "H": 3, "dtype": "bfloat16", "device": "cpu", "seed": 0,
              "cuts": [0, 1, 2, 3, 4, 5, 7, 8, 9, 14, 15, 16, 17, 27, 28], "scale": 1.0,
              "spec": {"n_embd": 1, "n_head": 3, "n_kv_head": 1, "head_dim": 1, "window": 12,
                       "bias": False}}
    report = attnspec.verify("attnspec.subjects.variants", only="window", replay=replay,
                             isolate=False, database=False)
    window = report.result("window")
    assert window.verdict == "pass", window
    assert any("below bfloat16's resolution" in n for n in window.notes), window.notes


# ---- what 2026 models ship: q/k norms, sinks, given ALiBi slopes, RoPE scaling ---------------
# Each is checked against transformers' own modules (their real code), run in float64.


# HF computes its norms and rotary angles in float32, whatever the module's dtype.
HF_FLOAT32 = {"rtol": 1e-6, "atol": 1e-6}


def _hf_layer(attn: torch.nn.Module, rotary: torch.nn.Module, config: object, x: Tensor,
              sliding: bool = False) -> Tensor:
    """One HF attention layer on x with HF's own causal mask (sliding-window where asked) and
    rotary embedding (eager)."""
    from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

    positions = torch.arange(x.size(1))[None]
    make = create_sliding_window_causal_mask if sliding else create_causal_mask
    mask = make(config=config, inputs_embeds=x, attention_mask=None, cache=None,
                position_ids=positions)
    out = attn(x, position_embeddings=rotary(x, positions), attention_mask=mask)
    return out[0] if isinstance(out, tuple) else out


def _randomised(module: torch.nn.Module, seed: int = 3) -> None:
    """Every parameter drawn afresh (norm weights near 1), so none is an identity by default."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.rand(p.shape, generator=gen, dtype=p.dtype) * 2 - 1
            p.copy_(1 + 0.3 * noise if "norm" in name and "bias" not in name
                    else noise / math.sqrt(p.shape[-1]))


def _projections(attn: torch.nn.Module, extra: dict[str, Tensor]) -> dict[str, Tensor]:
    out = {f"{n}_weight": getattr(attn, f"{n}_proj").weight.detach() for n in "qkvo"}
    if attn.q_proj.bias is not None:
        out |= {f"{n}_bias": getattr(attn, f"{n}_proj").bias.detach() for n in "qkvo"}
    return out | {k: v.detach() for k, v in extra.items()}


@pytest.mark.parametrize(("H", "G", "D", "bias"), [(4, 2, 8, False), (4, 4, 6, True)])
def test_per_head_rms_qk_norm_is_qwen3s(H: int, G: int, D: int, bias: bool) -> None:
    from transformers import Qwen3Config
    from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention, Qwen3RotaryEmbedding

    config = Qwen3Config(hidden_size=16, num_attention_heads=H, num_key_value_heads=G,
                         head_dim=D, attention_bias=bias, rms_norm_eps=1e-6,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    config._attn_implementation = "eager"
    attn = Qwen3Attention(config, layer_idx=0).double()
    _randomised(attn)
    spec = AttentionSpec(16, H, n_kv_head=G, head_dim=D, bias=bias, positions=RoPE(),
                         qk_norm=QKNorm(eps=1e-6))
    w = _projections(attn, {"q_norm_weight": attn.q_norm.weight,
                            "k_norm_weight": attn.k_norm.weight})
    assert {k: tuple(v.shape) for k, v in w.items()} == {
        k: s for k, s in spec.weight_shapes().items() if k in w}
    x = _x(spec)
    with torch.no_grad():
        hf = _hf_layer(attn, Qwen3RotaryEmbedding(config).double(), config, x)
    torch.testing.assert_close(spec_attention(x, w, spec), hf, **HF_FLOAT32)


def test_whole_projection_rms_qk_norm_is_olmo2s() -> None:
    from transformers import Olmo2Config
    from transformers.models.olmo2.modeling_olmo2 import Olmo2Attention, Olmo2RotaryEmbedding

    config = Olmo2Config(hidden_size=16, num_attention_heads=4, num_key_value_heads=2,
                         attention_bias=False, rms_norm_eps=1e-6,
                         rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    config._attn_implementation = "eager"
    attn = Olmo2Attention(config, layer_idx=0).double()
    _randomised(attn)
    spec = AttentionSpec(16, 4, n_kv_head=2, bias=False, positions=RoPE(theta=500000.0),
                         qk_norm=QKNorm(per_head=False))
    w = _projections(attn, {"q_norm_weight": attn.q_norm.weight,
                            "k_norm_weight": attn.k_norm.weight})
    assert spec.weight_shapes()["q_norm_weight"] == (16,) == tuple(w["q_norm_weight"].shape)
    assert spec.weight_shapes()["k_norm_weight"] == (8,) == tuple(w["k_norm_weight"].shape)
    x = _x(spec)
    with torch.no_grad():
        hf = _hf_layer(attn, Olmo2RotaryEmbedding(config).double(), config, x)
    torch.testing.assert_close(spec_attention(x, w, spec), hf, **HF_FLOAT32)


def test_per_head_layer_norm_is_persimmons() -> None:
    from transformers import PersimmonConfig
    from transformers.models.persimmon.modeling_persimmon import (
        PersimmonAttention,
        PersimmonRotaryEmbedding,
    )

    config = PersimmonConfig(hidden_size=16, num_attention_heads=2, qk_layernorm=True,
                             layer_norm_eps=1e-5, rope_parameters={
                                 "rope_type": "default", "rope_theta": 25000.0,
                                 "partial_rotary_factor": 0.5})
    config._attn_implementation = "eager"
    attn = PersimmonAttention(config, layer_idx=0).double()
    _randomised(attn)
    H, D, C = 2, 8, 16
    # The fused projection holds, per head, its q, k and v rows in turn: (H, 3, D, C).
    fused = attn.query_key_value.weight.detach().view(H, 3, D, C)
    fused_bias = attn.query_key_value.bias.detach().view(H, 3, D)
    w = {f"{n}_weight": fused[:, i].reshape(H * D, C) for i, n in enumerate("qkv")}
    w |= {f"{n}_bias": fused_bias[:, i].reshape(H * D) for i, n in enumerate("qkv")}
    w |= {"o_weight": attn.dense.weight.detach(), "o_bias": attn.dense.bias.detach(),
          "q_norm_weight": attn.q_layernorm.weight.detach(),
          "k_norm_weight": attn.k_layernorm.weight.detach(),
          "q_norm_bias": attn.q_layernorm.bias.detach(),
          "k_norm_bias": attn.k_layernorm.bias.detach()}
    spec = AttentionSpec(C, H, positions=RoPE(theta=25000.0, fraction=0.5),
                         qk_norm=QKNorm(kind="layer", eps=1e-5))
    assert set(w) == set(spec.weight_shapes())
    x = _x(spec)
    with torch.no_grad():
        hf = _hf_layer(attn, PersimmonRotaryEmbedding(config).double(), config, x)
    torch.testing.assert_close(spec_attention(x, w, spec), hf, **HF_FLOAT32)


def test_gemmas_one_plus_weight_norm_is_exported_as_its_effective_weight() -> None:
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm

    norm = Gemma3RMSNorm(8, eps=1e-6)
    _randomised(norm)
    q = torch.randn(2, 5, 32, dtype=torch.float64)
    from attnspec.reference.variants import normed

    with torch.no_grad():  # Gemma3 norms in float32 whatever the input: compare at that level
        theirs = norm(q.view(2, 5, 4, 8)).reshape(2, 5, 32)
        ours = normed(q, 1 + norm.weight.double(), None, QKNorm(), 8)
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("norm", [QKNorm(), QKNorm(kind="layer", eps=1e-5, per_head=False)])
def test_qk_norm_holds_on_every_inference_path(norm: QKNorm) -> None:
    from attnspec.reference.inference import cross_attention, decode_attention, padded_attention

    spec = AttentionSpec(16, 4, n_kv_head=2, positions=RoPE(), qk_norm=norm)
    w = _weights(spec) | {k: 1 + 0.3 * torch.rand(s, dtype=torch.float64)
                          for k, s in spec.weight_shapes().items() if "norm_weight" in k}
    x = _x(spec, T=7)
    whole = spec_attention(x, w, spec)
    torch.testing.assert_close(decode_attention(x, w, spec, [3, 1, 3]), whole)
    torch.testing.assert_close(cross_attention(x[:, 4:], x, w, spec), whole[:, 4:])
    mask = torch.ones(2, 7, dtype=torch.bool)
    torch.testing.assert_close(padded_attention(x, w, spec, mask), whole)
    # The norm matters: without it (same projections) the output differs.
    plain = spec_attention(x, w, AttentionSpec(16, 4, n_kv_head=2, positions=RoPE()))
    assert not torch.allclose(plain, whole)


def test_qk_norm_weights_are_exported_and_shaped_by_the_spec() -> None:
    spec = AttentionSpec(16, 4, n_kv_head=2, head_dim=6, qk_norm=QKNorm(kind="layer"))
    shapes = {k: tuple(v.shape) for k, v in SpecAttention(spec).export_weights().items()}
    assert shapes == spec.weight_shapes()
    assert {k: v for k, v in shapes.items() if "norm" in k} == {
        "q_norm_weight": (6,), "k_norm_weight": (6,), "q_norm_bias": (6,), "k_norm_bias": (6,)}
    assert "q_norm_weight" not in AttentionSpec(16, 4).weight_shapes()
    whole = AttentionSpec(16, 4, n_kv_head=2, qk_norm=QKNorm(per_head=False)).weight_shapes()
    assert (whole["q_norm_weight"], whole["k_norm_weight"]) == ((16,), (8,))


@pytest.mark.parametrize(("G", "window"), [(2, None), (1, 3)])
def test_sinks_are_gpt_oss(G: int, window: int | None) -> None:
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import (
        GptOssAttention,
        GptOssRotaryEmbedding,
    )

    kind = "full_attention" if window is None else "sliding_attention"
    config = GptOssConfig(hidden_size=16, num_attention_heads=4, num_key_value_heads=G,
                          head_dim=8, attention_bias=True, num_hidden_layers=1,
                          layer_types=[kind], sliding_window=window,
                          rope_parameters={"rope_type": "default", "rope_theta": 150000.0})
    config._attn_implementation = "eager"
    attn = GptOssAttention(config, layer_idx=0).double()
    _randomised(attn)
    with torch.no_grad():
        attn.sinks.mul_(8.0)  # logits of the scores' size, some sinks taking most of a row
    spec = AttentionSpec(16, 4, n_kv_head=G, head_dim=8, window=window,
                         positions=RoPE(theta=150000.0), sinks=True)
    w = _projections(attn, {"sinks": attn.sinks})
    assert set(w) == set(spec.weight_shapes())
    x = _x(spec)
    with torch.no_grad():
        hf = _hf_layer(attn, GptOssRotaryEmbedding(config).double(), config, x,
                       sliding=window is not None)
    torch.testing.assert_close(spec_attention(x, w, spec), hf, **HF_FLOAT32)
    without = spec_attention(x, w, AttentionSpec(16, 4, n_kv_head=G, head_dim=8, window=window,
                                                 positions=RoPE(theta=150000.0)))
    assert not torch.allclose(without, hf, atol=1e-3)


def test_sinks_hold_on_every_inference_path_and_empty_rows_give_zero() -> None:
    from attnspec.reference.inference import cross_attention, decode_attention, padded_attention

    spec = AttentionSpec(16, 4, n_kv_head=2, positions=ALiBi(), sinks=True)
    w = _weights(spec) | {"sinks": torch.tensor([2.0, -1.0, 0.5, 4.0], dtype=torch.float64)}
    x = _x(spec, T=7)
    whole = spec_attention(x, w, spec)
    torch.testing.assert_close(decode_attention(x, w, spec, [3, 1, 3]), whole)
    torch.testing.assert_close(cross_attention(x[:, 4:], x, w, spec), whole[:, 4:])
    mask = torch.ones(2, 7, dtype=torch.bool)
    mask[0, :3] = False  # left padding: queries 0..2 of row 0 see no key, so give o's bias
    padded = padded_attention(x, w, spec, mask)
    torch.testing.assert_close(padded[0, :3], w["o_bias"].expand(3, -1))
    torch.testing.assert_close(padded[1], whole[1])
    module = SpecAttention(spec).double()
    with torch.no_grad():
        module.sinks.copy_(w["sinks"])
        rows = module.attention_weights(x).sum(-1)  # 1 less the sink's share, per row
    assert bool((rows < 1).all()) and bool((rows > 0).all())


def test_falcon_rw_alibi_is_given_slopes_over_sqrt_d() -> None:
    from transformers import FalconConfig
    from transformers.models.falcon.modeling_falcon import FalconAttention, build_alibi_tensor

    C, H, D, T = 16, 4, 4, 9
    config = FalconConfig(hidden_size=C, num_attention_heads=H, alibi=True, multi_query=False,
                          new_decoder_architecture=False, bias=True)
    config._attn_implementation = "eager"
    attn = FalconAttention(config, layer_idx=0).double()
    _randomised(attn)
    # Per head, the fused projection holds its q, k and v rows in turn: (H, 3, D, C).
    fused = attn.query_key_value.weight.detach().view(H, 3, D, C)
    fused_bias = attn.query_key_value.bias.detach().view(H, 3, D)
    w = {f"{n}_weight": fused[:, i].reshape(H * D, C) for i, n in enumerate("qkv")}
    w |= {f"{n}_bias": fused_bias[:, i].reshape(H * D) for i, n in enumerate("qkv")}
    w |= {"o_weight": attn.dense.weight.detach(), "o_bias": attn.dense.bias.detach()}
    # Falcon-RW adds slope·j to q·k, then scales both by 1/sqrt(D): the slopes, over sqrt(D).
    spec = AttentionSpec(C, H, positions=ALiBi(slopes=tuple(
        s / math.sqrt(D) for s in alibi_slopes(H))))
    x = _x(spec, T=T)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    mask = torch.zeros(T, T, dtype=torch.float64).masked_fill(future, float("-inf"))[None, None]
    with torch.no_grad():
        alibi = build_alibi_tensor(torch.ones(2, T), H, torch.float64)
        hf = attn(x, alibi, mask)[0]
    torch.testing.assert_close(spec_attention(x, w, spec), hf, rtol=1e-10, atol=1e-10)
    # The paper's slopes (BLOOM: added after the scale) are not Falcon-RW's.
    assert not torch.allclose(spec_attention(x, w, AttentionSpec(C, H, positions=ALiBi())), hf)


def test_given_alibi_slopes_are_checked_and_round_trip() -> None:
    with pytest.raises(ConfigError) as raised:
        AttentionSpec(16, 4, positions=ALiBi(slopes=(0.5, 0.25)))
    assert "ALiBi has 2 slopes, but each of the n_head=4 query heads needs its own: give 4" \
        in str(raised.value)
    with pytest.raises(ConfigError, match=r"each must be a finite number \(nan is not\)"):
        ALiBi(slopes=(0.5, float("nan")))
    with pytest.raises(ConfigError, match="a tuple of one float per query head"):
        ALiBi(slopes=0.5)  # type: ignore[arg-type]
    given = AttentionSpec(16, 4, positions=ALiBi(slopes=[1, 0.5, 0.0, 0.125]))  # type: ignore
    assert given.positions == ALiBi(slopes=(1.0, 0.5, 0.0, 0.125))
    assert given.to_json()["positions"] == {"kind": "alibi", "slopes": [1.0, 0.5, 0.0, 0.125]}
    assert AttentionSpec.from_json(given.to_json()) == given
    assert AttentionSpec(16, 4, positions=ALiBi()).to_json()["positions"] == {"kind": "alibi"}


def test_given_alibi_slopes_hold_on_every_inference_path() -> None:
    from attnspec.reference.inference import cross_attention, decode_attention, padded_attention

    spec = AttentionSpec(16, 4, n_kv_head=2, positions=ALiBi(slopes=(1.0, 0.0, 0.3, 2.0)))
    w, x = _weights(spec), _x(spec, T=7)
    whole = spec_attention(x, w, spec)
    i, j = torch.arange(7)[:, None], torch.arange(7)[None, :]
    bias = -torch.tensor([1.0, 0.0, 0.3, 2.0], dtype=torch.float64)[:, None, None] * (i - j)
    torch.testing.assert_close(whole, _sdpa(x, w, spec, bias=bias), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(decode_attention(x, w, spec, [2, 5]), whole)
    torch.testing.assert_close(cross_attention(x[:, 3:], x, w, spec), whole[:, 3:])
    torch.testing.assert_close(padded_attention(x, w, spec, torch.ones(2, 7, dtype=torch.bool)),
                               whole)


def _hf_rope(rope: RoPE, D: int, max_position: int = 4096, seq_len: int | None = None,
             ) -> tuple[Tensor, float]:
    """transformers' own inv_freq and attention factor (ROPE_INIT_FUNCTIONS) for `rope`."""
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    s = rope.scaling
    params: dict[str, object] = {"rope_theta": rope.theta, "partial_rotary_factor": rope.fraction}
    if isinstance(s, LinearScaling):
        params |= {"rope_type": "linear", "factor": s.factor}
    elif isinstance(s, DynamicNTK):  # its original length is transformers' max_position_embeddings
        params |= {"rope_type": "dynamic", "factor": s.factor}
        max_position = s.original_max_position
    elif isinstance(s, YaRN):
        params |= {"rope_type": "yarn", "factor": s.factor, "beta_fast": s.beta_fast,
                   "beta_slow": s.beta_slow, "truncate": s.truncate,
                   "original_max_position_embeddings": s.original_max_position}
        params |= {k: getattr(s, k) for k in ("attention_factor", "mscale", "mscale_all_dim")
                   if getattr(s, k) is not None}
        max_position = int(s.original_max_position * s.factor)
    elif isinstance(s, Llama3Scaling):
        params |= {"rope_type": "llama3", "factor": s.factor,
                   "low_freq_factor": s.low_freq_factor, "high_freq_factor": s.high_freq_factor,
                   "original_max_position_embeddings": s.original_max_position}
    config = LlamaConfig(hidden_size=4 * D, num_attention_heads=4, head_dim=D,
                         max_position_embeddings=max_position, rope_parameters=params)
    inv, factor = ROPE_INIT_FUNCTIONS[str(params["rope_type"])](config, "cpu", seq_len=seq_len)
    return inv.double(), float(factor)


SCALED = [
    RoPE(scaling=LinearScaling(4.0)), RoPE(theta=1e6, fraction=0.5, scaling=LinearScaling(2.5)),
    RoPE(scaling=YaRN(4.0, 32)), RoPE(theta=150000.0, scaling=YaRN(32.0, 4096)),
    RoPE(scaling=YaRN(8.0, 64, beta_fast=16.0, beta_slow=2.0, truncate=False)),
    RoPE(scaling=YaRN(40.0, 4096, mscale=1.0, mscale_all_dim=0.707)),  # DeepSeek-V3's
    RoPE(scaling=YaRN(2.0, 128, attention_factor=1.5), fraction=0.5),
    RoPE(theta=500000.0, scaling=Llama3Scaling()),  # Llama 3.1
    RoPE(theta=500000.0, scaling=Llama3Scaling(32.0, 1.0, 4.0, 8192)),  # Llama 3.2
    RoPE(scaling=Llama3Scaling(4.0, 2.0, 8.0, 64), interleaved=True),
]


@pytest.mark.parametrize("rope", SCALED, ids=lambda r: repr(r.scaling))
@pytest.mark.parametrize("D", [16, 64])
def test_rope_scaling_frequencies_and_attention_factor_are_transformers(rope: RoPE,
                                                                        D: int) -> None:
    from attnspec.reference.variants import frequencies

    rot = rope.rotary_dim(D)
    ours, factor = frequencies(rope, rot, 1, torch.float64, torch.device("cpu"))
    theirs, their_factor = _hf_rope(rope, D)
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=0)  # theirs are float32
    assert factor == pytest.approx(their_factor, rel=1e-12)


@pytest.mark.parametrize(("factor", "original", "L"), [
    (2.0, 16, 40), (2.0, 16, 16), (4.0, 32, 33), (8.0, 2048, 5000)])
def test_dynamic_ntk_rebases_on_the_length_seen_as_transformers(factor: float, original: int,
                                                                L: int) -> None:
    from attnspec.reference.variants import frequencies

    rope = RoPE(scaling=DynamicNTK(factor, original))
    ours, one = frequencies(rope, 16, L, torch.float64, torch.device("cpu"))
    theirs, _ = _hf_rope(rope, 16, seq_len=L)
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=0)
    plain, _ = frequencies(RoPE(), 16, L, torch.float64, torch.device("cpu"))
    assert one == 1.0 and torch.equal(ours, plain) == (L <= original)


def test_yarns_attention_factor_scales_q_dot_k_by_its_square() -> None:
    spec = AttentionSpec(32, 4, scale=1.0, positions=RoPE(scaling=YaRN(4.0, 32)))
    w, x = _weights(spec), _x(spec)
    q = F.linear(x, w["q_weight"], w["q_bias"]).view(2, 9, 4, 8).transpose(1, 2)
    k = F.linear(x, w["k_weight"], w["k_bias"]).view(2, 9, 4, 8).transpose(1, 2)
    from attnspec.reference.variants import frequencies, rotate, spec_scores

    inv, af = frequencies(spec.positions, 8, 9, torch.float64, torch.device("cpu"))
    assert af == pytest.approx(0.1 * math.log(4.0) + 1)
    ours = spec_scores(rotate(q, spec.positions, 0), rotate(k, spec.positions, 0), spec)
    angle = torch.arange(9, dtype=torch.float64)[:, None] * inv
    cos, sin = angle.cos(), angle.sin()

    def by_hand(t: Tensor) -> Tensor:
        a, b = t[..., :4], t[..., 4:]
        return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)

    plain = by_hand(q) @ by_hand(k).transpose(-1, -2)
    causal = torch.ones(9, 9, dtype=torch.bool).tril()
    torch.testing.assert_close(ours[..., causal], (af ** 2 * plain)[..., causal])


@pytest.mark.parametrize("rope", [RoPE(scaling=YaRN(4.0, 4)), RoPE(scaling=LinearScaling(2.0)),
                                  RoPE(theta=500000.0, scaling=Llama3Scaling(8.0, 1.0, 4.0, 4))])
def test_static_rope_scaling_holds_on_every_inference_path(rope: RoPE) -> None:
    from attnspec.reference.inference import cross_attention, decode_attention, padded_attention

    spec = AttentionSpec(32, 4, n_kv_head=2, positions=rope)
    w, x = _weights(spec), _x(spec, T=9)
    whole = spec_attention(x, w, spec)
    torch.testing.assert_close(decode_attention(x, w, spec, [4, 1, 4]), whole)
    torch.testing.assert_close(cross_attention(x[:, 5:], x, w, spec), whole[:, 5:])
    torch.testing.assert_close(padded_attention(x, w, spec, torch.ones(2, 9, dtype=torch.bool)),
                               whole)
    assert not torch.allclose(whole, spec_attention(x, w, AttentionSpec(32, 4, n_kv_head=2,
                                                                         positions=RoPE())))


def test_dynamic_ntk_length_is_the_calls_and_a_cache_keeps_its_turns() -> None:
    from attnspec.reference.inference import decode_attention, decode_step, padded_attention

    spec = AttentionSpec(32, 4, positions=RoPE(scaling=DynamicNTK(2.0, 6)))
    w, x = _weights(spec), _x(spec, T=9)
    whole = spec_attention(x, w, spec)  # L = 9 > 6: every position on the rebased frequencies
    short = spec_attention(x[:, :6], w, spec)  # L = 6: plain RoPE
    plain = AttentionSpec(32, 4, positions=RoPE())
    torch.testing.assert_close(short, spec_attention(x[:, :6], w, plain))
    assert not torch.allclose(whole[:, :6], short)
    # Decoding: the prefill's keys keep L = 6; each later call rebases on offset + t.
    out, cache = decode_step(x[:, :6], w, spec, None, 0)
    outs = [out]
    for t in range(6, 9):
        out, cache = decode_step(x[:, t:t + 1], w, spec, cache, t)
        outs.append(out)
    torch.testing.assert_close(decode_attention(x, w, spec, [6, 1, 1, 1]), torch.cat(outs, 1))
    torch.testing.assert_close(torch.cat(outs, 1)[:, :6], short)
    # Padding: L is 1 + the largest real position (the longest row's real length), whichever
    # side the padding is on.
    left, right = torch.ones(2, 9, dtype=torch.bool), torch.ones(2, 9, dtype=torch.bool)
    left[1, :3], right[1, 6:] = False, False
    moved = x.clone()
    moved[1, :6] = x[1, 3:]
    by_left, by_right = padded_attention(x, w, spec, left), padded_attention(moved, w, spec, right)
    torch.testing.assert_close(by_left[0], whole[0])
    torch.testing.assert_close(by_left[1, 3:], by_right[1, :6])


def test_rope_scaling_is_checked_and_round_trips() -> None:
    with pytest.raises(ConfigError, match=r"high_freq_factor=1.0 <= low_freq_factor=4.0"):
        Llama3Scaling(8.0, 4.0, 1.0)
    with pytest.raises(ConfigError, match="Invalid YaRN: original_max_position=0"):
        YaRN(4.0, 0)
    with pytest.raises(ConfigError, match="Invalid LinearScaling: factor=-1"):
        LinearScaling(-1)
    with pytest.raises(ConfigError, match="scaling='yarn'; it must be None"):
        RoPE(scaling="yarn")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"dynamic NTK raises the base to r / \(r - 2\)"):
        AttentionSpec(8, 4, positions=RoPE(scaling=DynamicNTK(2.0, 16)))
    for rope in [*SCALED, RoPE(scaling=DynamicNTK(2.0, 16))]:
        spec = AttentionSpec(64, 4, positions=rope)
        assert AttentionSpec.from_json(spec.to_json()) == spec
    assert "scaling" not in AttentionSpec(16, 4, positions=RoPE()).to_json()["positions"]
    with pytest.raises(ConfigError, match="unknown fields"):
        AttentionSpec.from_json({"n_embd": 16, "n_head": 4, "positions": {
            "kind": "rope", "scaling": {"kind": "linear", "factor": 2.0, "alpha": 1}}})


def test_the_reference_subject_passes_on_every_new_feature_and_hook() -> None:
    # The built-in reference with what 2026 models ship, on every property with a hook: its
    # forward, decode, padded, cross and shifted must agree with attnspec's own references.
    import attnspec
    import attnspec.subjects.variants as reference

    hooks = {n: getattr(reference, n) for n in ("decode", "decode_padded", "shifted", "padded",
                                                "cross")}
    subject = _v2(VARIANTS={
        "n_kv_head": "any", "qk_norm": "any", "sinks": "any", "positions": [
            RoPE(scaling=DynamicNTK(2.0, 6)), RoPE(fraction=0.5, scaling=YaRN(4.0, 8)),
            RoPE(theta=500000.0, scaling=Llama3Scaling(8.0, 1.0, 4.0, 16)),
            ALiBi(slopes=(0.5, 0.0, 1.0, 0.25))]},
        CORNER="bottom_right", MASKED_ROWS="zero", **hooks)
    report = attnspec.verify(subject, only="oracle,decode,padding_invariance,masked_rows,"
                             "causal_corner,relative_position", max_examples=4, seed=0,
                             database=False, isolate=False, max_seq=16)
    assert report.ok, report.summary()


def test_the_trace_shows_the_qk_norm_and_the_sinks() -> None:
    spec = AttentionSpec(16, 4, n_kv_head=2, qk_norm=QKNorm(per_head=False), sinks=True,
                         positions=RoPE(scaling=YaRN(4.0, 8)))
    out, trace = SpecAttention(spec).traced(torch.randn(1, 3, 16))
    assert [s.name for s in trace.stages][1:4] == ["projection", "qk norm", "head split"]
    text = str(trace)
    assert "rms norm of q and k over the whole projection" in text
    assert "YaRN x4" in text and "the sink dropped" in text


def test_a_counterexample_line_names_the_new_fields_briefly() -> None:
    from attnspec.common.report import _short

    spec = AttentionSpec(16, 4, qk_norm=QKNorm(per_head=False), sinks=True,
                         positions=RoPE(interleaved=True, scaling=YaRN(4.0, 8)))
    line = _short({"B": 1, "T": 2, "C": 16, "H": 4, "dtype": "float32", "device": "cpu",
                   "spec": spec.to_json()}, None)
    assert "positions=rope-interleaved+yarn" in line and "qk_norm=rms-whole" in line
    assert "sinks=True" in line
    given = AttentionSpec(16, 2, positions=ALiBi(slopes=(1.0, 0.5))).to_json()
    assert "positions=alibi-given" in _short({"B": 1, "T": 2, "C": 16, "H": 2, "dtype": "float32",
                                              "device": "cpu", "spec": given}, None)


def test_a_subject_that_exports_no_norm_weights_or_sinks_is_told_which() -> None:
    import attnspec

    subject = _v2(VARIANTS={"qk_norm": [QKNorm()], "sinks": [True]})
    subject.export_weights = lambda m: {k: v for k, v in m.export_weights().items()
                                        if "norm" not in k and k != "sinks"}
    report = attnspec.verify(subject, only="oracle", max_examples=2, seed=0, database=False,
                             isolate=False)
    oracle = report.result("oracle")
    assert oracle.verdict == "error", oracle
    assert "export_weights gave no q_norm_weight, k_norm_weight, sinks" in oracle.message


@pytest.mark.parametrize("extra", [{"qk_norm": QKNorm()}, {"sinks": True}])
def test_the_sharded_references_refuse_what_they_do_not_model(extra: dict[str, object]) -> None:
    from attnspec.reference.sharding import cp_reference, tp_reference

    spec = AttentionSpec(8, 2, **extra)  # type: ignore[arg-type]
    x, w = torch.zeros(1, 4, 8), _weights(AttentionSpec(8, 2))
    for call in (lambda: tp_reference(x, w, spec, 2), lambda: cp_reference(x, w, spec, 2)):
        with pytest.raises(ConfigError, match="which the simulated sharded references do not "
                                              "model yet"):
            call()
