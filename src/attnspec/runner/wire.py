"""The worker socket's format: framed messages of a JSON header and raw tensor bytes, no pickle.

The runner reads what the worker sends, and the worker runs the subject's code, so what comes
back is data only: a message is a JSON value in which `{"__tensor__": i}` stands for the i-th
tensor, followed by each tensor's raw bytes. Reading one cannot execute code.

A frame is an 8-byte little-endian length, then the message. The runner reads its end of a
worker's socket through a `Channel`: never blocking, a frame's length checked against the bound
the runner set for that answer before any of it is read, so a subject that writes into the
socket can neither make the runner wait past its deadline nor make it allocate past the bound.
The message's pieces (header, then each tensor's bytes) are written one by one, straight from
the tensors' memory (no numpy, no joined copy), and read into one buffer that the decoded
tensors share.
"""

from __future__ import annotations

import ctypes
import json
import select
import socket
import struct
from collections.abc import Callable
from typing import Any

import torch

from ..common.dtypes import WIRE_DTYPES

__all__ = ["Channel", "FrameError", "Message", "WireError", "decode", "encode", "pack",
           "read_frame", "write_frame"]

_DTYPES = WIRE_DTYPES
_NAMES = {dtype: name for name, dtype in _DTYPES.items()}
_HEAD = struct.Struct("<Q")  # length of the JSON header; also a frame's length
_ALIGN = 8  # each tensor's bytes start at a multiple of this in the message (its itemsize)
_JOIN = 1 << 16  # a message smaller than this goes out in one write


class WireError(Exception):
    """A message that is not in the wire format (a worker that wrote garbage to the socket)."""


class FrameError(WireError):
    """Bytes on a worker's socket that are not a frame within the bound set for the answer."""


def _pad(offset: int) -> int:
    return -offset % _ALIGN


def _strip(item: Any, tensors: list[torch.Tensor]) -> Any:
    # A module-level function, not a closure: a nested recursive one forms a reference cycle
    # that keeps every tensor of the message alive until the cycle collector runs.
    if isinstance(item, torch.Tensor):
        tensors.append(item)
        return {"__tensor__": len(tensors) - 1}
    if isinstance(item, dict):
        return {str(k): _strip(v, tensors) for k, v in item.items()}
    if isinstance(item, list | tuple):
        return [_strip(v, tensors) for v in item]
    return item


def _flat(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's values as a plain, dense CPU tensor: itself when it is one already."""
    t = tensor.detach().to("cpu")
    if (type(t) is torch.Tensor and t.layout == torch.strided and t.is_contiguous()
            and not t.is_neg() and not t.is_conj()):
        return t
    # A fresh 1-D copy has stride 1 whatever t's strides were (size-1 axes keep odd ones).
    return torch.empty(t.numel(), dtype=t.dtype).copy_(t.reshape(-1))


def _bytes_of(t: torch.Tensor) -> memoryview:
    """A view of a dense CPU tensor's bytes (no copy, no numpy), which keeps `t` alive."""
    raw = (ctypes.c_ubyte * (t.numel() * t.element_size())).from_address(t.data_ptr())
    raw._tensor = t  # type: ignore[attr-defined]  # from_address alone would not: use after free
    return memoryview(raw).cast("B")


class Message:
    """An encoded message: its pieces, in order, and the tensors whose memory they view."""

    __slots__ = ("nbytes", "pieces", "tensors")

    def __init__(self, pieces: list[bytes | memoryview], tensors: list[torch.Tensor]) -> None:
        self.pieces, self.tensors = pieces, tensors
        self.nbytes = sum(len(p) for p in pieces)


def pack(value: Any) -> Message:
    """JSON with tensors replaced by references, then their bytes (dense, on the CPU).

    A tensor on the meta device goes as its shape and dtype alone (`withheld`): the worker sends
    an output far larger than its request could need that way."""
    tensors: list[torch.Tensor] = []
    body = _strip(value, tensors)
    meta, flats = [], []
    for tensor in tensors:
        if tensor.dtype not in _NAMES:
            raise WireError(f"cannot send a {tensor.dtype} tensor; attnspec sends "
                            f"{', '.join(_DTYPES)}.")
        entry: dict[str, Any] = {"dtype": _NAMES[tensor.dtype], "shape": list(tensor.shape)}
        if tensor.device.type == "meta":
            meta.append({**entry, "nbytes": 0, "withheld": True})
            continue
        t = _flat(tensor)
        meta.append({**entry, "nbytes": t.numel() * t.element_size()})
        if t.numel():
            flats.append(t)
    header = json.dumps({"body": body, "tensors": meta}, allow_nan=True).encode()
    pieces: list[bytes | memoryview] = [_HEAD.pack(len(header)) + header]
    offset = len(pieces[0])
    for t in flats:
        if _pad(offset):
            pieces.append(b"\0" * _pad(offset))
            offset += _pad(offset)
        pieces.append(_bytes_of(t))
        offset += len(pieces[-1])
    return Message(pieces, flats)


def encode(value: Any) -> bytes:
    """`pack`'s message as one bytes object (for small messages and tests)."""
    message = pack(value)  # held while joined: its pieces view its tensors' memory
    return b"".join(message.pieces)


def decode(data: bytes | bytearray) -> Any:
    """The value `pack` wrote, with CPU tensors of their own (64-byte aligned); WireError if
    the bytes are not one."""
    buffer = data if isinstance(data, bytearray) else bytearray(data)
    try:
        (length,) = _HEAD.unpack_from(buffer, 0)
        if _HEAD.size + length > len(buffer):
            raise WireError("the header is longer than the message")
        header = json.loads(bytes(buffer[_HEAD.size:_HEAD.size + length]))
        meta, body = header["tensors"], header["body"]
        tensors, offset = [], _HEAD.size + length
        for entry in meta:
            tensors.append(_tensor(entry, buffer, offset))
            if not entry.get("withheld"):
                nbytes = int(entry["nbytes"])
                offset += (_pad(offset) if nbytes else 0) + nbytes
    except WireError:
        raise
    except (ValueError, KeyError, TypeError, IndexError, struct.error, RecursionError,
            RuntimeError, AttributeError) as error:
        raise WireError(f"not an attnspec message ({type(error).__name__}: {error})") from None
    try:
        return _fill(body, tensors)
    except (IndexError, ValueError, TypeError, RecursionError) as error:
        raise WireError(f"not an attnspec message ({type(error).__name__})") from None


def _tensor(entry: dict[str, Any], buffer: bytearray, offset: int) -> torch.Tensor:
    dtype = _DTYPES[entry["dtype"]]
    shape = [int(s) for s in entry["shape"]]
    if any(s < 0 for s in shape):
        raise WireError(f"a tensor of shape {shape}")
    if entry.get("withheld"):  # its shape and dtype only: a meta tensor holds no memory
        return torch.empty(shape, dtype=dtype, device="meta")
    nbytes, numel = int(entry["nbytes"]), 1
    for s in shape:
        numel *= s
    if nbytes != numel * dtype.itemsize:
        raise WireError("tensor size does not match its header")
    if not numel:
        return torch.empty(shape, dtype=dtype)
    offset += _pad(offset)
    if offset + nbytes > len(buffer):
        raise WireError("tensor size does not match its header")
    if dtype == torch.bool:  # any byte but 0 and 1 is no bool: read as bytes, compared
        return torch.frombuffer(buffer, dtype=torch.uint8, count=numel,
                                offset=offset).ne(0).reshape(shape)
    # A copy, at the allocator's 64-byte alignment: BLAS rounds by the address's alignment (an
    # nn.Linear on the same values 8 bytes off gives other bits), so identical calls must get
    # identically aligned inputs, wherever the frame put them.
    return torch.frombuffer(buffer, dtype=dtype, count=numel, offset=offset).reshape(
        shape).clone()


def _fill(item: Any, tensors: list[torch.Tensor]) -> Any:
    if isinstance(item, dict):
        if set(item) == {"__tensor__"}:
            index = item["__tensor__"]
            if not isinstance(index, int) or isinstance(index, bool) or index < 0:
                raise ValueError(f"tensor reference {index!r}")
            return tensors[index]
        return {k: _fill(v, tensors) for k, v in item.items()}
    if isinstance(item, list):
        return [_fill(v, tensors) for v in item]
    return item


# ---- frames --------------------------------------------------------------------------------


def write_frame(sock: socket.socket, message: Message) -> None:
    """Send one frame on a blocking socket (the worker's side)."""
    head = _HEAD.pack(message.nbytes)
    if message.nbytes < _JOIN:
        sock.sendall(b"".join([head, *message.pieces]))
        return
    sock.sendall(head)
    for piece in message.pieces:
        sock.sendall(piece)


def read_frame(sock: socket.socket) -> bytearray:
    """Read one frame from a blocking socket (the worker's side: the runner is trusted)."""
    head = _read_exactly(sock, bytearray(_HEAD.size))
    return _read_exactly(sock, bytearray(_HEAD.unpack(head)[0]))


def _read_exactly(sock: socket.socket, buffer: bytearray) -> bytearray:
    view, got = memoryview(buffer), 0
    while got < len(buffer):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise EOFError("the socket closed")
        got += n
    return buffer


class Channel:
    """The runner's end of a worker's socket: writes and reads that never block.

    `expect(limit)` starts reading a frame of at most `limit` bytes; `pump()` takes what has
    arrived and returns the frame once complete. The caller waits (`select`) under its own
    deadline, so no frame, however long it says it is, holds the runner.
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        sock.setblocking(False)
        self.limit = 0
        self._head = bytearray()
        self._body: bytearray | None = None
        self.got = 0  # bytes of the current frame's body read so far

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    def expect(self, limit: int) -> None:
        """Read the next frame, refusing one longer than `limit` bytes."""
        self.limit, self._head, self._body, self.got = limit, bytearray(), None, 0

    @property
    def started(self) -> bool:
        """Whether any byte of the frame being read has arrived."""
        return bool(self._head)

    @property
    def expected(self) -> int | None:
        """The length the frame being read says it has, once that has arrived."""
        return None if self._body is None else len(self._body)

    def pump(self) -> bytearray | None:
        """Read what has arrived, without blocking: the frame once whole, else None.

        EOFError when the socket closed (also mid-frame); FrameError for a length over the
        bound."""
        while True:
            try:
                if self._body is None:
                    chunk = self.sock.recv(_HEAD.size - len(self._head))
                    if not chunk:  # closed, maybe mid-frame: the process is gone or going
                        raise EOFError("the socket closed")
                    self._head += chunk
                    if len(self._head) < _HEAD.size:
                        continue
                    (length,) = _HEAD.unpack(self._head)
                    if length > self.limit:
                        raise FrameError(f"a frame of {length} bytes, over the {self.limit} "
                                         "bytes this answer can need")
                    self._body = bytearray(length)
                n = len(self._body) - self.got
                if n:
                    n = self.sock.recv_into(memoryview(self._body)[self.got:], n)
                    if n == 0:
                        raise EOFError(f"the socket closed after {self.got} of the frame's "
                                       f"{len(self._body)} bytes")
                    self.got += n
                if self.got == len(self._body):
                    frame = self._body
                    self.expect(self.limit)
                    return frame
            except (BlockingIOError, InterruptedError):
                return None

    def send(self, message: Message, left: Callable[[], float]) -> bool:
        """Write one frame; False if the peer did not take it all before `left()` (seconds to
        the deadline) reached 0. The peer is then out of step: it must be killed."""
        head = _HEAD.pack(message.nbytes)
        pieces = ([b"".join([head, *message.pieces])] if message.nbytes < _JOIN
                  else [head, *message.pieces])
        for piece in pieces:
            view = memoryview(piece).cast("B")
            while view:
                try:
                    view = view[self.sock.send(view):]
                    continue
                except (BlockingIOError, InterruptedError):
                    pass
                wait = left()
                if wait <= 0:
                    return False
                select.select([], [self.sock], [], min(wait, 1.0))
        return True
