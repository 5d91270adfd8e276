import torch


def build(config):
    return torch.nn.Identity()
