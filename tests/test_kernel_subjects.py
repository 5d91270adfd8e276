"""The kernel subjects (PROTOCOL = "kernel") against an independent float64 formula written here:
einsum scores, an explicit keep-mask built from the subject's declared corner and window, and a
softmax; o, the LSE in its declared base and layout, masked rows, gradients. The adapters run
through the plain-torch stand-ins in tests/kernels/standins (put on sys.path per test), and must
fail at load with a clear message where their library is absent."""

from __future__ import annotations

import importlib
import math
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

STANDINS = Path(__file__).parent / "kernels" / "standins"
LIBRARIES = ("flash_attn", "xformers", "flashinfer", "_standin_dense")
ADAPTERS = ("flash_attn", "flash_attn_varlen", "flash_attn_kvcache", "xformers",
            "xformers_bottom_right", "flashinfer", "flashinfer_paged", "sglang_prefill",
            "sglang_extend", "sglang_decode", "vllm_prefix_prefill", "vllm_unified",
            "triton_tutorial")
BUILTINS = ("kernel_sdpa", "kernel_sdpa_lower_right", "kernel_flex", "kernel_blockwise")

# (B, H, G, Tq, Tk, D): B, H, Tq, Tk, D pairwise distinct, Tq < Tk and Tq > Tk, GQA, and lengths
# off the blockwise kernel's tile grid.
SHAPES = [(2, 6, 3, 5, 11, 8), (3, 4, 2, 13, 7, 16), (2, 3, 1, 37, 70, 5)]

# Each case: the protocol keywords (window as (left, right), re-encoded per WINDOW) and causal.
CASES: list[dict[str, Any]] = [
    {"causal": True},
    {"causal": False},
    {"causal": True, "scale": 0.3},
    {"causal": True, "window": (3, -1)},
    {"causal": False, "window": (2, 1)},
    {"causal": True, "softcap": 1.5},
    {"causal": True, "alibi": True},
    {"causal": False, "alibi": True},
    {"causal": True, "sinks": True},
]
_NEEDS = {"scale": "scale", "softcap": "softcap", "alibi": "alibi", "sinks": "sinks"}


def _ours(name: str) -> bool:
    root = name.split(".")[0]
    return root in LIBRARIES or any(name == f"attnspec.subjects.{a}" for a in ADAPTERS)


@pytest.fixture
def fresh_modules() -> Iterator[None]:
    """No library, stand-in or adapter module cached before or after the test."""
    saved = {name: module for name, module in sys.modules.items() if _ours(name)}
    for name in saved:
        del sys.modules[name]
    yield
    for name in [name for name in sys.modules if _ours(name)]:
        del sys.modules[name]
    sys.modules.update(saved)


@pytest.fixture
def standins(fresh_modules: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(STANDINS))


def load(name: str) -> types.ModuleType:
    return importlib.import_module(f"attnspec.subjects.{name}")


# ---------------------------------------------------------------------------------------------
# The independent formula (float64, BHSD)


def keep_mask(Tq: int, Tk: int, corner: str, causal: bool, window: tuple[int, int] | None,
              ) -> torch.Tensor:
    i = torch.arange(Tq)[:, None] + (Tk - Tq if corner == "bottom_right" else 0)
    j = torch.arange(Tk)[None, :]
    keep = torch.ones(Tq, Tk, dtype=torch.bool)
    if causal:
        keep &= j <= i
    if window is not None:
        left, right = window
        if left >= 0:
            keep &= j >= i - left
        if right >= 0 and not causal:
            keep &= j <= i + right
    return keep


def formula(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, corner: str, causal: bool,
            scale: float | None = None, window: tuple[int, int] | None = None,
            softcap: float | None = None, alibi: torch.Tensor | None = None,
            sinks: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """o (B, H, Tq, D) and natural-log lse (B, H, Tq); a row with no visible key (and no sink)
    gives o 0 and lse -inf."""
    q, k, v = q.double(), k.double(), v.double()
    B, H, Tq, D = q.shape
    G, Tk = k.shape[1], k.shape[2]
    k, v = k.repeat_interleave(H // G, 1), v.repeat_interleave(H // G, 1)
    s = torch.einsum("bhqd,bhkd->bhqk", q, k) * (1 / math.sqrt(D) if scale is None else scale)
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(Tq)[:, None] + (Tk - Tq if corner == "bottom_right" else 0)
    if alibi is not None:
        s = s - alibi.double()[:, None, None] * (i - torch.arange(Tk)[None, :]).abs()
    s = s.masked_fill(~keep_mask(Tq, Tk, corner, causal, window), -math.inf)
    if sinks is not None:
        s = torch.cat([s, sinks.double()[None, :, None, None].expand(B, H, Tq, 1)], dim=-1)
        v = torch.cat([v, v.new_zeros(B, H, 1, v.size(-1))], dim=2)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.masked_fill(torch.isneginf(lse), 0)[..., None])
    return torch.einsum("bhqk,bhkd->bhqd", p, v), lse


# ---------------------------------------------------------------------------------------------
# Calling a subject in its declared layout and reading its LSE back as (B, H, Tq) natural log


def draw(shape: tuple[int, ...], seed: int) -> dict[str, torch.Tensor]:
    B, H, G, Tq, Tk, D = shape
    gen = torch.Generator().manual_seed(seed)
    return {"q": torch.randn(B, H, Tq, D, generator=gen, dtype=torch.float64) * 1.5,
            "k": torch.randn(B, G, Tk, D, generator=gen, dtype=torch.float64) * 1.5,
            "v": torch.randn(B, G, Tk, D, generator=gen, dtype=torch.float64),
            "alibi": torch.rand(H, generator=gen, dtype=torch.float64) * 0.5,
            "sinks": torch.randn(H, generator=gen, dtype=torch.float64)}


def keywords(module: types.ModuleType, case: dict[str, Any], t: dict[str, torch.Tensor],
             ) -> dict[str, Any] | None:
    """The keywords attnspec would pass, or None if the subject does not take the case."""
    features = getattr(module, "FEATURES", ())
    if not case["causal"] and "noncausal" not in features:
        return None
    kw: dict[str, Any] = {"causal": case["causal"]}
    for key, feature in _NEEDS.items():
        if key in case:
            if feature not in features:
                return None
            kw[{"alibi": "alibi_slopes"}.get(key, key)] = (
                t[key].float() if key in ("alibi", "sinks") else case[key])
    if "window" in case:
        encoding = getattr(module, "WINDOW", None)
        left, right = case["window"]
        if encoding == "pair":
            kw["window"] = (left, 0 if case["causal"] else right)
        elif encoding == "left" and case["causal"]:
            kw["window"] = left
        else:
            return None
    B, H, G, D = t["q"].size(0), t["q"].size(1), t["k"].size(1), t["q"].size(-1)
    if G < H and "gqa" not in features:
        return None
    probe = {"B": B, "H": H, "G": G, "Tq": t["q"].size(2), "Tk": t["k"].size(2), "D": D,
             "dtype": t["q"].dtype, "device": t["q"].device, "causal": case["causal"],
             "window": kw.get("window"), "softcap": case.get("softcap"),
             "alibi": "alibi" in case, "sinks": "sinks" in case}
    supports = getattr(module, "supports", None)
    if supports is not None and not supports(probe):
        return None
    return kw


def call(module: types.ModuleType, t: dict[str, torch.Tensor], kw: dict[str, Any],
         ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """o as (B, H, Tq, D) and the LSE as (B, H, Tq) natural log (None where LSE is None)."""
    q, k, v = t["q"], t["k"], t["v"]
    layout = module.LAYOUT
    if layout == "bshd":
        q, k, v = (x.transpose(1, 2).contiguous() for x in (q, k, v))
    result = module.attention(q, k, v, **kw)
    o, lse = result if isinstance(result, tuple) else (result, None)
    assert type(o) is torch.Tensor and o.dtype == q.dtype and o.shape == q.shape[:-1] + (
        v.size(-1),), f"{module.__name__}: o {tuple(o.shape)} {o.dtype} for q {tuple(q.shape)}"
    if layout == "bshd":
        o = o.transpose(1, 2)
    if module.LSE is None:
        assert lse is None
        return o, None
    assert lse is not None
    if module.LSE_LAYOUT == "bsh":
        lse = lse.transpose(1, 2)
    assert lse.shape == t["q"].shape[:-1], f"{module.__name__}: lse {tuple(lse.shape)}"
    return o, lse * (math.log(2) if module.LSE == "base2" else 1.0)


def expected(module: types.ModuleType, t: dict[str, torch.Tensor], kw: dict[str, Any],
             corner: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    window = kw.get("window")
    if isinstance(window, int):  # "left": causal only
        window = (window, 0)
    return formula(t["q"], t["k"], t["v"], corner=corner or module.CAUSAL, causal=kw["causal"],
                   scale=kw.get("scale"), window=window, softcap=kw.get("softcap"),
                   alibi=kw.get("alibi_slopes"), sinks=kw.get("sinks"))


def lse_tolerance(module: types.ModuleType) -> float:
    # FlashInfer's LSE is float32 whatever the inputs; the rest keep float64.
    return 1e-5 if "flashinfer" in module.__name__ else 1e-9


def check_against_formula(module: types.ModuleType, seeds: int = 1) -> int:
    """Every SHAPES x CASES the subject takes; returns how many ran."""
    ran = 0
    for n, shape in enumerate(SHAPES):
        t = draw(shape, seed=n)
        for case in CASES:
            kw = keywords(module, case, t)
            if kw is None:
                continue
            o, lse = call(module, t, kw)
            o_ref, lse_ref = expected(module, t, kw)
            where = f"{module.__name__} {shape} {kw}"
            masked = torch.isneginf(lse_ref)
            if module.MASKED_ROWS == "undefined":
                assert not masked.any(), f"{where}: supports() let a masked row through"
            torch.testing.assert_close(o, o_ref.to(o.dtype), atol=1e-9, rtol=1e-9, msg=where)
            assert torch.equal(o[masked], torch.zeros_like(o[masked])), where
            if lse is not None:
                assert torch.equal(torch.isneginf(lse), masked), f"{where}: -inf rows differ"
                tol = lse_tolerance(module)
                torch.testing.assert_close(lse[~masked], lse_ref[~masked].to(lse.dtype),
                                           atol=tol, rtol=tol, msg=where)
            ran += 1
    return ran


def corners_differ(module: types.ModuleType) -> None:
    """The shapes tell the corners apart: against the other corner's formula the subject fails
    (so the comparison above could fail)."""
    other = {"top_left": "bottom_right", "bottom_right": "top_left"}[module.CAUSAL]
    t = draw(SHAPES[0], seed=0)
    kw = keywords(module, {"causal": True}, t)
    assert kw is not None
    o, _ = call(module, t, kw)
    o_other, _ = expected(module, t, kw, corner=other)
    assert (o - o_other.to(o.dtype)).abs().max() > 1e-3


# ---------------------------------------------------------------------------------------------
# Built-ins


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_matches_formula(name: str) -> None:
    module = load(name)
    assert module.PROTOCOL == "kernel"
    ran = check_against_formula(module)
    # every case its FEATURES declare: the plain SDPA ones take 3 of the 9 per shape
    assert ran >= {"kernel_sdpa": 9, "kernel_sdpa_lower_right": 9}.get(name, 27), ran
    corners_differ(module)


@pytest.mark.parametrize("blocks", [(16, 16), (64, 16), (16, 64)])
def test_blockwise_knobs_match_formula(blocks: tuple[int, int]) -> None:
    module = load("kernel_blockwise")
    assert blocks[0] in module.KNOBS["block_q"] and blocks[1] in module.KNOBS["block_k"]
    t = draw(SHAPES[2], seed=5)  # Tq 37, Tk 70: tail tiles on both axes
    for case in ({"causal": True, "window": (20, 0)}, {"causal": False}, {"causal": True}):
        kw = keywords(module, case, t)
        assert kw is not None
        o, lse = module.attention(t["q"], t["k"], t["v"], block_q=blocks[0], block_k=blocks[1],
                                  **kw)
        o_ref, lse_ref = expected(module, t, kw)
        torch.testing.assert_close(o, o_ref, atol=1e-10, rtol=1e-10)
        torch.testing.assert_close(lse, lse_ref, atol=1e-10, rtol=1e-10)


def test_blockwise_window_edges_on_and_off_the_tile_grid() -> None:
    """Left bounds (causal) and right bounds (not causal) 14..31: the first and last
    key tiles a window needs land on, before and after tile edges."""
    module = load("kernel_blockwise")
    t = draw((1, 2, 1, 37, 70, 3), seed=6)
    for bound in range(14, 32):  # 18 bounds: every residue mod 16
        for kw in ({"causal": True, "window": (bound, 0)},
                   {"causal": False, "window": (-1, bound)}):
            o, lse = module.attention(t["q"], t["k"], t["v"], block_q=16, block_k=16, **kw)
            o_ref, lse_ref = expected(module, t, kw)
            torch.testing.assert_close(o, o_ref, atol=1e-10, rtol=1e-10, msg=str(kw))
            torch.testing.assert_close(lse, lse_ref, atol=1e-10, rtol=1e-10, msg=str(kw))


def test_blockwise_gradients_match_formula() -> None:
    """dq, dk, dv (and d sinks) through the tiles, masked rows (Tq > Tk) included, against
    autograd through the formula; a loss on the LSE alone gives dv exactly 0."""
    module = load("kernel_blockwise")
    t = draw(SHAPES[1], seed=3)  # Tq 13 > Tk 7: six rows see no key
    for case in ({"causal": True}, {"causal": True, "softcap": 1.5, "alibi": True},
                 {"causal": False, "window": (2, 1)}, {"causal": True, "sinks": True}):
        kw = keywords(module, case, t)
        assert kw is not None
        leaves = {n: t[n].clone().requires_grad_() for n in "qkv"}
        if "sinks" in kw:
            kw["sinks"] = kw["sinks"].double().requires_grad_()
        o, lse = module.attention(*leaves.values(), block_q=16, block_k=16, **kw)
        weight = torch.randn_like(o)
        grads = torch.autograd.grad((o * weight).sum() + lse.sum(),
                                    [*leaves.values(), *([kw["sinks"]] if "sinks" in kw else [])])
        o_ref, lse_ref = formula(*leaves.values(), corner=module.CAUSAL, causal=kw["causal"],
                                 window=kw.get("window"), softcap=kw.get("softcap"),
                                 alibi=kw.get("alibi_slopes"), sinks=kw.get("sinks"))
        finite = torch.isfinite(lse_ref)
        ref = torch.autograd.grad((o_ref * weight).sum() + lse_ref[finite].sum(),
                                  [*leaves.values(), *([kw["sinks"]] if "sinks" in kw else [])])
        for got, want in zip(grads, ref, strict=True):
            torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10, msg=str(case))
        masked = ~finite
        if masked.any():
            assert torch.equal(grads[0][masked], torch.zeros_like(grads[0][masked]))
    leaves = {n: t[n].clone().requires_grad_() for n in "qkv"}
    _, lse = module.attention(*leaves.values(), causal=True)
    # v is no part of the LSE's graph: autograd must be allowed that (materialize_grads).
    (dv,) = torch.autograd.grad(lse[torch.isfinite(lse)].sum(), leaves["v"], allow_unused=True,
                                materialize_grads=True)
    assert torch.equal(dv, torch.zeros_like(dv))


def test_blockwise_empty_keys_give_zero_and_neg_inf() -> None:
    module = load("kernel_blockwise")
    q = torch.randn(2, 3, 4, 5, requires_grad=True)
    k = torch.randn(2, 1, 0, 5, requires_grad=True)
    o, lse = module.attention(q, k, k, causal=True)
    assert torch.equal(o, torch.zeros_like(o)) and torch.isneginf(lse).all()
    (dq,) = torch.autograd.grad(o.sum(), q)
    assert torch.equal(dq, torch.zeros_like(dq))


@pytest.mark.parametrize("name", ["kernel_sdpa_lower_right", "kernel_blockwise"])
def test_masked_rows_are_zero_with_zero_gradients(name: str) -> None:
    """MASKED_ROWS = "zero" as measured: the first Tq - Tk rows at the bottom-right corner."""
    module = load(name)
    q = torch.randn(2, 3, 9, 4, dtype=torch.float32, requires_grad=True)
    k = torch.randn(2, 3, 5, 4, dtype=torch.float32, requires_grad=True)
    result = module.attention(q, k, k, causal=True)
    o = result[0] if isinstance(result, tuple) else result
    assert torch.equal(o[:, :, :4], torch.zeros_like(o[:, :, :4]))
    assert o[:, :, 4:].abs().min() > 0
    (dq,) = torch.autograd.grad((o * torch.randn_like(o)).sum(), q)
    assert torch.equal(dq[:, :, :4], torch.zeros_like(dq[:, :, :4]))


def test_flex_refuses_gradients_on_cpu_with_a_clear_message() -> None:
    module = load("kernel_flex")
    assert module.BACKWARD is False
    q = torch.randn(1, 2, 5, 4, requires_grad=True)
    with pytest.raises(NotImplementedError, match="no CPU backward"):
        module.attention(q, q, q, causal=True)
    with torch.no_grad():
        o, lse = module.attention(q, q, q, causal=True)
    assert o.shape == q.shape and lse.shape == q.shape[:-1]
    assert not module.supports({"Tq": 3, "Tk": 0}) and module.supports({"Tq": 3, "Tk": 2})


def test_flex_at_lengths_off_its_128_block() -> None:
    """Lengths around flex's 128 sparse block (its GPU bug class): the block mask is built per
    call at the exact lengths, and eager flex applies it elementwise."""
    module = load("kernel_flex")
    for shape, kw in (((1, 2, 2, 129, 200, 8), {"causal": True, "window": (100, 0)}),
                      ((1, 2, 1, 200, 127, 8), {"causal": True})):
        t = draw(shape, seed=8)
        o, lse = module.attention(t["q"], t["k"], t["v"], **kw)
        o_ref, lse_ref = expected(module, t, kw)
        torch.testing.assert_close(o, o_ref, atol=1e-10, rtol=1e-10)
        assert torch.equal(torch.isneginf(lse), torch.isneginf(lse_ref))


@pytest.mark.parametrize("name", BUILTINS)
def test_bad_calls_say_what_and_why(name: str) -> None:
    module = load(name)
    q, k = torch.randn(2, 6, 5, 8), torch.randn(2, 4, 5, 8)  # H = 6 is no multiple of G = 4
    with pytest.raises(ValueError, match=r"H=6 query heads is not a positive multiple of G=4"):
        module.attention(q, k, k, causal=True)


# ---------------------------------------------------------------------------------------------
# Adapters through the stand-ins


@pytest.mark.parametrize("name", ["flash_attn", "xformers", "xformers_bottom_right",
                                  "flashinfer", "flashinfer_paged"])
def test_adapter_matches_formula(standins: None, name: str) -> None:
    module = load(name)
    assert module.PROTOCOL == "kernel"
    ran = check_against_formula(module)
    assert ran >= 9, ran
    corners_differ(module)


def test_flash_attn_normalises_fa2_lse_habits(standins: None) -> None:
    """The stand-in gives FA2's +inf LSE for empty rows and its causal-ALiBi row offset; the
    adapter must hand the protocol's values on (and without the correction they differ)."""
    module = load("flash_attn")
    raw = importlib.import_module("flash_attn")
    t = draw(SHAPES[1], seed=1)  # Tq > Tk: rows with no key
    q, k, v = (t[n].transpose(1, 2).contiguous() for n in "qkv")
    slopes = t["alibi"].float()
    _, lse_raw, _ = raw.flash_attn_func(q, k, v, causal=True, alibi_slopes=slopes,
                                        return_attn_probs=True)
    _, lse = module.attention(q, k, v, causal=True, alibi_slopes=slopes)
    _, lse_ref = formula(t["q"], t["k"], t["v"], corner="bottom_right", causal=True,
                         alibi=slopes)
    finite = torch.isfinite(lse_ref)
    assert torch.isposinf(lse_raw[~finite]).all() and torch.isneginf(lse[~finite]).all()
    torch.testing.assert_close(lse[finite], lse_ref[finite], atol=1e-9, rtol=1e-9)
    assert (lse_raw[finite] - lse_ref[finite]).abs().max() > 1e-2


def test_flash_attn_varlen_matches_formula_per_sequence(standins: None) -> None:
    module = load("flash_attn_varlen")
    assert module.LAYOUT == "varlen" and module.LSE_LAYOUT == "hs"
    H, G, D = 4, 2, 6
    lengths = [(5, 9), (0, 3), (7, 4), (3, 0), (11, 11)]  # zero-length on either side
    gen = torch.Generator().manual_seed(7)
    seqs = [(torch.randn(1, H, tq, D, generator=gen, dtype=torch.float64),
             torch.randn(1, G, tk, D, generator=gen, dtype=torch.float64),
             torch.randn(1, G, tk, D, generator=gen, dtype=torch.float64)) for tq, tk in lengths]
    packed = [torch.cat([s[n][0].transpose(0, 1) for s in seqs]) for n in range(3)]
    cu = [torch.tensor([0, *torch.tensor([x[n] for x in lengths]).cumsum(0).tolist()],
                       dtype=torch.int32) for n in range(2)]
    slopes = torch.rand(H, generator=gen) * 0.5
    for kw in ({"causal": True}, {"causal": False, "window": (2, 1)},
               {"causal": True, "alibi_slopes": slopes, "softcap": 2.0}):
        o, lse = module.attention(*packed, cu_seqlens_q=cu[0], cu_seqlens_k=cu[1],
                                  max_seqlen_q=11, max_seqlen_k=11, **kw)
        assert o.shape == packed[0].shape and lse.shape == (H, packed[0].size(0))
        start = 0
        for (q, k, v), (tq, _) in zip(seqs, lengths, strict=True):
            o_ref, lse_ref = formula(q, k, v, corner="bottom_right", causal=kw["causal"],
                                     window=kw.get("window"), softcap=kw.get("softcap"),
                                     alibi=kw.get("alibi_slopes"))
            piece, piece_lse = o[start:start + tq].transpose(0, 1)[None], lse[:, start:start + tq]
            torch.testing.assert_close(piece, o_ref, atol=1e-9, rtol=1e-9, msg=str(kw))
            finite = torch.isfinite(lse_ref[0])
            assert torch.equal(torch.isneginf(piece_lse), ~finite)
            torch.testing.assert_close(piece_lse[finite], lse_ref[0][finite], atol=1e-9,
                                       rtol=1e-9)
            start += tq


def test_xformers_gradients_through_the_autograd_path(standins: None) -> None:
    """With grads wanted the GQA call goes 4-D (the stand-in, like xformers, refuses 5-D
    backward) and dq, dk, dv match the formula's."""
    module = load("xformers_bottom_right")
    t = draw(SHAPES[0], seed=2)  # G = 3 < H = 6, Tq 5 < Tk 11
    leaves = {n: t[n].transpose(1, 2).contiguous().requires_grad_() for n in "qkv"}
    o, _ = module.attention(*leaves.values(), causal=True)
    weight = torch.randn_like(o)
    grads = torch.autograd.grad((o * weight).sum(), list(leaves.values()))
    bhsd = {n: x.detach().transpose(1, 2).requires_grad_() for n, x in leaves.items()}
    o_ref, _ = formula(*bhsd.values(), corner="bottom_right", causal=True)
    ref = torch.autograd.grad((o_ref.transpose(1, 2) * weight).sum(), list(bhsd.values()))
    for got, want in zip(grads, ref, strict=True):
        torch.testing.assert_close(got, want.transpose(1, 2), atol=1e-10, rtol=1e-10)


def test_xformers_bottom_right_supports_keeps_rows_defined(standins: None) -> None:
    module = load("xformers_bottom_right")
    assert not module.supports({"Tq": 9, "Tk": 4, "causal": True, "window": None})
    assert module.supports({"Tq": 9, "Tk": 4, "causal": False, "window": None})
    assert module.supports({"Tq": 4, "Tk": 9, "causal": True, "window": None})


@pytest.mark.parametrize("name", ADAPTERS)
def test_adapter_fails_at_load_without_its_library(fresh_modules: None, name: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from attnspec._errors import TargetError
    from attnspec.runner.subject import load_subject
    from attnspec.subjects._kernels import KernelUnavailable

    package = {"flash_attn_varlen": "flash_attn", "flash_attn_kvcache": "flash_attn",
               "xformers_bottom_right": "xformers",
               "flashinfer_paged": "flashinfer",
               "sglang_prefill": "sglang.kernels.ops.attention.prefill_attention",
               "sglang_extend": "sglang.kernels.ops.attention.extend_attention",
               "sglang_decode": "sglang.kernels.ops.attention.decode_attention",
               "vllm_prefix_prefill": "vllm.v1.attention.ops.prefix_prefill",
               "vllm_unified": "vllm.v1.attention.ops.triton_unified_attention",
               "triton_tutorial": "triton"}.get(name, name)
    monkeypatch.setitem(sys.modules, package, None)  # import raises ImportError
    with pytest.raises(KernelUnavailable) as raised:
        load(name)
    message = str(raised.value)
    assert f"attnspec.subjects.{name}" in message and repr(package) in message
    assert "pip install" in message
    sys.modules.pop(f"attnspec.subjects.{name}", None)
    with pytest.raises(TargetError, match=f"loading the kernel subject attnspec.subjects.{name}"):
        load_subject(f"attnspec.subjects.{name}")


@pytest.mark.parametrize("name", ["flash_attn", "xformers", "flashinfer", "flashinfer_paged"])
def test_adapter_fails_at_load_without_a_gpu(fresh_modules: None, name: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from attnspec.subjects._kernels import KernelUnavailable

    package = {"flashinfer_paged": "flashinfer"}.get(name, name)
    fake = types.ModuleType(package)  # the library, installed, but no stand-in flag
    fake.flash_attn_func = lambda *a, **k: None  # type: ignore[attr-defined]
    fake.flash_attn_varlen_func = fake.flash_attn_func  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, package, fake)
    if name == "xformers":
        monkeypatch.setitem(sys.modules, "xformers.ops", types.ModuleType("xformers.ops"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(KernelUnavailable, match="CUDA GPU.*no CUDA device"):
        load(name)


# ---------------------------------------------------------------------------------------------
# flash_attn_style


def my_flash_kernel(q, k, v, softmax_scale=None, causal=False, window_size=(-1, -1),
                    return_attn_probs=False):
    """A user's FA-style kernel: BSHD, bottom-right, (out, lse) with FA2's +inf for empty rows."""
    o, lse = formula(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                     corner="bottom_right", causal=causal, scale=softmax_scale,
                     window=tuple(window_size))
    o = o.transpose(1, 2).to(q.dtype)
    return (o, lse.masked_fill(torch.isneginf(lse), math.inf), None) if return_attn_probs else o


def test_flash_attn_style_wraps_a_user_kernel() -> None:
    from attnspec.subjects import flash_style

    namespace: dict[str, Any] = {}
    exec("from attnspec.subjects.flash_style import *", namespace)
    for constant in ("PROTOCOL", "LAYOUT", "CAUSAL", "WINDOW", "LSE", "LSE_LAYOUT",
                     "MASKED_ROWS", "FEATURES", "flash_attn_style"):
        assert constant in namespace, constant
    assert namespace["LAYOUT"] == "bshd" and namespace["CAUSAL"] == "bottom_right"

    module = types.ModuleType("user_subject")
    module.__dict__.update({k: v for k, v in namespace.items() if not k.startswith("__")})
    module.attention = flash_style.flash_attn_style(my_flash_kernel)
    module.FEATURES = ("gqa", "scale", "noncausal", "cross")
    assert check_against_formula(module) >= 12

    t = draw(SHAPES[0], seed=4)
    q, k, v = (t[n].transpose(1, 2).contiguous() for n in "qkv")
    with pytest.raises(TypeError, match="softcap.*no such parameter"):
        module.attention(q, k, v, causal=True, softcap=2.0)
    plain = flash_style.flash_attn_style(my_flash_kernel, return_lse=False)
    o = plain(q, k, v, causal=True, scale=0.2)
    o_ref, _ = formula(t["q"], t["k"], t["v"], corner="bottom_right", causal=True, scale=0.2)
    torch.testing.assert_close(o.transpose(1, 2), o_ref, atol=1e-10, rtol=1e-10)


def test_flash_attn_kvcache_appends_and_pages_through_its_stand_in(standins: None) -> None:
    """The cache adapter through a flash_attn_with_kvcache written from its docstring: pages of
    256 (FA2's size), rows of two pages and more, appends in place; a stand-in that reads its
    pages as if contiguous fails (shown by hand, 2026-12-02: index out of bounds)."""
    import attnspec

    report = attnspec.verify("attnspec.subjects.flash_attn_kvcache", only=["paged", "kv_append"],
                             profile="ci", max_examples=10, seed=0, isolate=False,
                             database=False)
    assert report.ok, report.summary()
    assert all(p.verdict == "pass" and p.reached for p in report.properties)
