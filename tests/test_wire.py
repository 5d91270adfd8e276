"""The wire between runner and worker: no numpy, no reference cycles, every read bounded in
bytes and in time, whatever a subject writes into the worker's socket."""

from __future__ import annotations

import gc
import socket
import struct
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import attnspec
from attnspec._errors import TargetError
from attnspec.common.protocol import answer_limit
from attnspec.runner import worker as _worker
from attnspec.runner.wire import Channel, FrameError, WireError, decode, encode, pack, write_frame
from attnspec.runner.worker import Budget, InProcess, SubjectCrash, Worker, receive

FAULTY = Path(__file__).parent / "faulty"


def test_tensors_travel_without_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    # torch >= 2.3 runs without numpy, and attnspec does not depend on it.
    def no_numpy(self: torch.Tensor) -> None:
        raise RuntimeError("Numpy is not available")

    monkeypatch.setattr(torch.Tensor, "numpy", no_numpy)
    x = torch.randn(2, 3, 5)
    back = decode(encode({"out": x, "mask": x > 0}))
    assert torch.equal(back["out"], x) and torch.equal(back["mask"], x > 0)


def test_a_message_holds_no_reference_cycle() -> None:
    # A recursive closure in encode or decode kept every tensor alive until a collection.
    gc.collect()
    gc.disable()
    try:
        x = torch.randn(64, 64)
        sent = weakref.ref(x)
        data = encode({"out": [x], "n": 1})
        del x
        assert sent() is None, "encode keeps the tensor it sent alive"
        got = decode(data)["out"][0]
        received = weakref.ref(got)
        del got
        assert received() is None, "decode keeps the tensor it made alive"
    finally:
        gc.enable()


def test_decoded_tensors_start_at_64_byte_boundaries_whatever_the_frame() -> None:
    # BLAS rounds by the input's alignment (AMD EPYC: nn.Linear 8 bytes off gives other bits),
    # so a tensor must not inherit its offset in the frame: identical calls get identical bits.
    for head in range(1, 9):  # keys of other lengths move the tensor within the frame
        value = {"k" * head: torch.arange(3, dtype=torch.uint8),
                 "b": torch.randn(5, dtype=torch.float64)}
        frame = bytearray(encode(value))
        back = decode(frame)
        assert back["b"].data_ptr() % 64 == 0 and torch.equal(back["b"], value["b"])
        frame[-1] ^= 0xFF  # its own memory: the frame's bytes are no longer its
        assert torch.equal(back["b"], value["b"])


def test_a_withheld_tensor_arrives_as_its_shape_and_dtype() -> None:
    back = decode(encode({"out": torch.empty(2, 3, 4, dtype=torch.float16, device="meta")}))
    assert back["out"].device.type == "meta"
    assert back["out"].shape == (2, 3, 4) and back["out"].dtype == torch.float16


@pytest.fixture
def pair() -> Iterator[tuple[Channel, socket.socket]]:
    """The runner's end of a socket, and the end a worker (or a subject) writes into."""
    ours, theirs = socket.socketpair()
    channel = Channel(ours)
    yield channel, theirs
    channel.close()
    theirs.close()


def test_a_frame_longer_than_the_bound_is_refused_before_it_is_read(
        pair: tuple[Channel, socket.socket]) -> None:
    channel, theirs = pair
    theirs.sendall(struct.pack("<Q", 2**31))  # 2 GiB, none of it sent
    start = time.monotonic()
    with pytest.raises(FrameError, match=r"a frame of 2147483648 bytes, over the 1000 bytes"):
        receive(channel, Budget([], 5.0), 1000)
    assert time.monotonic() - start < 1.0


def test_a_frame_cut_short_ends_within_the_budget_and_its_grace(
        pair: tuple[Channel, socket.socket], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_worker, "_FRAME_GRACE", 0.3)
    channel, theirs = pair
    theirs.sendall(struct.pack("<Q", 100) + b"\0" * 10)
    start = time.monotonic()
    with pytest.raises(FrameError, match="the answer stopped after 10 of its 100 bytes"):
        receive(channel, Budget([], 0.2, stretch=1.0), 1000)
    assert 0.4 < time.monotonic() - start < 1.5


def test_silence_and_garbage_on_the_socket(pair: tuple[Channel, socket.socket]) -> None:
    channel, theirs = pair
    with pytest.raises(_worker._Silent):
        receive(channel, Budget([], 0.1, stretch=1.0), 1000)
    theirs.sendall(struct.pack("<Q", 4) + b"\xff" * 4)
    with pytest.raises(WireError, match="not an attnspec message"):
        receive(channel, Budget([], 1.0), 1000)
    theirs.shutdown(socket.SHUT_WR)
    with pytest.raises(EOFError):
        receive(channel, Budget([], 1.0), 1000)


def test_a_large_message_goes_in_pieces_and_comes_back_whole(
        pair: tuple[Channel, socket.socket]) -> None:
    channel, theirs = pair
    x = torch.randn(4, 64, 512)  # 512 KiB: more than a socket buffer holds
    writer = threading.Thread(target=write_frame, args=(theirs, pack({"out": x})))
    writer.start()
    try:
        got = receive(channel, Budget([], 10.0), answer_limit(
            {"steps": [{"op": "forward", "x": x}]}, 512))
    finally:
        writer.join()
    assert torch.equal(got["out"], x)


def test_what_the_worker_says_while_loading_fits_the_bound_it_is_read_under(
        pair: tuple[Channel, socket.socket]) -> None:
    channel, theirs = pair
    sizes = (4, 4, 16)
    limit = _worker._ready_limit(sizes)
    _worker._send_loaded(theirs, {"kind": "target_error", "message": "x" * 10**6}, "t.py", sizes)
    said = receive(channel, Budget([], 5.0), limit)
    assert said["kind"] == "target_error" and said["message"].endswith("x [...]")
    _worker._send_loaded(theirs, {"kind": "ready", "info": {"variants": ["w"] * 10**6}}, "t.py",
                         sizes)
    said = receive(channel, Budget([], 5.0), limit)
    assert said["kind"] == "target_error", said
    assert said["message"].startswith("TARGET 't.py': what it declares (SubjectInfo, with "
                                      "VARIANTS) takes "), said["message"]


def test_an_answer_bound_follows_the_requests_shapes() -> None:
    x = torch.zeros(2, 8, 16)
    forward = answer_limit({"build": {"n_embd": 16}, "steps": [{"op": "forward", "x": x}]}, 0)
    two = answer_limit({"steps": [{"op": "forward", "x": x}] * 2}, 16)
    assert forward < two < 2 * forward < 16 * 2**20  # a few MiB, not unbounded


def test_an_output_far_larger_than_its_input_is_withheld_and_named_by_width() -> None:
    from attnspec.properties.base import Context, Example, _inputs

    executor = InProcess(str(FAULTY / "huge_output.py"))
    ex = Example(B=2, T=16, C=32, H=2, seed=1)
    (result,) = Context(executor).request(ex, [{"op": "forward", "x": _inputs(ex)}],
                                          check_layout=False)
    assert result["out"].device.type == "meta" and result["out"].shape == (2, 16, 32, 64)
    report = attnspec.verify(str(FAULTY / "huge_output.py"), only=["width"], max_examples=3,
                             seed=1, database=False, isolate=False)
    width = report.result("width")
    assert width.verdict == "fail" and "out.shape=(" in width.message, width


@pytest.mark.slow
def test_a_subject_writing_into_the_socket_is_a_crash_within_the_timeout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from attnspec.properties.base import Example, _inputs

    ex = Example(B=1, T=3, C=4, H=2, seed=1)
    request = {"build": ex.build(), "steps": [{"op": "forward", "x": _inputs(ex)}]}
    monkeypatch.setattr(_worker, "_FRAME_GRACE", 0.5)
    # Each case in a fresh worker, which reads the fault from its environment.
    # (A frame cut short takes the same path: test_a_frame_cut_short_ends_within_...)
    for fault, says in (("huge", "a frame of 2147483648 bytes, over the"),
                        ("forged", "not an answer (an answer numbered None, to request 1;")):
        monkeypatch.setenv("ATTNSPEC_SOCKET_FAULT", fault)
        worker = Worker(str(FAULTY / "writes_to_socket.py"), timeout=1.0)
        try:
            start = time.monotonic()
            with pytest.raises(SubjectCrash) as crash:
                worker.run(request)
            assert crash.value.kind == "crash" and says in str(crash.value), (fault, crash.value)
            assert time.monotonic() - start < 1.0 + 0.5 + 3.0, fault
        finally:
            worker.close()
    monkeypatch.setenv("ATTNSPEC_SOCKET_FAULT", "load")
    start = time.monotonic()
    with pytest.raises(TargetError, match="while it loaded, its worker sent something"):
        Worker(str(FAULTY / "writes_to_socket.py"), timeout=1.0)
    assert time.monotonic() - start < 20



def test_a_strided_tensors_copy_outlives_its_encoding() -> None:
    # encode's pieces view the memory of the dense copy of a strided tensor: were the copy
    # freed before the join, other tensors would reuse its memory (values of 1e30 came back).
    gc.disable()
    try:
        x = torch.randn(64, 32).t()
        for _ in range(20):
            [torch.randn(64, 32) for _ in range(4)]
            assert torch.equal(decode(encode({"out": x}))["out"], x)
    finally:
        gc.enable()


def test_an_export_of_a_spec_wider_than_its_residual_is_sent_whole() -> None:
    # q is (H·D, C): with head_dim, H·D may exceed C, and C² alone bounded it too tightly.
    from attnspec.properties.base import Context, Example
    from attnspec.reference.spec import AttentionSpec

    ex = Example(B=1, T=2, C=16, H=8, seed=1, spec=AttentionSpec(16, 8, head_dim=64))
    (result,) = Context(InProcess("attnspec.subjects.variants")).request(ex, [{"op": "export"}])
    assert result["weights"]["q_weight"].shape == (512, 16)
    assert result["weights"]["q_weight"].device.type == "cpu"


def test_the_protocol_is_declared_once_and_both_sides_read_it() -> None:
    """Every operation has one record (common/protocol.py), a handler in the worker and an
    answer check in the runner; a step outside its record is refused before it runs."""
    from attnspec.common import protocol
    from attnspec.runner import execute

    assert set(execute.HANDLERS) == set(protocol.OPERATIONS)
    for op in protocol.OPERATIONS.values():
        assert callable(getattr(protocol._Result, op.answer)), op
    x = torch.zeros(1, 2, 4)
    assert protocol.check_step({"op": "forward", "x": x, "keep_input": True}).name == "forward"
    for bad, said in (({"op": "forwards", "x": x}, "unknown step 'forwards'"),
                      ({"op": "forward"}, "a forward step without x"),
                      ({"op": "forward", "x": x, "cotangent": x}, "with cotangent")):
        with pytest.raises(ValueError, match=said):
            protocol.check_step(bad)
