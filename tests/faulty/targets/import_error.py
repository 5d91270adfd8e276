import torch

from a_module_that_does_not_exist import kernel  # noqa: F401


def build(n_embd, n_head):
    return torch.nn.Identity()
