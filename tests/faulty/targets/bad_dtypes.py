import torch

DTYPES = ("float32", 3)


def build(n_embd, n_head):
    return torch.nn.Identity()
