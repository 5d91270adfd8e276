"""The reference, for the hostile subjects to attack the run around: `around(before)` gives a
`build` whose modules call `before(x)` ahead of the reference's forward, and its
`export_weights`; `tag_dir()` is where a subject may keep what it counts across processes."""

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from torch import Tensor, nn

from attnspec.subjects.reference import build as reference_build

__all__ = ["around", "export_weights", "tag_dir"]


def tag_dir() -> Path:
    """The scratch folder the test gives the run ($ATTNSPEC_HOSTILE_DIR), else /tmp."""
    return Path(os.environ.get("ATTNSPEC_HOSTILE_DIR", "/tmp"))


class _Around(nn.Module):
    def __init__(self, n_embd: int, n_head: int, before: Callable[[Tensor], None]) -> None:
        super().__init__()
        self.inner = reference_build(n_embd, n_head)
        self.before = before

    def forward(self, x: Tensor) -> Tensor:
        self.before(x)
        return self.inner(x)  # type: ignore[no-any-return]


def around(before: Callable[[Tensor], None]) -> Callable[[int, int], nn.Module]:
    def build(n_embd: int, n_head: int) -> nn.Module:
        return _Around(n_embd, n_head, before)

    return build


def export_weights(module: nn.Module) -> Mapping[str, Tensor]:
    return module.inner.export_weights()  # type: ignore[no-any-return, operator, union-attr]
