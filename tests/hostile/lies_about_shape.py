"""Returns a tensor subclass that reports its input's shape (B, T, C) while its data are one
row of zeros, (1, 1, C): a worker that took the shape from the subject's object and copied the
data into it would broadcast the row and send back a full, causal, batch-independent output.
Expected: every property that calls forward is this subject's error, naming the subclass."""

import torch
from torch import Tensor, nn

from attnspec.subjects.reference import build as build_reference

__all__ = ["build"]


class Claims(Tensor):
    claimed: torch.Size

    @property  # type: ignore[misc]
    def shape(self) -> torch.Size:  # type: ignore[override]
        return self.claimed

    def size(self, dim: int | None = None) -> torch.Size | int:  # type: ignore[override]
        return self.claimed if dim is None else self.claimed[dim]


class _Lies(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.inner = build_reference(n_embd, n_head)

    def forward(self, x: Tensor) -> Tensor:
        out = torch.zeros(1, 1, x.shape[-1], dtype=x.dtype).as_subclass(Claims)
        out.claimed = x.shape
        return out


def build(n_embd: int, n_head: int) -> nn.Module:
    return _Lies(n_embd, n_head)


HOSTILE = {"args": ["--only", "width,causality", "--max-examples", "3"], "exit": 1,
           "status": "fail", "verdicts": {"width": "error", "causality": "error"},
           "message": ["width", "a subclass of torch.Tensor, not a plain torch.Tensor"]}
