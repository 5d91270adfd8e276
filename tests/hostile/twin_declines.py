"""Leaks the last token into every position (a causality bug), and declines every spec in the
second process that loads it, the twin the self-comparisons' other side runs in (the first to
create a marker file is the main worker): a run that let the twin's refusal drop the example,
as a declined draw is dropped, would pass causality. A spec the main worker accepted and its
twin refused is the subject's error, not a draw to skip."""

import os

from _hostile import tag_dir
from torch import Tensor, nn

from attnspec import AttentionSpec
from attnspec.subjects.variants import build as reference_build
from attnspec.subjects.variants import export_weights as export_weights

__all__ = ["PROTOCOL", "build", "export_weights", "supports"]
PROTOCOL = 2
HOSTILE = {"args": ["--only", "causality", "--max-examples", "10", "--workers", "1"],
           "exit": 1, "status": "fail", "verdicts": {"causality": "error"},
           "message": ["causality", "was declined by supports, where this worker accepted"]}

try:
    os.close(os.open(tag_dir() / "main-worker", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    _TWIN = False
except FileExistsError:
    _TWIN = True


def supports(spec: AttentionSpec) -> bool:
    return not _TWIN and spec.n_embd % spec.n_head == 0


class _Leaks(nn.Module):
    def __init__(self, spec: AttentionSpec) -> None:
        super().__init__()
        self.inner = reference_build(spec)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.inner(x)
        return out + 1e-2 * x[:, -1:, :]  # the bug: the last token reaches every position


def build(spec: AttentionSpec) -> nn.Module:
    return _Leaks(spec)
