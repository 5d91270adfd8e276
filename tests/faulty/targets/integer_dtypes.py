"""Claims an integer dtype: attention on int8 is not something attnspec can draw."""

import torch

DTYPES = (torch.float32, torch.int8)


def build(n_embd, n_head):
    return torch.nn.Identity()
