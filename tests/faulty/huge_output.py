"""Returns an output 64 times its input's size, (B, T, C, 64): a worker that sent it whole would
hold it several times over (512 MiB of it grew one worker to 20 GB)."""

import torch
from _base import build_before
from torch import Tensor, nn

__all__ = ["build"]


class _Huge(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.inner = build_before(lambda x: None)(n_embd, n_head)

    def forward(self, x: Tensor) -> Tensor:
        return self.inner(x)[..., None].expand(*x.shape, 64) + torch.zeros(())


def build(n_embd: int, n_head: int) -> nn.Module:
    return _Huge(n_embd, n_head)
