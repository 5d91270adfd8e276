"""diagnose: an oracle failure's message names the mistake its output is, tested on the broken
twins (one small float32 example each, in this process), and says so when none fits."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

import attnspec
from attnspec import ALiBi, AttentionSpec, RoPE
from attnspec.properties.diagnose import diagnose
from attnspec.reference.inference import padded_attention
from attnspec.reference.variants import spec_attention

BROKEN = Path(__file__).parent / "broken"


def _load(name: str) -> ModuleType:
    sys.path.insert(0, str(BROKEN))
    try:
        found = importlib.util.spec_from_file_location(f"diagnose_{name}", BROKEN / f"{name}.py")
        assert found is not None and found.loader is not None
        module = importlib.util.module_from_spec(found)
        found.loader.exec_module(module)
    finally:
        sys.path.remove(str(BROKEN))
    return module


def _run(name: str, spec: AttentionSpec | None, dtype: torch.dtype = torch.float32,
         ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor], AttentionSpec]:
    """The twin's output on a (2, 6, C) input and its exported weights."""
    twin = _load(name)
    torch.manual_seed(0)
    module = twin.build(spec) if spec is not None else twin.build(16, 2)
    module = module.to(dtype).eval()
    x = torch.randn(2, 6, spec.n_embd if spec is not None else 16, dtype=dtype)
    with torch.no_grad():
        out = module(x)
    weights = {k: v.detach() for k, v in twin.export_weights(module).items()}
    return out, x, weights, spec or AttentionSpec(16, 2)


def _diagnosis(name: str, spec: AttentionSpec | None, dtype: torch.dtype = torch.float32) -> str:
    out, x, weights, spec = _run(name, spec, dtype)
    golden = spec_attention(x.double(), {k: v.double() for k, v in weights.items()}, spec)
    assert float((out.double() - golden).abs().max()) > 1e-3, "the twin is not broken here"
    return diagnose(out, x, weights, spec, str(dtype).removeprefix("torch."),
                    float(golden.abs().max()))


TWINS = [  # (twin, spec (None: its build(16, 2)), what the diagnosis must say)
    ("no_scale", None, "the score scale 1 (declared 0.3536 = 1/sqrt(D)) explains"),
    ("scale_by_head_dim", None, "the score scale 0.125 = 1/D (declared 0.3536 = 1/sqrt(D))"),
    ("scale_by_sqrt_n_embd", None, "the score scale 0.25 = 1/sqrt(C) (declared"),
    ("scale_by_sequence_length", None, "the score scale 0.4082 = 1/sqrt(T) (declared"),
    ("scale_applied_twice", AttentionSpec(16, 2, scale=0.3),
     "the score scale 0.09 = the declared scale squared (declared 0.3)"),
    ("rope_halves_for_pairs", AttentionSpec(32, 4, positions=RoPE(interleaved=True)),
     "rotate-half RoPE, rotating channels i and i + rotary_dim / 2 (GPT-NeoX, Llama) "
     "(declared: interleaved RoPE) explains"),
    ("rope_theta_hardcoded", AttentionSpec(32, 4, positions=RoPE(theta=500000.0)),
     "RoPE theta=10000 (declared 500000) explains"),
    ("window_one_too_wide", AttentionSpec(16, 2, window=3), "a window of W + 1 = 4 keys"),
    ("window_one_too_narrow", AttentionSpec(16, 2, window=3), "a window of W - 1 = 2 keys"),
    ("softcap_dropped", AttentionSpec(16, 2, softcap=1.0), "no soft cap (declared softcap=1)"),
    ("softmax_over_queries", None, "softmax over the query axis (dim=-2) instead of the keys"),
    ("mask_after_softmax", None, "softmax over every key, masked after it"),
    ("gqa_tiled", AttentionSpec(16, 4, n_kv_head=2), "keys and values tiled: query head h "
                                                     "reads kv head h % G"),
    ("gqa_values_tiled", AttentionSpec(16, 4, n_kv_head=2),
     "values tiled (h % G) while keys are grouped"),
    ("gqa_keys_tiled", AttentionSpec(16, 4, n_kv_head=2),
     "keys tiled (h % G) while values are grouped"),
    ("fused_split_q_v_k", None, "keys and values swapped (k_weight used as v, v_weight as k)"),
    ("export_swaps_q_k", None, "queries and keys swapped"),
    ("biases_ignored_in_forward", None, "the projections' biases never added"),
    ("export_transposed_weights", None, "export_weights handing out weight.T"),
]


@pytest.mark.parametrize(("name", "spec", "says"), TWINS, ids=[t[0] for t in TWINS])
def test_each_twin_is_diagnosed(name: str, spec: AttentionSpec | None, says: str) -> None:
    sentence = _diagnosis(name, spec)
    assert sentence.startswith("Diagnosis: ") and says in sentence, sentence
    assert "explains the output" in sentence, sentence


def test_with_one_key_per_query_the_keys_sharing_is_not_claimed() -> None:
    twin = _load("gqa_tiled")
    spec = AttentionSpec(16, 4, n_kv_head=2)
    torch.manual_seed(0)
    module = twin.build(spec).eval()
    x = torch.randn(3, 1, 16)
    with torch.no_grad():
        out = module(x)
    weights = {k: v.detach() for k, v in twin.export_weights(module).items()}
    sentence = diagnose(out, x, weights, spec, "float32", 1.0)
    assert "values tiled (h % G), the kv head the keys come from not showing" in sentence, \
        sentence


def test_a_diagnosis_holds_in_bfloat16() -> None:
    sentence = _diagnosis("scale_by_head_dim", None, torch.bfloat16)
    assert "the score scale 0.125 = 1/D" in sentence, sentence


@pytest.mark.parametrize("name", ["merge_without_transpose", "head_split_interleaved"])
def test_a_twin_no_hypothesis_fits_is_said_to_fit_none(name: str) -> None:
    sentence = _diagnosis(name, None)
    assert sentence.startswith("Diagnosis: none of these explains the output: scale 1/D, "), \
        sentence
    assert "q/k swapped" in sentence and "softmax over queries" in sentence, sentence


def test_a_scale_no_form_names_is_reported_as_the_nearest_fit() -> None:
    class OddScale(_load("_spec_common").SpecAttn):  # type: ignore[misc, name-defined]
        def scale(self) -> float:
            return 0.2 * (1 + math.sin(1.0) / 50)  # 0.2034: near, yet not, any listed form

    spec = AttentionSpec(16, 2, positions=ALiBi())
    torch.manual_seed(0)
    module = OddScale(spec).eval()
    x = torch.randn(2, 6, 16)
    weights = {k: v.detach() for k, v in _load("_spec_common").export_weights(module).items()}
    with torch.no_grad():
        out = module(x)
    sentence = diagnose(out, x, weights, spec, "float32", 1.0)
    assert "none of these explains the output" in sentence, sentence
    fitted = float(sentence.split("a score scale of about ")[1].split(" ")[0])
    assert abs(fitted / 0.2034 - 1) < 0.01, sentence


def test_a_path_reference_is_used_for_the_hypotheses() -> None:
    # The padded path: the twin's padded hook, judged with padded_attention as the reference.
    common = _load("_spec_common")

    class Unscaled(common.SpecAttn):  # type: ignore[misc, name-defined]
        def scale(self) -> float:
            return 1.0

    spec = AttentionSpec(16, 2, positions=RoPE())
    torch.manual_seed(0)
    module = Unscaled(spec).eval()
    x = torch.randn(2, 6, 16)
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, :2] = False  # row 1 left-padded
    with torch.no_grad():
        out = module.padded(x, mask)
    weights = {k: v.detach() for k, v in common.export_weights(module).items()}

    def reference(s: AttentionSpec, w: dict[str, torch.Tensor]) -> torch.Tensor:
        dt = next(iter(w.values())).dtype
        return padded_attention(x.to(dt), w, s, mask)

    sentence = diagnose(out, x, weights, spec, "float32", 1.0, reference)
    assert "the score scale 1 (declared 0.3536 = 1/sqrt(D)) explains" in sentence, sentence
    # Without the path's reference, the plain forward explains nothing of a padded output.
    assert "none of these" in diagnose(out, x, weights, spec, "float32", 1.0)


def test_a_non_finite_output_is_not_diagnosed() -> None:
    out, x, weights, spec = _run("no_scale", None)
    out[0, 0, 0] = float("nan")
    assert "not finite" in diagnose(out, x, weights, spec, "float32", 1.0)


def test_a_diagnosis_is_cheap(monkeypatch: pytest.MonkeyPatch) -> None:
    # A window, RoPE and GQA spec lists the most hypotheses; none fits an unrelated output, so
    # every one runs, then the scale fit: about 40 small float64 forwards, a bound kept here.
    import attnspec.properties.diagnose as module

    forwards = []

    def counted(*args: object, **kwargs: object) -> torch.Tensor:
        forwards.append(1)
        return spec_attention(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(module, "spec_attention", counted)
    spec = AttentionSpec(32, 8, n_kv_head=4, window=3, positions=RoPE(fraction=0.5))
    x = torch.randn(2, 8, 32)
    weights = {k: torch.randn(s) / math.sqrt(s[-1]) for k, s in spec.weight_shapes().items()}
    sentence = diagnose(torch.randn(2, 8, 32), x, weights, spec, "float32", 1.0)
    assert "none of these" in sentence and len(forwards) <= 40, (len(forwards), sentence)
    forwards.clear()
    explained = spec_attention(x, weights, dataclasses.replace(spec, scale=1.0))
    assert "the score scale 1 " in diagnose(explained, x, weights, spec, "float32", 1.0)
    assert len(forwards) <= 8, len(forwards)  # the commonest mistakes are tried first


def test_the_report_message_carries_the_diagnosis() -> None:
    report = attnspec.verify(str(BROKEN / "scale_by_head_dim.py"), only="oracle", max_examples=5,
                             database=False, isolate=False)
    result = report.result("oracle")
    assert result.verdict == "fail", report.summary()
    assert "Diagnosis: the score scale " in (result.message or ""), result.message
    assert "= 1/D (declared " in (result.message or ""), result.message


def test_a_diagnosis_reads_the_specs_norms_and_slopes() -> None:
    """The wrong-mask hypotheses run the reference's own projection (q/k norms, RoPE) and the
    spec's ALiBi slopes: a mask one position off is named under an RMS q/k norm with weights
    far from 1 and slopes of the subject's own (before, the norms and slopes were left out, and
    nothing was said to explain it)."""
    from attnspec import QKNorm

    spec = AttentionSpec(16, 2, qk_norm=QKNorm(), positions=ALiBi(slopes=(0.5, 0.03)),
                         bias=False)
    gen = torch.Generator().manual_seed(0)
    w = {k: torch.randn(shape, generator=gen, dtype=torch.float64) * 0.3
         for k, shape in spec.weight_shapes().items() if not k.endswith("_bias")}
    w["q_norm_weight"] = 1 + 2 * torch.rand(8, generator=gen, dtype=torch.float64)
    w["k_norm_weight"] = 0.2 + torch.rand(8, generator=gen, dtype=torch.float64)
    x = torch.randn(2, 6, 16, generator=gen, dtype=torch.float64)

    def heads(t: torch.Tensor, norm: torch.Tensor | None) -> torch.Tensor:  # (B, H, T, D)
        t = t.view(2, 6, 2, 8)
        if norm is not None:
            t = t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * norm
        return t.transpose(1, 2)

    # The subject, written out: RMS-normed heads, its slopes, and tril(diagonal=1)
    q = heads(x @ w["q_weight"].T, w["q_norm_weight"])
    k = heads(x @ w["k_weight"].T, w["k_norm_weight"])
    v = heads(x @ w["v_weight"].T, None)
    i, j = torch.arange(6)[:, None], torch.arange(6)[None, :]
    slopes = torch.tensor([0.5, 0.03], dtype=torch.float64)[:, None, None]
    s = (q @ k.transpose(-2, -1)) / math.sqrt(8) - slopes * (i - j)
    y = torch.softmax(s.masked_fill(j > i + 1, float("-inf")), -1) @ v
    out = y.transpose(1, 2).reshape(2, 6, 16) @ w["o_weight"].T
    golden = spec_attention(x, w, spec)
    assert float((out - golden).abs().max()) > 1e-2  # the subject is wrong here
    sentence = diagnose(out.float(), x.float(), {k: t.float() for k, t in w.items()}, spec,
                        "float32", float(golden.abs().max()))
    assert "each query also sees the next key" in sentence, sentence
