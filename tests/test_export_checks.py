"""The exported weights are checked against the spec before any reference runs on them: their
keys (the spec's `weight_shapes`), the declared bias, and values an initialised parameter has.
Test doubles, one per mistake, in this process."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import Tensor, nn

from attnspec import AttentionSpec
from attnspec.properties.base import Context, Example, Outcome, SubjectFault
from attnspec.properties.oracle import check_oracle
from attnspec.runner.worker import InProcess

sys.path.insert(0, str(Path(__file__).parent / "broken"))
from _spec_common import SpecAttn, export_weights  # noqa: E402

sys.path.pop(0)

Export = Callable[[nn.Module], dict[str, Tensor]]


def _oracle(spec: AttentionSpec, export: Export = export_weights,
            build: Callable[[AttentionSpec], nn.Module] = SpecAttn) -> Outcome:
    subject = InProcess(SimpleNamespace(__name__="double", PROTOCOL=2, build=build,
                                        export_weights=export, VARIANTS={"bias": "any"}))
    ex = Example(B=1, T=4, C=spec.n_embd, H=spec.n_head, seed=2, spec=spec)
    return check_oracle(Context(subject), ex)


def test_a_correct_export_passes_both_ways() -> None:
    _oracle(AttentionSpec(8, 2))
    _oracle(AttentionSpec(8, 2, bias=False))


def test_biases_left_out_of_the_export_count_as_zero() -> None:
    def weights_only(module: nn.Module) -> dict[str, Tensor]:
        return {k: v for k, v in export_weights(module).items() if k.endswith("_weight")}

    # the module's biases are not zero, so the reference without them disagrees, and says why
    outcome = _oracle(AttentionSpec(8, 2), weights_only)
    assert outcome.kind == "fail"
    assert re.search(r"\(q_bias, k_bias, v_bias, o_bias not exported: taken as zero",
                     outcome.message), outcome.message

    def zero_o_bias(spec: AttentionSpec) -> nn.Module:  # Qwen2's layout: o_proj has none
        module = SpecAttn(spec)
        with torch.no_grad():
            module.o.bias.zero_()
        return module

    def no_o_bias(module: nn.Module) -> dict[str, Tensor]:
        return {k: v for k, v in export_weights(module).items() if k != "o_bias"}

    # a wrapper written before o_bias was asked for keeps its verdict
    assert _oracle(AttentionSpec(8, 2), no_o_bias, build=zero_o_bias).kind == "pass"


def test_biases_exported_where_the_spec_declares_none_are_used() -> None:
    def always_biased(spec: AttentionSpec) -> nn.Module:
        import dataclasses

        module = SpecAttn(dataclasses.replace(spec, bias=True))
        module.spec = spec
        return module

    # the reference runs with what the module holds, as it did when subjects were written
    assert _oracle(AttentionSpec(8, 2, bias=False), build=always_biased).kind == "pass"


def test_a_misspelt_key_is_named_with_the_key_it_should_be() -> None:
    def misspelt(module: nn.Module) -> dict[str, Tensor]:
        out = export_weights(module)
        out["qweight"] = out.pop("q_weight")
        return out

    with pytest.raises(SubjectFault, match=r"missing q_weight\. 'qweight' is no key of the "
                       r"protocol's; did you mean 'q_weight'\?"):
        _oracle(AttentionSpec(8, 2), misspelt)

    def extra(module: nn.Module) -> dict[str, Tensor]:
        out = export_weights(module)
        out["qbias"] = out["q_bias"]
        return out

    with pytest.raises(SubjectFault, match=r"export_weights returned 'qbias', which is no weight "
                       r"of this spec \('qbias': did you mean 'q_bias'\?\); the keys are "
                       r"q_weight, k_weight, v_weight, o_weight, q_bias"):
        _oracle(AttentionSpec(8, 2), extra)


@pytest.mark.parametrize(("fill", "says"), [
    (float("nan"), r"k_weight has 64 non-finite values \(first nan at index \(0, 0\)\)"),
    (1e30, r"k_weight has magnitudes up to 1e\+30 \(at index \(0, 0\)\), beyond 1e\+06"),
])
def test_an_uninitialised_parameter_is_named(fill: float, says: str) -> None:
    def left_empty(spec: AttentionSpec) -> nn.Module:
        module = SpecAttn(spec)
        with torch.no_grad():
            module.k.weight.fill_(fill)  # what torch.empty leaves, at its worst
        return module

    with pytest.raises(SubjectFault, match=says + r": the parameter is probably left "
                       r"uninitialised \(torch\.empty"):
        _oracle(AttentionSpec(8, 2), build=left_empty)
