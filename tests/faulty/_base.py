"""The reference, for faulty subjects to misbehave around."""

from collections.abc import Mapping

from torch import Tensor, nn

from attnspec.subjects.reference import build as reference_build

__all__ = ["export_weights", "reference_build"]


def export_weights(module: nn.Module) -> Mapping[str, Tensor]:
    """The reference's weights, also when it is wrapped as `module.inner`."""
    inner = getattr(module, "inner", module)
    return inner.export_weights()  # type: ignore[no-any-return, operator]
