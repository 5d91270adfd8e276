"""attnspec's view of my_flash_attn_func: FlashAttention's conventions, and what it takes."""

import torch
from my_flash import my_flash_attn_func

from attnspec.subjects.flash_style import *  # noqa: F403 - PROTOCOL, LAYOUT, CAUSAL, LSE, ...
from attnspec.subjects.flash_style import flash_attn_style

attention = flash_attn_style(my_flash_attn_func)
FEATURES = ("gqa", "scale", "cross", "noncausal")  # beyond causal self-attention
WINDOW = None  # it takes no window_size
BACKWARD = False  # a forward kernel: oracle_grad and lse_grad skip, saying so
DTYPES = (torch.float32, torch.bfloat16)
