"""Your own attention, checked with Hypothesis: attnspec's strategies draw the cases, attnspec's
reference is the oracle. Copy this file next to your code and run `pytest` on it.

`my_attention` stands for your function: q (B, Tq, H, D), k and v (B, Tk, G, D) (the "bshd"
layout), grouped-query heads (H a multiple of G), a causal mask anchored at the bottom right
(FlashAttention's: query i sees keys j <= i + Tk - Tq), a soft cap, a scale of its own and a
key mask; a query that sees no key gives 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor

import attnspec
from attnspec import strategies as ast


def my_attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool = True,
                 scale: float | None = None, softcap: float | None = None,
                 key_mask: Tensor | None = None) -> Tensor:
    """Plain attention in bshd; key_mask (B, Tk) is True at keys that may be seen."""
    B, Tq, H, D = q.shape
    Tk, G = k.size(1), k.size(2)
    k, v = (t.repeat_interleave(H // G, dim=2) for t in (k, v))  # kv head g serves H/G heads
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * (scale or 1 / math.sqrt(D))
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    seen = torch.ones(Tq, Tk, dtype=torch.bool, device=q.device)
    if causal:
        seen = seen.tril(diagonal=Tk - Tq)
    seen = seen[None, None]
    if key_mask is not None:
        seen = seen & key_mask[:, None, None, :]
    weights = scores.masked_fill(~seen, -math.inf).softmax(dim=-1).nan_to_num(0.0)
    return torch.einsum("bhqk,bkhd->bqhd", weights, v)


# The bounds keep each example small (CPU, a few ms); attnspec's own runs go wider.
CASES = ast.kernel_cases(layout="bshd", corner="bottom_right",
                         features=("gqa", "cross", "noncausal", "scale", "softcap"),
                         max_seq=48, max_heads=6, max_head_dim=32)


def check_against_the_reference(attention: Callable[..., Tensor], case: ast.KernelCase,
                                ) -> None:
    out = attention(case.q, case.k, case.v, causal=case.causal, scale=case.softmax_scale,
                    softcap=case.softcap)
    want, _ = case.reference()  # float64, in bshd like the case; rows with no key are 0
    torch.testing.assert_close(out.double(), want, atol=1e-5, rtol=1e-4,
                               msg=lambda m: f"{case.example.describe()}\n{m}")


@settings(max_examples=60, deadline=None)
@given(CASES)
def test_my_attention_matches_the_reference(case: ast.KernelCase) -> None:
    check_against_the_reference(my_attention, case)


@settings(max_examples=40, deadline=None)
@given(batch=ast.padded_batches(shape=st.tuples(ast.batch_sizes(), ast.seq_lengths(max_value=24),
                                                st.sampled_from((8, 12, 16)))))
def test_padding_changes_no_real_token(batch: ast.PaddedBatch) -> None:
    B, T, C = batch.x.shape
    heads = batch.x.view(B, T, 2, C // 2)  # q = k = v: two heads of C/2
    out = my_attention(heads, heads, heads, key_mask=batch.key_mask)
    for b, n in enumerate(batch.lengths):  # each row's real tokens alone, through attnspec
        real = slice(T - n, T) if batch.side == "left" else slice(0, n)
        row = heads[b:b + 1, real].transpose(1, 2)  # bhsd, as kernel_attention takes it
        want, _ = attnspec.kernel_attention(row, row, row, causal=True)
        torch.testing.assert_close(out[b:b + 1, real], want.transpose(1, 2))


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_the_future_never_reaches_the_past(data: st.DataObject) -> None:
    T = data.draw(ast.seq_lengths(min_value=2, max_value=40), label="T")
    x = data.draw(ast.inputs(shape=(2, T, 3, 8)), label="x")  # (B, T, H, D)
    later = data.draw(ast.inputs(shape=(2, T, 3, 8)), label="other future")
    for cut in data.draw(ast.cut_points(T=T), label="cuts"):
        changed = torch.cat([x[:, :cut + 1], later[:, cut + 1:]], dim=1)
        torch.testing.assert_close(my_attention(changed, changed, changed)[:, :cut + 1],
                                   my_attention(x, x, x)[:, :cut + 1], atol=0.0, rtol=0.0)


def my_attention_with_a_bug(q: Tensor, k: Tensor, v: Tensor, *, causal: bool = True,
                            scale: float | None = None, softcap: float | None = None) -> Tensor:
    """A classic grouped-query bug: kv heads tiled (0, 1, 0, 1) instead of repeated (0, 0, 1,
    1), so query head h reads kv head h % G instead of h // (H / G)."""
    G, H = k.size(2), q.size(2)
    k, v = (t.repeat(1, 1, H // G, 1) for t in (k, v))
    return my_attention(q, k, v, causal=causal, scale=scale, softcap=softcap)


def test_the_oracle_catches_the_bug() -> None:
    # What a failing run looks like: Hypothesis finds a case, shrinks it and prints it.
    @settings(max_examples=200, deadline=None, database=None, derandomize=True)
    @given(CASES)
    def check(case: ast.KernelCase) -> None:
        check_against_the_reference(my_attention_with_a_bug, case)

    with pytest.raises(AssertionError, match=r"G=\d"):
        check()
