"""The reference, for faulty subjects to misbehave around."""

from collections.abc import Callable, Mapping

from torch import Tensor, nn

from attnspec.subjects.reference import build as reference_build

__all__ = ["build_before", "export_weights", "reference_build"]


def export_weights(module: nn.Module) -> Mapping[str, Tensor]:
    """The reference's weights, also when it is wrapped as `module.inner`."""
    inner = getattr(module, "inner", module)
    return inner.export_weights()  # type: ignore[no-any-return, operator]


class _Before(nn.Module):
    """The reference, after `before(x)` has had its turn to misbehave (raise, hang, crash)."""

    def __init__(self, n_embd: int, n_head: int, before: Callable[[Tensor], None]) -> None:
        super().__init__()
        self.inner = reference_build(n_embd, n_head)
        self.before = before

    def forward(self, x: Tensor) -> Tensor:
        self.before(x)
        return self.inner(x)  # type: ignore[no-any-return]


def build_before(before: Callable[[Tensor], None]) -> Callable[[int, int], nn.Module]:
    """A `build` whose modules call `before(x)` ahead of the reference's forward."""

    def build(n_embd: int, n_head: int) -> nn.Module:
        return _Before(n_embd, n_head, before)

    return build
