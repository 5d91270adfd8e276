"""attnspec.subjects.hf, the generic transformers adapter: every model type it builds agrees
with the reference on its exported weights (and a wrong layout does not), the `hf:` TARGET
loads or is refused with its reason, `--hf-backend`, and CI's fixed share of the matrix."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import torch

pytest.importorskip("transformers")

from attnspec._errors import TargetError  # noqa: E402
from attnspec.reference.spec import AttentionSpec  # noqa: E402
from attnspec.reference.variants import spec_attention  # noqa: E402
from attnspec.runner.subject import load_subject  # noqa: E402
from attnspec.subjects import _hf_families, hf  # noqa: E402


def first_spec(model_type: str) -> AttentionSpec:
    """A spec the model type supports, from the first value of each of its VARIANTS, with
    grouped heads and a window where it varies them (so the layouts are exercised)."""
    variants = _hf_families.FAMILIES[model_type].variants
    subject = hf.subject(model_type, "eager")
    base: dict[str, Any] = {"n_embd": 32, "n_head": 4}
    for name in ("positions", "qk_norm", "sinks", "bias"):
        values = variants.get(name)
        if isinstance(values, list):
            base[name] = values[0]
    for extra in ({"n_kv_head": 2, "window": 3}, {"n_kv_head": 2}, {"window": 3}, {}):
        spec = AttentionSpec(**base | {k: v for k, v in extra.items() if k in variants})
        if subject.supports(spec):
            return spec
    raise AssertionError(f"{model_type}: no spec of its first VARIANTS is supported")


def run(model_type: str, backend: str, spec: AttentionSpec) -> tuple[Any, torch.Tensor, Any]:
    subject = hf.subject(model_type, backend)
    torch.manual_seed(0)
    module = subject.build(spec).eval().to(torch.float64)
    x = torch.randn(2, 7, spec.n_embd, dtype=torch.float64)
    with torch.no_grad():
        return subject, x, module


@pytest.mark.parametrize("model_type", hf.model_types())
def test_every_model_type_is_the_reference_on_its_exported_weights(model_type: str) -> None:
    spec = first_spec(model_type)
    subject, x, module = run(model_type, "eager", spec)
    with torch.no_grad():
        out = module(x)
        weights = {k: v.detach() for k, v in subject.export_weights(module).items()}
        expected = spec_attention(x, weights, spec)
        steps, cache = [], None
        for t in range(x.size(1)):  # decoding token by token through the model's own cache
            step, cache = subject.decode(module, x[:, t:t + 1], cache, t)
            steps.append(step)
    scale = expected.abs().max().item()
    # rotary tables are float32 in transformers whatever the dtype: float32-accurate only
    assert (out - expected).abs().max().item() <= 1e-5 * scale, (model_type, spec)
    assert (torch.cat(steps, 1) - out).abs().max().item() <= 1e-6 * scale, model_type


def test_a_wrong_fused_layout_is_seen() -> None:
    """GPT-NeoX's rows are per head (H, 3, D): read as [q | k | v] they are another model."""
    spec = first_spec("gpt_neox")
    subject, x, module = run("gpt_neox", "eager", spec)
    fused = module.attn.query_key_value
    wrong = _hf_families._fused_concat(fused.weight, fused.bias, spec)
    with torch.no_grad():
        weights = dict(subject.export_weights(module)) | wrong
        err = (module(x) - spec_attention(x, weights, spec)).abs().max().item()
    assert err > 1e-2


@pytest.mark.parametrize("model_type", ["llama", "gpt2", "falcon", "qwen3"])
def test_sdpa_is_the_reference_too(model_type: str) -> None:
    spec = first_spec(model_type)
    subject, x, module = run(model_type, "sdpa", spec)
    with torch.no_grad():
        weights = {k: v.detach() for k, v in subject.export_weights(module).items()}
        err = (module(x) - spec_attention(x, weights, spec)).abs().max().item()
    assert err <= 1e-5 * spec_attention(x, weights, spec).abs().max().item()


def test_the_hf_target_loads_as_protocol_2_with_the_hooks() -> None:
    subject = load_subject("hf:llama@eager")
    assert subject.protocol == 2
    assert {"decode", "decode_padded", "padded", "shifted"} <= set(subject.hooks)
    assert load_subject("hf:bloom").name == f"hf:bloom@{'eager'}"  # BLOOM runs eager only


@pytest.mark.parametrize(("target", "says"), [
    ("hf:no_such_model", "transformers has no such model type"),
    ("hf:mamba", "Model types the adapter builds: llama"),
    ("hf:llama@fast", "unknown backend 'fast'"),
    ("hf:llama@", "the backend is empty; write hf:MODEL_TYPE or hf:MODEL_TYPE@BACKEND, with "
                  "BACKEND one of eager, sdpa, flex_attention"),
    ("hf:@sdpa", "the model type is empty"),
    ("hf:bloom@sdpa", "does not run this model type on sdpa"),
])
def test_a_target_it_cannot_verify_is_refused_with_the_reason(target: str, says: str) -> None:
    with pytest.raises(TargetError, match=says.replace("(", r"\(").replace(")", r"\)")):
        load_subject(target)


def test_flex_attention_on_the_cpu_is_refused_with_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(hf.AdapterError, match="no backward on the CPU"):
        hf.subject("llama", "flex_attention")


def test_an_unsupported_transformers_version_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers

    monkeypatch.setattr(transformers, "__version__", "4.46.0")
    with pytest.raises(hf.AdapterError, match=r"supports transformers >= 5.0, < 6.0; this "
                                              r"environment has 4.46.0"):
        hf.subject("llama")


def attnspec_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "attnspec", *args], capture_output=True,
                          text=True, timeout=600, check=False)


def test_hf_backend_needs_a_bare_hf_target() -> None:
    done = attnspec_cli("verify", "hf:llama@eager", "--hf-backend", "sdpa")
    assert done.returncode == 2
    assert "must be hf:TYPE without @BACKEND" in done.stderr


def test_hf_backend_all_verifies_each_backend_and_compares_them() -> None:
    done = attnspec_cli("verify", "hf:gpt2", "--hf-backend", "all", "--profile", "smoke",
                        "--only", "oracle,decode", "--no-progress", "--seed", "0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "backends: eager pass, sdpa pass" in done.stdout
    assert "backends agree on every property" in done.stdout


# CI's fixed share of the matrix: one of each layout family, the smoke profile.
@pytest.mark.parametrize("target", ["hf:qwen3@eager", "hf:gemma2@eager", "hf:falcon@sdpa"])
def test_ci_share_of_the_matrix(target: str) -> None:
    done = attnspec_cli("verify", target, "--profile", "smoke", "--seed", "0", "--no-progress",
                        "--no-database")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def strongest_declarations(model_type: str, backend: str) -> tuple[str, str]:
    """MASKED_ROWS and PADDING_VALUES as measured: "zero" if left padding's masked rows are
    the same for other tokens (else "finite"), "any" if NaN in the padding stays out of real
    rows."""
    spec = first_spec(model_type)
    subject = hf.subject(model_type, backend)
    torch.manual_seed(0)
    module = subject.build(spec).eval()
    x = torch.randn(2, 5, spec.n_embd)
    key_mask = torch.ones(2, 5, dtype=torch.bool)
    key_mask[1, :2] = False  # row 1 left-padded: its first two queries see no real key
    with torch.no_grad():
        out = subject.padded(module, x, key_mask)
        other = subject.padded(module, torch.randn_like(x), key_mask)
        nan = x.clone()
        nan[1, :2] = float("nan")
        leaked = subject.padded(module, nan, key_mask)[1, 2:]
    # "zero": a masked row is a constant (0 through o's bias), whatever the tokens
    masked = "zero" if torch.equal(out[1, :2], other[1, :2]) else "finite"
    padding = "any" if bool(torch.isfinite(leaked).all()) else "finite"
    return masked, padding


@pytest.mark.parametrize(("model_type", "backend"), [
    (t, b) for t in hf.model_types() for b in hf.backends_of(t) if b != "flex_attention"])
def test_masked_rows_and_padding_values_are_the_measured_ones(model_type: str,
                                                             backend: str) -> None:
    subject = hf.subject(model_type, backend)
    declared = (subject.MASKED_ROWS, subject.PADDING_VALUES)
    assert declared == strongest_declarations(model_type, backend)


def test_the_pytest_plugin_takes_an_hf_target(tmp_path: Any) -> None:
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                           "--attnspec-subject", "hf:gpt2@eager", "--attnspec-profile", "smoke",
                           "-k", "oracle or decode"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "3 passed" in done.stdout  # oracle, oracle_grad, decode
