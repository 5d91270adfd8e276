"""Weights found by name: a module that exports none is checked against the reference all the
same where its projections carry the names the field uses, each guess confirmed on a probe
before it counts; a guess that does not reproduce the module is dropped and said."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import attnspec
from attnspec.runner.finder import candidates

pytestmark = pytest.mark.slow


def _refuse(C: int, H: int) -> int:
    if C < 1 or H < 1 or C % H:
        raise ValueError(f"n_embd={C} must be a positive multiple of n_head={H}")
    return C // H


def _attend(q: Tensor, k: Tensor, v: Tensor, H: int) -> Tensor:
    """(B, T, C) q, k, v -> (B, T, C): causal attention over H heads."""
    B, T, C = q.shape
    q, k, v = (t.reshape(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return y.transpose(1, 2).reshape(B, T, C)


class Separate(nn.Module):
    """Llama's names (or any other separate family's), biases optional."""

    def __init__(self, C: int, H: int, names: tuple[str, str, str, str] = (
            "q_proj", "k_proj", "v_proj", "o_proj"), bias: bool = True) -> None:
        super().__init__()
        _refuse(C, H)
        self.H, self.names = H, names
        for name in names:
            setattr(self, name, nn.Linear(C, C, bias=bias))

    def forward(self, x: Tensor) -> Tensor:
        q, k, v, o = (getattr(self, n) for n in self.names)
        return o(_attend(q(x), k(x), v(x), self.H))  # type: ignore[no-any-return]


class ToOut(Separate):
    """diffusers' names: to_out is a ModuleList of the Linear and a Dropout."""

    def __init__(self, C: int, H: int) -> None:
        super().__init__(C, H, ("to_q", "to_k", "to_v", "to_q"))
        del self.to_q
        self.to_q, self.to_k, self.to_v = (nn.Linear(C, C) for _ in range(3))
        self.to_out = nn.ModuleList([nn.Linear(C, C), nn.Dropout(0.0)])

    def forward(self, x: Tensor) -> Tensor:
        y = _attend(self.to_q(x), self.to_k(x), self.to_v(x), self.H)
        return self.to_out[1](self.to_out[0](y))  # type: ignore[no-any-return]


class Fused(nn.Module):
    """nanoGPT's c_attn (or qkv, Wqkv, ...) [q|k|v], or GPT-NeoX's per-head interleave."""

    def __init__(self, C: int, H: int, name: str = "c_attn", out: str = "c_proj",
                 neox: bool = False) -> None:
        super().__init__()
        _refuse(C, H)
        self.H, self.name, self.out, self.neox = H, name, out, neox
        setattr(self, name, nn.Linear(C, 3 * C))
        setattr(self, out, nn.Linear(C, C))

    def forward(self, x: Tensor) -> Tensor:
        B, T, C = x.shape
        fused = getattr(self, self.name)(x)
        if self.neox:  # (B, T, H, 3, D): each head's q, k, v side by side
            q, k, v = fused.view(B, T, self.H, 3, C // self.H).unbind(3)
            q, k, v = (t.reshape(B, T, C) for t in (q, k, v))
        else:
            q, k, v = fused.split(C, dim=2)
        return getattr(self, self.out)(_attend(q, k, v, self.H))  # type: ignore[no-any-return]


class Conv1D(nn.Module):
    """transformers' GPT-2 Conv1D: y = x @ weight + bias, weight (in, out)."""

    def __init__(self, nf: int, nx: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(nx, nf) / math.sqrt(nx))
        self.bias = nn.Parameter(torch.randn(nf) * 0.1)

    def forward(self, x: Tensor) -> Tensor:
        return x @ self.weight + self.bias


class GPT2Style(Fused):
    def __init__(self, C: int, H: int) -> None:
        super().__init__(C, H)
        self.c_attn, self.c_proj = Conv1D(3 * C, C), Conv1D(C, C)


class Wrapped(nn.Module):
    """A wrapper with one child that holds the attention (a block's `attn`)."""

    def __init__(self, C: int, H: int) -> None:
        super().__init__()
        self.attn = Fused(C, H)
        self.drop = nn.Dropout(0.0)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop(self.attn(x))  # type: ignore[no-any-return]


class Multihead(nn.Module):
    """torch.nn.MultiheadAttention behind a forward(x)."""

    def __init__(self, C: int, H: int) -> None:
        super().__init__()
        _refuse(C, H)
        self.mha = nn.MultiheadAttention(C, H, batch_first=True)

    def forward(self, x: Tensor) -> Tensor:
        T = x.size(1)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        return self.mha(x, x, x, attn_mask=mask, need_weights=False)[0]  # type: ignore[no-any-return]


MODULES: dict[str, tuple[Any, str]] = {
    "llama names": (Separate, "q_proj, k_proj, v_proj, o_proj (separate q, k, v)"),
    "query/key/value/out_proj": (lambda C, H: Separate(C, H, ("query", "key", "value",
                                                               "out_proj")), "query, key"),
    "wq/wk/wv/wo, no biases": (lambda C, H: Separate(C, H, ("wq", "wk", "wv", "wo"),
                                                     bias=False), "wq, wk, wv, wo"),
    "to_q/to_out[0]": (ToOut, "to_q, to_k, to_v, to_out"),
    "nanoGPT c_attn": (Fused, "c_attn (fused q|k|v), c_proj"),
    "GPT-2 Conv1D": (GPT2Style, "c_attn (fused q|k|v as Conv1D, transposed), c_proj"),
    "GPT-NeoX query_key_value": (lambda C, H: Fused(C, H, "query_key_value", "dense",
                                                    neox=True),
                                 "query_key_value (fused per head, q k v interleaved"),
    "timm qkv/proj": (lambda C, H: Fused(C, H, "qkv", "proj"), "qkv (fused q|k|v), proj"),
    "a wrapper's one child": (Wrapped, "attn.c_attn (fused q|k|v), attn.c_proj"),
    "nn.MultiheadAttention": (Multihead, "mha.in_proj_weight (fused q|k|v), mha.out_proj"),
}


@pytest.mark.parametrize("case", list(MODULES))
def test_weights_found_by_name_run_the_oracle_and_its_gradients(case: str) -> None:
    build, described = MODULES[case]
    report = attnspec.verify(SimpleNamespace(__name__=case, build=build),
                             only=["oracle", "oracle_grad"], max_examples=10, seed=0,
                             database=False)
    assert report.ok and report.status == "pass", report.summary()
    weights = report.header["weights"]
    assert weights["source"] == "found by name" and described in weights["found"], weights
    assert report.conclusion == "conforms"


def test_found_weights_catch_what_exports_catch() -> None:
    """The oracle on found weights has its power where the probe did not look: a module wrong
    only past T = 16 passes the probe (T = 1 and 7) and fails the oracle."""

    class LongRowsOnly(Fused):
        def forward(self, x: Tensor) -> Tensor:
            out = super().forward(x)
            return out * 1.01 if x.size(1) > 16 else out  # wrong past T = 16 only

    report = attnspec.verify(SimpleNamespace(__name__="long", build=LongRowsOnly),
                             only="oracle", max_examples=30, seed=0, database=False)
    assert report.result("oracle").verdict == "fail", report.summary()
    assert report.header["weights"]["source"] == "found by name"


def test_a_guess_that_does_not_reproduce_the_module_is_dropped_and_said() -> None:
    class SwappedKV(Fused):  # c_attn read as [q|v|k]: v and o wrong at T = 1 already
        def forward(self, x: Tensor) -> Tensor:
            C = x.size(-1)
            q, v, k = self.c_attn(x).split(C, dim=2)
            return self.c_proj(_attend(q, k, v, self.H))  # type: ignore[no-any-return]

    report = attnspec.verify(SimpleNamespace(__name__="swapped", build=SwappedKV),
                             only="oracle", max_examples=4, seed=0, database=False)
    assert report.status == "incomplete", report.summary()
    message = report.result("oracle").message
    assert "c_attn (fused q|k|v), c_proj: off by" in message and "at T = 1" in message, message
    assert report.header["weights"]["source"] == "none"


def test_candidates_are_views_of_the_parameters_and_stable_by_id() -> None:
    spec = attnspec.AttentionSpec(12, 3)
    module = Fused(12, 3, neox=True)
    found = {c.id: c for c in candidates(module, spec)}
    assert list(found) == ["fused-split:c_attn,c_proj", "fused-grouped:c_attn,c_proj"]
    weights = found["fused-grouped:c_attn,c_proj"].weights()
    assert weights["q_weight"].shape == (12, 12) and weights["q_weight"].requires_grad
    # head h's q rows are rows 3·D·h .. of the fused weight (D = 4): q k v per head
    assert torch.equal(weights["q_weight"][4:8], module.c_attn.weight[12:16])
    assert torch.equal(weights["k_weight"][:4], module.c_attn.weight[4:8])
    assert candidates(nn.Linear(12, 12), spec) == []


def test_grouped_query_weights_are_found_for_a_protocol_2_subject() -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent / "broken"))
    from _spec_common import SpecAttn

    subject = SimpleNamespace(__name__="gqa", PROTOCOL=2, build=SpecAttn,
                              VARIANTS={"n_kv_head": "any", "qk_norm": "any"})
    report = attnspec.verify(subject, only=["oracle", "gqa_grouping"], max_examples=10,
                             seed=0, database=False)
    assert report.ok, report.summary()
    assert report.header["weights"]["found"].startswith("q, k, v, o (separate q, k, v)")
