"""Faults of the subject's own making that attnspec once blamed on itself, one per TARGET name.

`:base_exception` raises a BaseException subclass and `:generator_exit` GeneratorExit in forward
for T > 8; `:export_iteration_raises` exports a mapping whose iteration raises;
`:parameters_raise` has a module whose parameters() raises; `:meta_export` exports tensors on
the meta device.
"""

from collections.abc import Iterator, Mapping
from types import SimpleNamespace

import torch
from _base import build_before, export_weights, reference_build
from torch import Tensor, nn


class Abandoned(BaseException):
    """A kernel's own cancellation signal, deliberately outside Exception."""


def _raising(error: BaseException) -> SimpleNamespace:
    def before(x: Tensor) -> None:
        if x.size(1) > 8:
            raise error

    return SimpleNamespace(build=build_before(before), export_weights=export_weights)


class _BrokenMapping(Mapping[str, Tensor]):
    def __getitem__(self, key: str) -> Tensor:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("weights still streaming from the device")

    def __len__(self) -> int:
        return 4


class _NoParameters(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.inner = reference_build(n_embd, n_head)

    def forward(self, x: Tensor) -> Tensor:
        return self.inner(x)  # type: ignore[no-any-return]

    def named_parameters(self, *args: object, **kwargs: object) -> Iterator[tuple[str, Tensor]]:
        raise RuntimeError("parameters live in a C++ extension")


def _on_meta(module: nn.Module) -> dict[str, Tensor]:
    return {k: torch.empty_like(v, device="meta") for k, v in export_weights(module).items()}


base_exception = _raising(Abandoned("tile cancelled"))
generator_exit = _raising(GeneratorExit("kernel generator closed"))
export_iteration_raises = SimpleNamespace(build=reference_build,
                                          export_weights=lambda m: _BrokenMapping())
parameters_raise = SimpleNamespace(build=_NoParameters, export_weights=export_weights)
meta_export = SimpleNamespace(build=reference_build, export_weights=_on_meta)
