"""Protocol v2 subjects whose hooks misbehave where forward would be caught, one per TARGET name.

`:decode_on_meta` decodes its prefill onto the meta device; `:supports_tensor` has
supports(spec) return a tensor; `:detach_raises` returns a tensor subclass whose detach()
raises; `:decode_writes_input` adds to the tokens it is given; `:decode_writes_ahead` zeroes the
tokens after its chunk; `:decode_float64` returns float64 for float32 tokens;
`:padded_writes_mask` clears the key mask it is given; `:cross_writes_kv` scales x_kv in place;
`:shifted_float64` returns float64; `:padded_wrong_shape` drops the last position.
"""

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor, nn

from attnspec import RoPE
from attnspec.subjects import variants as reference


class Undetachable(Tensor):
    """A tensor that cannot be detached (an autograd wrapper gone wrong)."""

    def detach(self) -> Tensor:  # type: ignore[override]
        raise RuntimeError("this tensor is pinned to its graph")


def _subject(**hooks: Callable[..., Any]) -> SimpleNamespace:
    return SimpleNamespace(PROTOCOL=2, build=reference.build,
                           export_weights=reference.export_weights, **hooks)


def _decode_on_meta(module: nn.Module, x: Tensor, cache: object, offset: int,
                    ) -> tuple[Tensor, object]:
    out, cache = reference.decode(module, x, cache, offset)
    return (out.to("meta") if offset == 0 else out), cache  # the prefill's output on meta


def _undetachable(module: nn.Module, x: Tensor) -> Tensor:
    return module(x).as_subclass(Undetachable)  # type: ignore[no-any-return]


def _decode_writes_input(module: nn.Module, x: Tensor, cache: object, offset: int,
                         ) -> tuple[Tensor, object]:
    out, cache = reference.decode(module, x, cache, offset)
    x.add_(1.0)  # the caller's hidden state, changed after use
    return out, cache


def _decode_writes_ahead(module: nn.Module, x: Tensor, cache: object, offset: int,
                         ) -> tuple[Tensor, object]:
    out, cache = reference.decode(module, x, cache, offset)
    B, t, C = x.shape  # the chunk is a view of the whole sequence: zero the tokens after it
    whole = x.as_strided((B, x.stride(0) // C, C), x.stride(), x.storage_offset() - offset * C)
    whole[:, offset + t:] = 0.0
    return out, cache


def _decode_float64(module: nn.Module, x: Tensor, cache: object, offset: int,
                    ) -> tuple[Tensor, object]:
    out, cache = reference.decode(module, x, cache, offset)
    return out.double(), cache


def _padded_writes_mask(module: nn.Module, x: Tensor, key_mask: Tensor) -> Tensor:
    out = reference.padded(module, x, key_mask)
    key_mask.fill_(True)
    return out


def _cross_writes_kv(module: nn.Module, x_q: Tensor, x_kv: Tensor) -> Tensor:
    out = reference.cross(module, x_q, x_kv)
    x_kv.mul_(2.0)
    return out


def _shifted_float64(module: nn.Module, x: Tensor, offset: int) -> Tensor:
    return reference.shifted(module, x, offset).double()


def _padded_wrong_shape(module: nn.Module, x: Tensor, key_mask: Tensor) -> Tensor:
    return reference.padded(module, x, key_mask)[:, :-1]


class _Forward(nn.Module):
    def __init__(self, inner: nn.Module, forward: Callable[[nn.Module, Tensor], Tensor]) -> None:
        super().__init__()
        self.inner, self._forward = inner, forward

    def forward(self, x: Tensor) -> Tensor:
        return self._forward(self.inner, x)


decode_on_meta = _subject(decode=_decode_on_meta)
supports_tensor = SimpleNamespace(PROTOCOL=2, build=reference.build,
                                  supports=lambda spec: torch.tensor([True, False]))
detach_raises = SimpleNamespace(PROTOCOL=2,
                                build=lambda spec: _Forward(reference.build(spec), _undetachable))
decode_writes_input = _subject(decode=_decode_writes_input)
decode_writes_ahead = _subject(decode=_decode_writes_ahead)
decode_float64 = _subject(decode=_decode_float64)
padded_writes_mask = _subject(padded=_padded_writes_mask)
cross_writes_kv = _subject(cross=_cross_writes_kv)
shifted_float64 = _subject(shifted=_shifted_float64, VARIANTS={"positions": [RoPE()]})
padded_wrong_shape = _subject(padded=_padded_wrong_shape)
