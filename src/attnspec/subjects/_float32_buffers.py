"""The buffers transformers keeps in float32 whatever dtype it loads a model in, kept so by .to().

`from_pretrained(dtype=)` leaves a rotary embedding's frequencies (`inv_freq`,
`original_inv_freq`, Gemma 3's and OLMo 3's `full_attention_inv_freq`, ...) and, in 16-bit
dtypes, GPT-J's sin/cos table in float32, with their float32 values (`from_config(dtype=)` gives
the same dtypes, checked for every model type the hf adapter builds; its GPT-J table is built
from 16-bit frequencies). `nn.Module.to(dtype)`, which the worker applies to every built
module, would round them: in bfloat16 a frequency of 0.5306 becomes 0.5312, position 31 turns
0.02 rad too far, and the output moves 7x the reference's own bfloat16 error at trained-size
logits. That is a model users do not run, so the hf adapters restore the float32 values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["Float32Buffers", "kept_in_float32"]


def kept_in_float32(name: str, dtype: torch.dtype) -> bool:
    """Whether transformers leaves the buffer `name` float32 in a model loaded in `dtype`: the
    rotary frequencies always (built with .float()); GPT-J's table, built in the default dtype,
    in 16-bit loads (float64 ones make it float64)."""
    if name.endswith("inv_freq"):
        return True
    return name == "embed_positions" and dtype in (torch.bfloat16, torch.float16)


class Float32Buffers(nn.Module):
    """A module whose float32 rotary buffers stay float32 (on the new device) through .to(),
    .half(), .bfloat16() and .double() as `kept_in_float32` says, as transformers loads them;
    every other buffer and every parameter is converted as usual."""

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> Any:
        # Before the first conversion: as built (every name kept in some dtype is kept in
        # bfloat16). The worker converts once, and the adapters refuse dynamic NTK (whose
        # forward re-registers inv_freq), so the snapshot stays true.
        if "_float32_buffers" not in self.__dict__:
            self.__dict__["_float32_buffers"] = {
                (owner, name): buffer.detach().clone()
                for owner, module in self.named_modules()
                for name, buffer in module.named_buffers(recurse=False)
                if buffer.dtype == torch.float32 and kept_in_float32(name, torch.bfloat16)}
        out = super()._apply(fn, recurse)  # type: ignore[no-untyped-call]
        kept: dict[tuple[str, str], Tensor] = self.__dict__["_float32_buffers"]
        for (owner, name), value in kept.items():
            try:
                module = self.get_submodule(owner)
            except AttributeError:  # replaced since: nothing of it to restore
                continue
            now = module._buffers.get(name)
            if now is not None and now.dtype != torch.float32 and kept_in_float32(name, now.dtype):
                module._buffers[name] = value.to(device=now.device, copy=True)
        return out
