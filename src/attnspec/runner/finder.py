"""Weights found by name, for a module that exports none: the worker's side.

Most attention modules users bring declare nothing, and name their projections as the field
does: q_proj, k_proj, v_proj, o_proj (Llama), c_attn and c_proj (GPT-2, fused, in nn.Linear's
layout or Conv1D's transposed one), qkv or Wqkv or query_key_value (fused, [q|k|v] or GPT-NeoX's
per-head interleave), nn.MultiheadAttention's in_proj_weight and out_proj, ... Each guess here
is only a candidate: the runner keeps one only where the reference with its weights reproduces
the subject on a one-token and a longer probe (session/engine.py, `Session._find_weights`), so a
wrong guess costs a probe, never a verdict. Nothing here is judged; the guesses run in the
subject's process, with the trust an export_weights has.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["Candidate", "candidates"]

# Separate projections, by family: q, k, v names (the out projection from OUT_NAMES).
SEPARATE = (("q_proj", "k_proj", "v_proj"), ("query", "key", "value"), ("to_q", "to_k", "to_v"),
            ("wq", "wk", "wv"), ("q", "k", "v"), ("c_q", "c_k", "c_v"), ("W_q", "W_k", "W_v"),
            ("q_lin", "k_lin", "v_lin"))
FUSED = ("c_attn", "qkv", "Wqkv", "query_key_value", "qkv_proj", "in_proj", "to_qkv", "W_pack",
         "wqkv")
OUT_NAMES = ("o_proj", "out_proj", "c_proj", "dense", "proj", "wo", "to_out", "out", "o",
             "out_lin", "W_o", "proj_out")
NORMS = (("q_norm", "k_norm"), ("q_layernorm", "k_layernorm"), ("query_norm", "key_norm"),
         ("norm_q", "norm_k"), ("q_ln", "k_ln"))
_DEPTH = 4  # wrappers descended through, one sole child with parameters at a time
_MOST = 8  # candidates sent back at most


@dataclass(frozen=True)
class Candidate:
    """One guess: its id (how to find it again in another build), what it says in a report,
    and the weights it gives (views of the module's parameters, so gradients flow back)."""

    id: str
    describe: str
    weights: Callable[[], dict[str, Tensor]]


def _linear(module: Any) -> tuple[Tensor, Tensor | None, bool] | None:
    """(weight, bias, transposed) of a projection: an nn.Linear, GPT-2's Conv1D (weight stored
    (in, out)), anything with a 2-D weight, or a Sequential/ModuleList whose first is one
    (diffusers' to_out)."""
    if isinstance(module, nn.Sequential | nn.ModuleList) and len(module) > 0:
        return _linear(module[0])
    weight = getattr(module, "weight", None)
    if not isinstance(module, nn.Module) or not isinstance(weight, Tensor) or weight.dim() != 2:
        return None
    bias = getattr(module, "bias", None)
    transposed = type(module).__name__ == "Conv1D"  # transformers.pytorch_utils.Conv1D
    return weight, bias if isinstance(bias, Tensor) else None, transposed


def _oriented(found: tuple[Tensor, Tensor | None, bool], out: int, inp: int,
              ) -> tuple[Tensor, Tensor | None] | None:
    """The weight as nn.Linear holds it, (out, in), or None if it has neither orientation."""
    weight, bias, transposed = found
    if transposed:
        weight = weight.t()
    if tuple(weight.shape) != (out, inp):
        if tuple(weight.shape) == (inp, out) and not transposed:
            weight = weight.t()  # a weight kept (in, out) by a module of its own
        else:
            return None
    if bias is not None and tuple(bias.shape) != (out,):
        return None
    return weight, bias


def _children(module: nn.Module) -> dict[str, nn.Module]:
    return dict(module.named_children())


def _has_params(module: nn.Module) -> bool:
    return any(True for _ in module.parameters())


def _nodes(module: nn.Module) -> Iterator[tuple[str, nn.Module]]:
    """The module, then (while it has one sole child with parameters) that child, and so on."""
    prefix, node = "", module
    for _ in range(_DEPTH + 1):
        yield prefix, node
        holding = [(name, child) for name, child in _children(node).items()
                   if _has_params(child)]
        if len(holding) != 1 or any(isinstance(p, Tensor) for p in node.parameters(
                recurse=False)):
            return
        name, node = holding[0]
        prefix += name + "."


def candidates(module: nn.Module, spec: Any) -> list[Candidate]:
    """Every mapping of the module's parameters onto the reference's weights that its names
    suggest, most likely first (at most 8)."""
    found: list[Candidate] = []
    for prefix, node in _nodes(module):
        found += _at(prefix, node, spec)
        if found:
            break
    return found[:_MOST]


def _at(prefix: str, node: nn.Module, spec: Any) -> list[Candidate]:
    kids = _children(node)
    H, G, D, C = spec.n_head, spec.G, spec.D, spec.n_embd
    q_out, kv_out = H * D, G * D
    outs = [name for name in OUT_NAMES if name in kids and _linear(kids[name]) is not None]
    found: list[Candidate] = []
    if isinstance(node, nn.MultiheadAttention):
        found += _mha(prefix, node, spec)
    for names in SEPARATE:
        if not all(n in kids for n in names):
            continue
        projs = [_linear(kids[n]) for n in names]
        for out_name in outs:
            o = _linear(kids[out_name])
            shaped = [None if p is None else _oriented(p, n, C)
                      for p, n in zip(projs, (q_out, kv_out, kv_out), strict=True)]
            o_shaped = None if o is None else _oriented(o, C, q_out)
            if any(w is None for w in shaped) or o_shaped is None:
                continue
            parts = [f"{prefix}{n}" for n in (*names, out_name)]
            pieces = [*(w for w in shaped if w is not None), o_shaped]
            found.append(_candidate("separate:" + ",".join(parts),
                                    ", ".join(parts) + " (separate q, k, v)", pieces, node, spec,
                                    prefix))
            break
    for fused in FUSED:
        if fused not in kids or fused in outs:
            continue
        proj = _linear(kids[fused])
        if proj is None:
            continue
        for out_name in outs:
            o = _linear(kids[out_name])
            whole = _oriented(proj, q_out + 2 * kv_out, C)
            o_shaped = None if o is None else _oriented(o, C, q_out)
            if whole is None or o_shaped is None:
                continue
            conv = " as Conv1D, transposed" if proj[2] else ""
            for layout, what in (("split", "fused q|k|v"), ("grouped", "fused per head, q k v "
                                                             "interleaved as GPT-NeoX")):
                found.append(_candidate(
                    f"fused-{layout}:{prefix}{fused},{prefix}{out_name}",
                    f"{prefix}{fused} ({what}{conv}), {prefix}{out_name}",
                    [*_split(whole, layout, H, G, D), o_shaped], node, spec, prefix))
            break
    return found


def _split(whole: tuple[Tensor, Tensor | None], layout: str, H: int, G: int, D: int,
           ) -> list[tuple[Tensor, Tensor | None]]:
    """A fused (H·D + 2·G·D, C) projection as q, k and v: [q|k|v] (split), or per kv group
    [its H/G query heads, k, v] (grouped: GPT-NeoX's per-head q, k, v when G = H)."""
    weight, bias = whole

    def cut(t: Tensor) -> list[Tensor]:
        if layout == "split":
            return list(torch.split(t, [H * D, G * D, G * D], dim=0))
        per = H // G
        grouped = t.reshape(G, per + 2, D, *t.shape[1:])
        return [grouped[:, :per].reshape(H * D, *t.shape[1:]),
                grouped[:, per].reshape(G * D, *t.shape[1:]),
                grouped[:, per + 1].reshape(G * D, *t.shape[1:])]

    weights = cut(weight)
    biases: list[Tensor | None] = [None] * 3 if bias is None else list(cut(bias))
    return list(zip(weights, biases, strict=True))


def _mha(prefix: str, node: nn.MultiheadAttention, spec: Any) -> list[Candidate]:
    """nn.MultiheadAttention: in_proj_weight ([q|k|v]) or q/k/v_proj_weight, and out_proj."""
    out = _linear(node.out_proj)
    if out is None or node.num_heads != spec.n_head:
        return []
    C = spec.n_embd
    o_shaped = _oriented(out, C, spec.n_head * spec.D)
    if o_shaped is None:
        return []
    if node.in_proj_weight is not None:
        whole = _oriented((node.in_proj_weight, node.in_proj_bias, False),
                          (spec.n_head + 2 * spec.G) * spec.D, C)
        if whole is None:
            return []
        pieces = [*_split(whole, "split", spec.n_head, spec.G, spec.D), o_shaped]
        what = f"{prefix}in_proj_weight (fused q|k|v), {prefix}out_proj (nn.MultiheadAttention)"
    else:
        biases = (None,) * 3 if node.in_proj_bias is None else torch.split(
            node.in_proj_bias, [spec.n_head * spec.D, spec.G * spec.D, spec.G * spec.D])
        pieces = []
        for name, bias, rows in zip(("q_proj_weight", "k_proj_weight", "v_proj_weight"), biases,
                                    (spec.n_head * spec.D, spec.G * spec.D, spec.G * spec.D),
                                    strict=True):
            shaped = _oriented((getattr(node, name), bias, False), rows, C)
            if shaped is None:
                return []
            pieces.append(shaped)
        pieces.append(o_shaped)
        what = f"{prefix}q/k/v_proj_weight, {prefix}out_proj (nn.MultiheadAttention)"
    return [_candidate(f"mha:{prefix}", what, pieces, node, spec, prefix)]


def _candidate(ident: str, describe: str, pieces: list[tuple[Tensor, Tensor | None]],
               node: nn.Module, spec: Any, prefix: str) -> Candidate:
    """The candidate whose q, k, v, o are `pieces`, with the node's q/k norms and sinks where
    the spec has them; a bias the module lacks is zero where the spec has biases."""
    kids = _children(node)
    norms = next(((a, b) for a, b in NORMS if a in kids and b in kids), None) \
        if spec.qk_norm is not None else None
    # Norm weights kept as parameters of the attention itself (q_norm_weight, ...), not modules.
    own = {k: v for k, v in node.named_parameters(recurse=False)
           if k in ("q_norm_weight", "k_norm_weight", "q_norm_bias", "k_norm_bias")} \
        if spec.qk_norm is not None and norms is None else {}
    sinks = getattr(node, "sinks", None) if spec.sinks else None
    if norms is not None:
        describe += f", {prefix}{norms[0]}, {prefix}{norms[1]}"
    elif own:
        describe += ", " + ", ".join(prefix + k for k in own)
    if isinstance(sinks, Tensor):
        describe += f", {prefix}sinks"

    def weights() -> dict[str, Tensor]:
        out: dict[str, Tensor] = {}
        for name, (weight, bias) in zip("qkvo", pieces, strict=True):
            out[f"{name}_weight"] = weight
            if spec.bias:
                out[f"{name}_bias"] = bias if bias is not None else torch.zeros(
                    weight.shape[0], dtype=weight.dtype, device=weight.device)
        if norms is not None:
            for name, child in zip("qk", (kids[norms[0]], kids[norms[1]]), strict=True):
                norm_weight = getattr(child, "weight", None)
                if isinstance(norm_weight, Tensor):
                    out[f"{name}_norm_weight"] = norm_weight
                norm_bias = getattr(child, "bias", None)
                if isinstance(norm_bias, Tensor) and spec.qk_norm.kind == "layer":
                    out[f"{name}_norm_bias"] = norm_bias
        for key, value in own.items():
            if key.endswith("_weight") or spec.qk_norm.kind == "layer":
                out[key] = value
        if isinstance(sinks, Tensor):
            out["sinks"] = sinks
        return out

    return Candidate(ident, describe, weights)
