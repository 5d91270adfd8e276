"""The reference on inference paths (a cache, key padding, queries fewer than keys), checked
against independent formulations, and the protocol hooks that turn the properties on."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention.bias import causal_lower_right

import attnspec
from attnspec import ALiBi, AttentionSpec, RoPE, TargetError
from attnspec.reference.inference import (
    cross_attention,
    decode_attention,
    decode_step,
    padded_attention,
    padded_decode_attention,
    padded_decode_step,
)
from attnspec.reference.variants import SpecAttention, spec_attention

SPECS = [AttentionSpec(16, 4), AttentionSpec(16, 4, n_kv_head=2, positions=RoPE()),
         AttentionSpec(16, 4, n_kv_head=1, window=3, positions=ALiBi()),
         AttentionSpec(16, 2, positions=RoPE(interleaved=True, fraction=0.5), softcap=5.0)]


def _weights(spec: AttentionSpec, seed: int = 0) -> dict[str, Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {k: torch.randn(shape, generator=gen, dtype=torch.float64) / math.sqrt(shape[-1])
            for k, shape in spec.weight_shapes().items()}


def _x(spec: AttentionSpec, B: int = 2, T: int = 9, seed: int = 1) -> Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, spec.n_embd, generator=gen, dtype=torch.float64)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.describe())
def test_equal_lengths_are_spec_attention_bit_for_bit(spec: AttentionSpec) -> None:
    w, x = _weights(spec), _x(spec)
    assert torch.equal(cross_attention(x, x, w, spec), spec_attention(x, w, spec))
    everything = torch.ones(x.shape[:2], dtype=torch.bool)
    assert torch.equal(padded_attention(x, w, spec, everything), spec_attention(x, w, spec))


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.describe())
def test_a_cache_gives_the_full_forward(spec: AttentionSpec) -> None:
    w, x = _weights(spec), _x(spec)
    full = spec_attention(x, w, spec)
    outs, cache, offset = [], None, 0
    for size in (4, 1, 1, 3):
        out, cache = decode_step(x[:, offset:offset + size], w, spec, cache, offset)
        outs.append(out)
        offset += size
    assert torch.allclose(torch.cat(outs, 1), full, atol=1e-12, rtol=0)
    assert torch.allclose(decode_attention(x, w, spec, [4, 1, 1, 3]), full, atol=1e-12, rtol=0)


def test_bottom_right_is_torchs_causal_lower_right() -> None:
    spec = AttentionSpec(16, 4)
    w = _weights(spec)
    x_q, x_kv = _x(spec, T=3, seed=2), _x(spec, T=7, seed=3)
    q = F.linear(x_q, w["q_weight"], w["q_bias"]).view(2, 3, 4, 4).transpose(1, 2)
    k = F.linear(x_kv, w["k_weight"], w["k_bias"]).view(2, 7, 4, 4).transpose(1, 2)
    v = F.linear(x_kv, w["v_weight"], w["v_bias"]).view(2, 7, 4, 4).transpose(1, 2)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(3, 7))
    want = F.linear(y.transpose(1, 2).reshape(2, 3, 16), w["o_weight"], w["o_bias"])
    got = cross_attention(x_q, x_kv, w, spec, "bottom_right")
    assert torch.allclose(got, want, atol=1e-12, rtol=0)
    top_left = cross_attention(x_kv[:, :3], x_kv, w, spec, "top_left")  # the first 3 queries
    assert torch.allclose(top_left, spec_attention(x_kv, w, spec)[:, :3], atol=1e-12, rtol=0)


def test_more_queries_than_keys_leaves_the_first_rows_with_the_output_bias() -> None:
    spec = AttentionSpec(16, 4)
    w = _weights(spec)
    x_q = _x(spec, T=5, seed=2).requires_grad_(True)
    x_kv = _x(spec, T=2, seed=3)
    out = cross_attention(x_q, x_kv, w, spec, "bottom_right")
    assert torch.equal(out[:, :3], w["o_bias"].expand(2, 3, 16)), "rows that see no key"
    (grad,) = torch.autograd.grad(out[:, :3].sum(), [x_q])
    assert torch.equal(grad, torch.zeros_like(grad))


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.describe())
def test_padding_is_never_read_and_either_side_gives_the_unpadded_outputs(
        spec: AttentionSpec) -> None:
    w = _weights(spec)
    real = _x(spec, B=1, T=5)
    alone = spec_attention(real, w, spec)
    for side in ("left", "right"):
        x = torch.full((1, 8, spec.n_embd), float("nan"), dtype=torch.float64)
        mask = torch.zeros(1, 8, dtype=torch.bool)
        where = slice(3, 8) if side == "left" else slice(0, 5)
        x[:, where], mask[:, where] = real, True
        out = padded_attention(x, w, spec, mask)
        assert out.isfinite().all(), side
        assert torch.allclose(out[:, where], alone, atol=1e-12, rtol=0), side


def test_padding_matches_sdpa_with_a_key_mask() -> None:
    spec = AttentionSpec(16, 4)
    w, x = _weights(spec), _x(spec, T=6)
    mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])  # right padding
    B, T = 2, 6
    q, k, v = (F.linear(x, w[f"{n}_weight"], w[f"{n}_bias"]).view(B, T, 4, 4).transpose(1, 2)
               for n in "qkv")
    allowed = torch.ones(T, T, dtype=torch.bool).tril()[None] & mask[:, None, :]
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed[:, None])
    want = F.linear(y.transpose(1, 2).reshape(B, T, 16), w["o_weight"], w["o_bias"])
    got = padded_attention(x, w, spec, mask)  # padded queries' outputs are nobody's business
    assert torch.allclose(got[mask], want[mask], atol=1e-12, rtol=0)


def _v2(**attrs: Any) -> Any:
    from attnspec.subjects import variants

    base = {"__name__": "v2", "PROTOCOL": 2, "build": SpecAttention,
            "export_weights": variants.export_weights}
    return SimpleNamespace(**{**base, **attrs})


def test_hooks_turn_their_properties_on_and_their_absence_is_said() -> None:
    from attnspec.subjects import variants

    only = "decode,padding_invariance,masked_rows,causal_corner"
    bare = attnspec.verify(_v2(), only=only, max_examples=3, seed=0, database=False)
    for prop in only.split(","):
        result = bare.result(prop)
        assert result.verdict == "skip" and "defines no" in (result.message or ""), result
    hooked = attnspec.verify(_v2(decode=variants.decode, padded=variants.padded,
                                 cross=variants.cross), only=only, max_examples=5, seed=0,
                             database=False)
    assert hooked.ok and all(hooked.result(p).verdict == "pass" for p in only.split(",")), (
        hooked.summary())


def test_protocol_1_subjects_skip_the_hooks_properties() -> None:
    report = attnspec.verify("attnspec.subjects.reference", only="decode,causal_corner",
                             max_examples=3, seed=0, database=False, isolate=False)
    for prop in ("decode", "causal_corner"):
        assert report.result(prop).verdict == "skip"
        assert "protocol 1" in (report.result(prop).message or "")


def test_a_hook_on_a_protocol_1_subject_or_a_bad_corner_is_a_target_error() -> None:
    v1 = SimpleNamespace(__name__="v1", build=lambda c, h: torch.nn.Identity(),
                         decode=lambda m, x, c, o: (x, c))
    with pytest.raises(TargetError, match="protocol 2 hooks"):
        attnspec.verify(v1, max_examples=1, database=False)
    with pytest.raises(TargetError, match="CORNER = 'top_right'"):
        attnspec.verify(_v2(CORNER="top_right"), max_examples=1, database=False)
    with pytest.raises(TargetError, match="MASKED_ROWS = 'nan'"):
        attnspec.verify(_v2(MASKED_ROWS="nan"), max_examples=1, database=False)


def test_a_decode_hook_that_returns_no_cache_is_the_subjects_error() -> None:
    report = attnspec.verify(_v2(decode=lambda module, x, cache, offset: module(x)),
                             only="decode", max_examples=3, seed=0, database=False)
    result = report.result("decode")
    assert result.verdict == "error", result
    assert "returned Tensor, not (output, cache)" in (result.message or ""), result.message


def test_the_other_corner_is_caught_on_the_visible_side_when_queries_are_fewer() -> None:
    from attnspec.properties.base import Context, Example
    from attnspec.properties.inference import _corner_lengths, check_causal_corner
    from attnspec.runner.worker import InProcess
    from attnspec.subjects import variants

    spec = AttentionSpec(16, 4)
    # A seed whose Tq < Tk: the top-left corner then hides keys the bottom-right one shows.
    ex = next(e for e in (Example(B=1, T=9, C=16, H=4, seed=s, spec=spec) for s in range(100))
              if _corner_lengths(e) < e.T)
    top_left = _v2(cross=lambda m, x_q, x_kv: m.cross(x_q, x_kv, "top_left"),
                   CORNER="bottom_right")
    outcome = check_causal_corner(Context(InProcess(top_left)), ex)
    assert outcome.kind == "fail" and "is the other corner implemented?" in outcome.message, (
        outcome)
    right = _v2(cross=variants.cross)
    assert check_causal_corner(Context(InProcess(right)), ex).kind == "pass"


class _NoisyLeak(SpecAttention):
    """Padding leaks into real tokens at 1e-3 of its values, under run-to-run noise of 1e-7."""

    def padded(self, x: Tensor, key_mask: Tensor) -> Tensor:
        out = super().padded(x, key_mask)
        leak = (x * (~key_mask)[..., None]).nan_to_num().sum(dim=1, keepdim=True) * 1e-3
        return out + leak + 1e-7 * torch.randn_like(out)


def test_padding_invariance_measures_jitter_on_the_padded_calls_themselves() -> None:
    from attnspec.properties.base import Context, Example, _rng
    from attnspec.properties.inference import check_padding_invariance
    from attnspec.runner.worker import InProcess

    spec = AttentionSpec(8, 2)

    def fill_kind(seed: int) -> str:  # the draw check_padding_invariance makes
        rng = _rng(Example(B=2, T=6, C=8, H=2, seed=seed, spec=spec), 12)
        rng.choice(("left", "right"))
        return str(rng.choice(("random", "large", "nan", "inf")))

    seed = next(s for s in range(200) if fill_kind(s) in ("random", "large"))
    ex = Example(B=2, T=6, C=8, H=2, seed=seed, spec=spec, dtype="float64")
    noisy = _v2(build=_NoisyLeak, padded=lambda m, x, mask: m.padded(x, mask))
    outcome = check_padding_invariance(Context(InProcess(noisy)), ex)
    # The jitter allowance comes from the same padded calls (1e-7), not from plain forwards.
    assert outcome.kind == "fail" and "padding must never reach a real token" in outcome.message


def test_a_hook_of_the_wrong_shape_is_named_in_the_error() -> None:
    wrong = _v2(padded=lambda m, x, mask: m.padded(x, mask)[:, :-1])
    result = attnspec.verify(wrong, only="padding_invariance", max_examples=3, seed=0,
                             database=False).result("padding_invariance")
    assert result.verdict == "error", result
    assert (result.message or "").startswith("padded(module, x, key_mask) returned ("), (
        result.message)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.describe())
def test_a_left_padded_batch_decoded_gives_each_rows_unpadded_outputs(spec: AttentionSpec,
                                                                      ) -> None:
    # Rows of 6 and 3 real tokens, left-padded to 6, then 3 more tokens each, one at a time:
    # each row must mean what its real tokens alone mean.
    w = _weights(spec)
    real = _x(spec, B=2, T=9)
    lengths = (9, 6)
    x = torch.full((2, 9, spec.n_embd), float("nan"), dtype=torch.float64)
    mask = torch.zeros(2, 9, dtype=torch.bool)
    for b, n in enumerate(lengths):
        x[b, 9 - n:], mask[b, 9 - n:] = real[b, :n], True
    outs, cache, offset = [], None, 0
    for size in (6, 1, 1, 1):
        out, cache = padded_decode_step(x[:, offset:offset + size], w, spec, cache, offset,
                                        mask[:, :offset + size])
        outs.append(out)
        offset += size
    decoded = torch.cat(outs, 1)
    chunked = padded_decode_attention(x, w, spec, [6, 1, 1, 1], mask)
    for b, n in enumerate(lengths):
        alone = spec_attention(real[b:b + 1, :n], w, spec)[0]
        assert torch.allclose(decoded[b, 9 - n:], alone, atol=1e-12, rtol=0), b
        assert torch.allclose(chunked[b, 9 - n:], alone, atol=1e-12, rtol=0), b


def test_shared_positions_in_a_padded_decode_are_caught_and_named() -> None:
    import sys
    from pathlib import Path

    from attnspec.properties.base import Context, Example
    from attnspec.properties.inference import check_decode
    from attnspec.runner.worker import InProcess

    sys.path.insert(0, str(Path(__file__).parent / "broken"))
    try:
        import decode_positions_shared_left_padded as shared
    finally:
        sys.path.pop(0)
    spec = AttentionSpec(16, 4, n_kv_head=2, positions=RoPE())
    ex = Example(B=3, T=9, C=16, H=4, seed=1, cuts=(0, 3, 7), spec=spec)
    outcome = check_decode(Context(InProcess(shared)), ex)
    assert outcome.kind == "fail", outcome
    assert "decoding a left-padded batch" in outcome.message
    assert "position ids shared across the batch" in outcome.message
    from attnspec.subjects import variants

    assert check_decode(Context(InProcess(variants)), ex).kind == "pass"
