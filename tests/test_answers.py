"""Every answer the runner reads is checked field by field, every fault of the subject's making is
blamed on it, and every hook's output meets what forward's does."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import torch

import attnspec
from attnspec._errors import TargetError
from attnspec.common.protocol import BadAnswer, check_kind, check_results
from attnspec.properties import run_check
from attnspec.properties.base import Example
from attnspec.reference.spec import AttentionSpec, RoPE
from attnspec.runner.execute import _Fault, answer_bool
from attnspec.runner.worker import InProcess, SubjectCrash, SubjectInfo, Worker

FAULTY = Path(__file__).parent / "faulty"
X = torch.zeros(2, 3, 4)
OUT = {"out": torch.zeros(2, 3, 4), "device": "cpu"}


def _results(step: dict[str, Any], result: dict[str, Any], **options: Any) -> None:
    options.setdefault("device", "cpu")
    check_results({"kind": "ok", "results": [result]}, [step], **options)


@pytest.mark.parametrize(("step", "result", "text"), [
    ({"op": "forward", "x": X}, {"out": "forged", "device": "cpu"},
     "the worker's answer to forward has 'out' of type str, not a tensor."),
    ({"op": "forward", "x": X}, {"device": "cpu"}, "the worker's answer to forward has no 'out'"),
    ({"op": "forward", "x": X}, {"out": torch.zeros(2, 3, 4), "device": 3},
     "has 'device' of type int, not str."),
    ({"op": "forward", "x": X}, {"out": torch.zeros(1, 1, 1), "device": "cpu"},
     "forward returned (1, 1, 1) torch.float32 on cpu for input (2, 3, 4) torch.float32 on cpu"),
    ({"op": "forward", "x": X}, {"out": torch.zeros(2, 3, 4, dtype=torch.int64),
                                 "device": "cpu"}, "'out' of dtype torch.int64, not a floating"),
    ({"op": "forward", "x": X}, {**OUT, "device": "cuda"}, "on cuda for input"),
    ({"op": "forward", "x": X, "mask": X.bool()}, {"out": X.double(), "device": "cpu"},
     "padded(module, x, key_mask) returned (2, 3, 4) torch.float64"),
    ({"op": "forward", "x": X, "keep_input": True}, OUT, "has no 'input'"),
    ({"op": "decode", "x": X, "chunks": [3]}, {"out": X[:, :2], "device": "cpu"},
     "decode returned (2, 2, 4)"),
    ({"op": "grad", "x": X}, {**OUT, "grad_x": X[:1], "params": {}},
     "has 'grad_x' of shape (1, 3, 4), not its input's (2, 3, 4)."),
    ({"op": "grad", "x": X}, {**OUT, "grad_x": None, "params": {"w": "x"}},
     "has 'params' ['w'] of type str, not a floating tensor."),
    ({"op": "grad", "x": X}, {**OUT, "grad_x": None, "params": []},
     "has 'params' of type list, not dict."),
    ({"op": "export"}, {"weights": {"q_weight": X}, "connected": []},
     "has weights ['q_weight'], not q_weight, k_weight, v_weight, o_weight"),
    ({"op": "export"}, {"weights": {k: X for k in ("q_weight", "k_weight", "v_weight",
                                                   "o_weight")}, "connected": ["z"]},
     "has 'connected' ['z'], not a list of the exported keys."),
    ({"op": "pullback"}, {"params": {"w": 1.0}}, "['w'] of type float"),
    ({"op": "refuses"}, {"raised": "yes", "type": "ValueError"},
     "the worker's answer to refuses has 'raised' of type str, not bool."),
    ({"op": "shard_refuses"}, {"raised": False, "message": 7}, "'message' of type int"),
    ({"op": "sharded_grad", "x": X}, {**OUT, "grad_x": None, "params": {},
                                      "param_layout": {"w": "odd"}}, "'param_layout'"),
])
def test_an_answer_of_the_wrong_form_is_refused_naming_the_step_and_field(
        step: dict[str, Any], result: dict[str, Any], text: str) -> None:
    with pytest.raises(BadAnswer) as raised:
        _results(step, result)
    assert text in str(raised.value)


def test_a_well_formed_answer_passes_and_a_rank_is_named() -> None:
    _results({"op": "forward", "x": X}, OUT)
    _results({"op": "forward", "x": X}, {"out": torch.zeros(1), "device": "cuda"},
             layout=False)  # width and dtype judge the layout themselves
    with pytest.raises(BadAnswer, match=r"^rank 1 of 2: the sharded module returned \(1, 1\)"):
        _results({"op": "sharded_grad", "x": X},
                 {"out": torch.zeros(1, 1), "device": "cpu", "grad_x": None, "params": {},
                  "param_layout": {}}, who="rank 1 of 2")


@pytest.mark.parametrize(("answer", "text"), [
    ([1, 2], "the worker answered list [1, 2], not an answer"),
    ({"kind": "maybe"}, "answered with kind 'maybe', not one of ok, error, unsupported"),
    ({"kind": "error", "message": ["a"]}, "error answer has 'message' of type list"),
])
def test_an_answer_of_an_unknown_kind_is_refused(answer: Any, text: str) -> None:
    with pytest.raises(BadAnswer) as raised:
        check_kind(answer)
    assert text in str(raised.value)


def test_results_that_do_not_match_the_steps_are_refused() -> None:
    with pytest.raises(BadAnswer, match="answered 2 steps with list"):
        check_results({"kind": "ok", "results": [OUT]}, [{"op": "forward", "x": X}] * 2,
                      device="cpu")


def _info(**changes: Any) -> dict[str, Any]:
    info = SubjectInfo(name="s", origin="s.py", has_export=True, dtypes=("float32",),
                       supported=((8, 2),), cuda=False, protocol=2,
                       variants={"window": [1, 2]}, hooks=("decode",))
    return {**json.loads(json.dumps(asdict(info))), **changes}


def test_subject_info_round_trips_through_its_json() -> None:
    info = SubjectInfo.from_json(_info())
    assert info.supported == ((8, 2),) and info.hooks == ("decode",) and info.dtypes == (
        "float32",) and info.variants == {"window": [1, 2]}


@pytest.mark.parametrize(("changes", "text"), [
    ({"supported": [[8]]}, "'supported' = [[8]]"),
    ({"supported": [["a", 1]]}, "'supported'"),
    ({"name": None}, "'name' = None"),
    ({"has_export": "yes"}, "'has_export' = 'yes'"),
    ({"dtypes": ["int8"]}, "'dtypes' = ['int8']"),
    ({"hooks": ["rm -rf"]}, "'hooks'"),
    ({"protocol": True}, "'protocol' = True, not one of 1, 2"),
    ({"corner": "middle"}, "'corner' = 'middle'"),
    ({"world_sizes": [0]}, "'world_sizes' = [0]"),
    ({"variants": {"window": 3}}, "'variants'"),
    ({"variants": {"colour": "any"}}, "'variants'"),
    ({"variants": {"window": [torch.ones(2)]}}, "'variants'"),
])
def test_subject_info_of_the_wrong_form_is_a_target_error(changes: dict[str, Any],
                                                          text: str) -> None:
    with pytest.raises(TargetError) as raised:
        SubjectInfo.from_json(_info(**changes))
    assert text in str(raised.value)


def test_subject_info_that_is_not_an_object_is_a_target_error() -> None:
    with pytest.raises(TargetError, match="'info' is 'x', not an object"):
        SubjectInfo.from_json("x")


@pytest.mark.parametrize("value", [True, False, "numpy True", "numpy False"])
def test_supports_may_answer_a_bool_or_a_numpy_bool(value: Any) -> None:
    if isinstance(value, str):
        value = pytest.importorskip("numpy").bool_(value == "numpy True")
    assert answer_bool("supports(spec)", value, _Fault) is bool(value)


@pytest.mark.parametrize("value", [torch.tensor(True), torch.tensor([True, False]), None, 1,
                                   "yes"])
def test_supports_answering_anything_else_is_the_subjects_fault(value: Any) -> None:
    with pytest.raises(_Fault, match=r"supports\(spec\) returned \w+ .*, not a bool"):
        answer_bool("supports(spec)", value, _Fault)


V2 = AttentionSpec(8, 2)


@pytest.mark.parametrize(("name", "prop", "spec", "text"), [
    ("decode_on_meta", "decode", V2, "decode(module, x[:, 0:"),
    ("supports_tensor", "width", V2, "supports(AttentionSpec(C=8, H=2)) returned Tensor "
     "tensor([ True, False]), not a bool"),
    ("detach_raises", "width", V2,
     "forward's output is a attnspec_subject_hook_faults.Undetachable, a subclass of "
     "torch.Tensor, not a plain torch.Tensor"),
    ("decode_writes_input", "decode", V2, "wrote into its input x: a hook must leave"),
    ("decode_writes_ahead", "decode", V2, "wrote into its input x: a hook must leave"),
    ("decode_float64", "decode", V2, "torch.float64 on cpu, not (2, "),
    ("padded_writes_mask", "padding_invariance", V2, "wrote into its input key_mask"),
    ("cross_writes_kv", "causal_corner", V2, "wrote into its input x_kv"),
    ("shifted_float64", "relative_position", AttentionSpec(8, 2, positions=RoPE()),
     "shifted(module, x, offset) returned (2, 6, 8) torch.float64 on cpu for input (2, 6, 8) "
     "torch.float32"),
    ("padded_wrong_shape", "masked_rows", V2, "padded(module, x, key_mask) returned (2, 5, 8)"),
])
def test_a_hooks_fault_is_the_subjects_error_as_forwards_would_be(
        name: str, prop: str, spec: AttentionSpec, text: str) -> None:
    ex = Example(B=2, T=6, C=8, H=2, seed=3, cuts=(1, 3), spec=spec)
    outcome = run_check(InProcess(f"{FAULTY / 'hook_faults.py'}:{name}"), prop, ex)
    assert outcome.kind == "error", outcome
    assert text in outcome.message and "internal error" not in outcome.message, outcome.message


@pytest.mark.slow
@pytest.mark.parametrize(("name", "prop", "text"), [
    ("string_out", "width", "the worker's answer to forward has 'out' of type str, not a tensor."),
    ("wrong_shape", "grad_causality",
     "the worker's answer to grad has 'grad_x' of shape (1, 2, 3), not its input's (4, 6, 8)."),
    ("bad_kind", "width", "the worker answered with kind 'maybe'"),
])
def test_a_forged_answer_in_the_workers_pipe_is_the_subjects_error(
        name: str, prop: str, text: str) -> None:
    worker = Worker(f"{FAULTY / 'forges_answers.py'}:{name}", timeout=60)
    try:
        ex = Example(B=2, T=6, C=8, H=2, seed=3, cuts=(1, 3))
        outcome = run_check(worker, prop, ex)
        assert outcome.kind == "error" and text in outcome.message, outcome
        if name == "string_out":  # the forger was replaced: the next answer is the next one's
            assert run_check(worker, prop, ex).message == outcome.message
    finally:
        worker.close()


@pytest.mark.slow
def test_a_forged_answer_that_is_not_an_object_is_a_crash() -> None:
    worker = Worker(f"{FAULTY / 'forges_answers.py'}:not_a_dict", timeout=60)
    try:
        with pytest.raises(SubjectCrash, match="not an answer"):
            run_check(worker, "width", Example(B=1, T=2, C=4, H=2))
    finally:
        worker.close()


@pytest.mark.slow
def test_a_forged_answer_ends_as_a_verdict_and_the_report_is_written(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    report = attnspec.verify(f"{FAULTY / 'forges_answers.py'}:string_out", only="width",
                             replay={"B": 1, "T": 2, "C": 4, "H": 2}, database=False,
                             report=path)
    assert report.result("width").verdict == "error", report.summary()
    written = json.loads(path.read_text())
    assert written["status"] == "fail" and "'out' of type str" in written["properties"][0][
        "message"]


@pytest.mark.slow
def test_a_forged_ready_message_is_a_target_error_with_a_report(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    with pytest.raises(TargetError) as raised:
        attnspec.verify(str(FAULTY / "forges_ready.py"), database=False, report=path)
    assert "the worker's message on loading is not one attnspec sent ('info' has " \
           "'supported' = [[8]])" in str(raised.value)
    written = json.loads(path.read_text())
    assert written["status"] == "error" and "'supported' = [[8]]" in written["error"]


@pytest.mark.slow
def test_an_unsendable_variants_value_is_a_target_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    with pytest.raises(TargetError) as raised:
        attnspec.verify(str(FAULTY / "variants_unsendable.py"), database=False, report=path)
    message = str(raised.value)
    assert "VARIANTS['window']" in message and "lambda" in message, message
    assert "killed its process" not in message
    assert json.loads(path.read_text())["status"] == "error"


def test_a_rank_that_sends_json_that_is_not_an_object_is_a_crash_naming_it() -> None:
    import socket
    import struct
    import subprocess

    from attnspec.runner.gang import Gang, RankCrash
    from attnspec.runner.wire import Channel, encode

    gang, theirs = Gang("ranks.py", 2), []
    gang._limits = [1 << 20] * 2
    for message in ([1, 2], {"kind": "ok", "results": [], "seq": gang._seq}):
        ours, other = socket.socketpair()
        idle = subprocess.Popen(["sleep", "30"], start_new_session=True)
        gang._ranks.append((idle, Channel(ours)))
        theirs.append(other)
        data = encode(message)
        other.sendall(struct.pack("<Q", len(data)) + data)
    try:
        with pytest.raises(RankCrash, match="rank 0 of 2 sent something that is not an answer "
                                            r"\(a message holding list, not an object") as found:
            gang._gather(5.0)
        assert found.value.rank == 0
    finally:
        gang._kill()  # close() would wait for the idle ranks to stop
        for sock in theirs:
            sock.close()
