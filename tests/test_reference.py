"""The reference: shapes, agreement with a textbook computation, weights in and out, causality."""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping

import pytest
import torch
from torch import Tensor

import attnspec
from attnspec import CausalSelfAttention, ShapeError

WIDTHS = (12, 32, 48, 7)
# Every (C, H) with H a divisor of C, for the widths above.
CONFIGS = [(c, h) for c in WIDTHS for h in attnspec.divisors(c)]
BATCH_SEQ = ((1, 1), (2, 5), (3, 8))
KERNELS = ("explicit", "sdpa")


def build(n_embd: int, n_head: int, *, seed: int = 0, dtype: torch.dtype = torch.float64,
          **kwargs: object) -> CausalSelfAttention:
    """A reference module with seeded weights, in eval mode."""
    torch.manual_seed(seed)
    return CausalSelfAttention(n_embd, n_head, **kwargs).to(dtype).eval()  # type: ignore[arg-type]


def residual(B: int, T: int, C: int, *, seed: int = 1,
             dtype: torch.dtype = torch.float64) -> Tensor:
    return torch.randn(B, T, C, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def textbook_attention(x: Tensor, weights: Mapping[str, Tensor], n_head: int) -> Tensor:
    """Causal multi-head self-attention the long way: one head at a time, by channel slices."""
    B, T, C = x.shape
    D = C // n_head
    zero = torch.zeros(C, dtype=x.dtype)
    q = x @ weights["q_weight"].T + weights.get("q_bias", zero)
    k = x @ weights["k_weight"].T + weights.get("k_bias", zero)
    v = x @ weights["v_weight"].T + weights.get("v_bias", zero)
    future = torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)
    heads = []
    for h in range(n_head):
        # Head h owns channels h*D .. (h+1)*D of q, k and v, and every position.
        qh, kh, vh = (t[:, :, h * D:(h + 1) * D] for t in (q, k, v))
        scores = (qh @ kh.transpose(1, 2)) / math.sqrt(D)
        scores = scores.masked_fill(future, float("-inf"))
        e = torch.exp(scores - scores.max(dim=-1, keepdim=True).values)
        heads.append((e / e.sum(dim=-1, keepdim=True)) @ vh)
    y = torch.cat(heads, dim=-1)
    return y @ weights["o_weight"].T + weights.get("o_bias", zero)


def test_lessons_numbers_trace_through_the_reference() -> None:
    attn = build(12, 3)
    x = residual(2, 5, 12)
    out, trace = attn.traced(x)
    assert trace.shape("head split") == (2, 3, 5, 4), (
        f"head split shape={trace.shape('head split')}, but should be (B, H, T, D) = (2, 3, 5, 4) "
        "[CausalSelfAttention(12, 3).traced(x), x.shape=(2, 5, 12)]"
    )
    assert tuple(out.shape) == (2, 5, 12), (
        f"out.shape={tuple(out.shape)}, but should be (B, T, C) = (2, 5, 12) "
        "[CausalSelfAttention(12, 3).traced(x), x.shape=(2, 5, 12)]"
    )
    assert trace.shape("output projection") == (2, 5, 12), (
        f"trace's output projection shape={trace.shape('output projection')}, but should be "
        "(2, 5, 12)"
    )


def test_lessons_attention_weights_are_per_head_and_per_position_pair() -> None:
    weights = build(12, 3).attention_weights(residual(2, 5, 12))
    assert tuple(weights.shape) == (2, 3, 5, 5), (
        f"attention_weights(x).shape={tuple(weights.shape)}, but should be (B, H, T, T) = "
        "(2, 3, 5, 5) [CausalSelfAttention(12, 3), x.shape=(2, 5, 12)]"
    )


def test_attention_weights_are_causal_distributions_over_keys() -> None:
    weights = build(12, 3).attention_weights(residual(2, 5, 12))
    sums = weights.sum(dim=-1)
    assert torch.allclose(sums, torch.ones_like(sums)), (
        f"each query's weights should sum to 1 over keys; got sums {sums}"
    )
    future = weights.triu(diagonal=1)
    assert torch.count_nonzero(future) == 0, (
        f"weights on future keys (j > i) should be exactly 0; got {future}"
    )


def test_attention_weights_match_the_textbook_softmax() -> None:
    attn = build(12, 3)
    x = residual(2, 5, 12)
    w = attn.export_weights()
    q = (x @ w["q_weight"].T + w["q_bias"]).view(2, 5, 3, 4).transpose(1, 2)
    k = (x @ w["k_weight"].T + w["k_bias"]).view(2, 5, 3, 4).transpose(1, 2)
    scores = (q @ k.transpose(-2, -1) / 2.0).masked_fill(  # sqrt(D) = 2 for D = 4
        torch.ones(5, 5, dtype=torch.bool).triu(diagonal=1), float("-inf"))
    with torch.no_grad():
        expected = torch.softmax(scores, dim=-1)
        got = attn.attention_weights(x)
    torch.testing.assert_close(got, expected, msg=lambda m: f"attention_weights(x) differ: {m}")


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize(("n_embd", "n_head"), CONFIGS)
def test_every_divisor_keeps_the_residual_shape(n_embd: int, n_head: int, kernel: str) -> None:
    attn = build(n_embd, n_head, kernel=kernel, dtype=torch.float32)
    for B, T in BATCH_SEQ:
        with torch.no_grad():
            out = attn(residual(B, T, n_embd, dtype=torch.float32))
        assert tuple(out.shape) == (B, T, n_embd), (
            f"out.shape={tuple(out.shape)}, but should be (B, T, C) = {(B, T, n_embd)} "
            f"[CausalSelfAttention({n_embd}, {n_head}, kernel={kernel!r}), "
            f"x.shape={(B, T, n_embd)}]"
        )


@pytest.mark.parametrize(("n_embd", "n_head"), CONFIGS)
def test_sdpa_kernel_agrees_with_explicit_kernel_in_float64(n_embd: int, n_head: int) -> None:
    explicit = build(n_embd, n_head, kernel="explicit")
    sdpa = build(n_embd, n_head, kernel="sdpa")
    sdpa.load_state_dict(explicit.state_dict())
    for B, T in BATCH_SEQ:
        x = residual(B, T, n_embd)
        with torch.no_grad():
            torch.testing.assert_close(
                sdpa(x), explicit(x), rtol=1e-10, atol=1e-12,
                msg=lambda m, B=B, T=T: (
                    f"kernel='sdpa' and kernel='explicit' disagree for C={n_embd}, H={n_head}, "
                    f"x.shape={(B, T, n_embd)}: {m}"),
            )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize(("n_embd", "n_head"), [(12, 3), (32, 4), (7, 7), (48, 1)])
def test_sdpa_fast_path_is_bitwise_the_checked_pipeline(n_embd: int, n_head: int,
                                                         dtype: torch.dtype) -> None:
    from attnspec.reference.module import _PLAIN

    attn = build(n_embd, n_head, dtype=dtype, kernel="sdpa")
    for B, T in (*BATCH_SEQ, (2, 33)):
        outs, grads = [], []
        for run in (lambda x: attn._pipeline(x, _PLAIN, explicit=False), attn._sdpa_fused):
            x = residual(B, T, n_embd).to(dtype).requires_grad_()
            attn.zero_grad()
            out = run(x)
            out.backward(torch.ones_like(out))
            outs.append(out.detach())
            grads.append([x.grad, *(p.grad for p in attn.parameters())])
        assert torch.equal(outs[0], outs[1]), (B, T)
        for pipeline_grad, fused_grad in zip(*grads, strict=True):
            assert torch.equal(pipeline_grad, fused_grad), (B, T)
    x = residual(2, 5, n_embd).to(dtype)
    first, steady = attn(x), attn(x)  # checked pipeline, then the fused path
    assert torch.equal(first, steady)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("kernel", KERNELS)
def test_output_dtype_is_the_input_dtype(kernel: str, dtype: torch.dtype) -> None:
    attn = build(12, 3, kernel=kernel, dtype=dtype)
    with torch.no_grad():
        out = attn(residual(2, 5, 12, dtype=dtype))
    assert out.dtype == dtype, f"out.dtype={out.dtype}, but should be the input's {dtype}"


@pytest.mark.parametrize(
    ("n_embd", "n_head", "B", "T"),
    [(12, 3, 2, 5), (12, 3, 1, 1), (8, 1, 2, 6), (8, 8, 2, 6), (32, 4, 3, 9), (7, 7, 1, 4),
     (48, 6, 2, 1)],
)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("kernel", KERNELS)
def test_reference_matches_textbook_attention_in_float64(
    n_embd: int, n_head: int, B: int, T: int, bias: bool, kernel: str
) -> None:
    attn = build(n_embd, n_head, bias=bias, kernel=kernel)
    x = residual(B, T, n_embd)
    with torch.no_grad():
        expected = textbook_attention(x, attn.export_weights(), n_head)
        got = attn(x)
    torch.testing.assert_close(
        got, expected, rtol=1e-10, atol=1e-12,
        msg=lambda m: (f"CausalSelfAttention({n_embd}, {n_head}, bias={bias}, kernel={kernel!r})"
                       f" differs from the per-head textbook computation, x.shape={(B, T, n_embd)}:"
                       f" {m}"),
    )


@pytest.mark.parametrize(
    ("dtype", "tol"), [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)], ids=["float32", "bfloat16"]
)
@pytest.mark.parametrize(("n_embd", "n_head", "T"), [(12, 3, 5), (32, 4, 16), (48, 48, 7)])
def test_lower_precision_stays_close_to_float64(
    n_embd: int, n_head: int, T: int, dtype: torch.dtype, tol: float
) -> None:
    golden_attn = build(n_embd, n_head)
    attn = copy.deepcopy(golden_attn).to(dtype)
    x = residual(2, T, n_embd)
    with torch.no_grad():
        golden = golden_attn(x)
        got = attn(x.to(dtype)).to(torch.float64)
    # tol is a few units of the dtype's rounding on outputs of size about 1.
    torch.testing.assert_close(
        got, golden, rtol=tol, atol=tol,
        msg=lambda m: f"{dtype} output is too far from float64 (C={n_embd}, H={n_head}): {m}",
    )


@pytest.mark.parametrize("bias", [True, False])
def test_export_then_load_reproduces_the_module(bias: bool) -> None:
    source = build(12, 3, seed=0, bias=bias)
    target = build(12, 3, seed=1, bias=bias)
    target.load_weights(source.export_weights())
    x = residual(2, 5, 12)
    with torch.no_grad():
        assert torch.equal(target(x), source(x)), (
            "load_weights(export_weights()) of another module should give identical outputs"
        )


def test_export_weights_follow_the_subject_protocol() -> None:
    weights = build(12, 3).export_weights()
    expected = {"q_weight": (12, 12), "k_weight": (12, 12), "v_weight": (12, 12),
                "o_weight": (12, 12), "q_bias": (12,), "k_bias": (12,), "v_bias": (12,),
                "o_bias": (12,)}
    got = {key: tuple(t.shape) for key, t in weights.items()}
    assert got == expected, f"export_weights() keys and shapes={got}, but should be {expected}"


def test_exported_weights_stay_connected_to_the_parameters() -> None:
    attn = build(12, 3)
    # oracle_grad compares weight gradients through these views.
    attn.export_weights()["k_weight"].sum().backward()
    grad = attn.c_attn.weight.grad
    assert grad is not None and torch.equal(grad[12:24], torch.ones(12, 12)), (
        "a gradient through export_weights()['k_weight'] should land on rows C..2C of c_attn"
    )
    assert torch.count_nonzero(grad[:12]) == 0 and torch.count_nonzero(grad[24:]) == 0, (
        "a gradient through k_weight leaked into the q or v rows of c_attn"
    )


def test_missing_biases_load_as_zero() -> None:
    attn = build(12, 3)
    exported = build(12, 3, seed=5).export_weights()
    attn.load_weights({k: v for k, v in exported.items() if k.endswith("weight")})
    biases = torch.cat([attn.c_attn.bias, attn.c_proj.bias])  # type: ignore[list-item]
    assert torch.count_nonzero(biases) == 0, (
        f"loading weights without biases should set every bias to zero; got {biases}"
    )


def test_biases_are_not_dropped_by_a_module_without_biases() -> None:
    source = build(12, 3, bias=True)
    with torch.no_grad():
        source.c_proj.bias.fill_(0.5)  # type: ignore[union-attr]
    target = build(12, 3, bias=False)
    try:
        target.load_weights(source.export_weights())
    except ShapeError:
        return
    # Silently ignoring nonzero biases would make the oracle compute a different function.
    pytest.fail("load_weights() of nonzero q/k/v/o biases into CausalSelfAttention(12, 3, "
                "bias=False) dropped them silently; it should raise ShapeError naming the keys")


def test_load_weights_names_every_missing_key() -> None:
    weights = build(12, 3).export_weights()
    del weights["k_weight"], weights["o_weight"]
    with pytest.raises(ShapeError) as info:
        build(12, 3).load_weights(weights)
    expected = (
        "Loading weights into CausalSelfAttention(n_embd=12, n_head=3): missing k_weight, "
        "o_weight; got keys ['k_bias', 'o_bias', 'q_bias', 'q_weight', 'v_bias', 'v_weight']."
    )
    assert str(info.value) == expected, (
        f"load_weights without k_weight and o_weight said\n  {info.value}\nbut should say\n  "
        f"{expected}"
    )


@pytest.mark.parametrize(
    ("key", "shape", "want"),
    [("k_weight", (12, 4), "(12, 12)"), ("o_weight", (12,), "(12, 12)"),
     ("v_bias", (11,), "(12,)"), ("q_bias", (12, 12), "(12,)")],
)
def test_load_weights_rejects_a_wrong_shape_naming_key_and_shapes(
    key: str, shape: tuple[int, ...], want: str
) -> None:
    weights = build(12, 3).export_weights()
    weights[key] = torch.zeros(shape, dtype=torch.float64)
    with pytest.raises(ShapeError) as info:
        build(12, 3).load_weights(weights)
    expected = (
        f"Loading weights into CausalSelfAttention(n_embd=12, n_head=3): {key} has shape "
        f"{shape}, but it must be {want} (C = n_embd = 12)."
    )
    assert str(info.value) == expected, (
        f"load_weights with {key} of shape {shape} said\n  {info.value}\nbut should say\n  "
        f"{expected}"
    )


def test_unknown_kernel_is_rejected_at_construction() -> None:
    with pytest.raises(ValueError) as info:
        CausalSelfAttention(12, 3, kernel="flash")  # type: ignore[arg-type]
    expected = "CausalSelfAttention(kernel='flash'): kernel must be 'explicit' or 'sdpa'."
    assert str(info.value) == expected, f"message was {info.value!r}, but should be {expected!r}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kernel", KERNELS)
def test_later_tokens_never_change_earlier_outputs(kernel: str, dtype: torch.dtype) -> None:
    attn = build(12, 3, kernel=kernel, dtype=dtype)
    B, T, C = 3, 8, 12
    x = residual(B, T, C, dtype=dtype)
    with torch.no_grad():
        out = attn(x)
        for t in range(T - 1):
            changed = x.clone()
            # Large, unrelated values after t: a leak of any size would show.
            changed[:, t + 1:] = 100 * residual(B, T - t - 1, C, seed=t + 10, dtype=dtype)
            after = attn(changed)
            assert torch.equal(after[:, :t + 1], out[:, :t + 1]), (
                f"changing positions > {t} changed outputs at positions <= {t} "
                f"[CausalSelfAttention(12, 3, kernel={kernel!r}), {dtype}, x.shape={(B, T, C)}]"
            )


def test_forward_leaves_its_input_unchanged() -> None:
    x = residual(2, 5, 12)
    before = x.clone()
    with torch.no_grad():
        build(12, 3)(x)
    assert torch.equal(x, before), "forward modified its input tensor"
