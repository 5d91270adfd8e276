"""gqa_grouping: which query heads read which key/value head."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..reference.spec import AttentionSpec
from ..reference.variants import spec_pipeline
from . import tolerance as tol
from .diagnose import grouped_weights

if TYPE_CHECKING:
    pass



from .base import PASS, Context, Example, Outcome, _cast, _fail, _inputs, _oracle, _reference
from .yardsticks import _checked_weights


def _grouped(weights: Mapping[str, Tensor], spec: AttentionSpec, reads: Sequence[int],
             ) -> tuple[dict[str, Tensor], AttentionSpec]:
    """Weights and spec in which query head h reads kv head reads[h]: every query head gets its
    own copy of that kv head's k and v rows (an MHA spec, so positions and slopes stay put)."""
    D = spec.D
    rows = torch.cat([torch.arange(g * D, (g + 1) * D) for g in reads])
    out = dict(weights)
    for key in ("k_weight", "v_weight", "k_bias", "v_bias"):
        if key in weights:
            out[key] = weights[key][rows]
    return out, dataclasses.replace(spec, n_kv_head=None)


def _head_contributions(x: Tensor, weights: Mapping[str, Tensor], spec: AttentionSpec,
                        ) -> Tensor:
    """c[h, g] (H, G, B, T, C): query head h's share of the output (o bias left out) if it read
    kv head g, in float64."""
    H, G, D = spec.n_head, spec.G, spec.D
    w64 = _cast(weights, torch.float64, "cpu")
    x64 = x.to(torch.float64).cpu()
    o_heads = w64["o_weight"].reshape(spec.n_embd, H, D)
    shares = []
    for g in range(G):
        grouped, mha = _grouped(w64, spec, [g] * H)
        kept: list[Tensor] = []
        with torch.no_grad():
            spec_pipeline(x64, grouped, mha, 0, kept)
            v = torch.nn.functional.linear(x64, w64["v_weight"][g * D:(g + 1) * D],
                                           w64["v_bias"][g * D:(g + 1) * D]
                                           if "v_bias" in w64 else None)
            heads = kept[0] @ v[:, None]  # (B, H, T, D): every query head reading kv head g
            shares.append(torch.einsum("bhtd,chd->hbtc", heads, o_heads))
    return torch.stack(shares, dim=1)


def check_gqa_grouping(ctx: Context, ex: Example) -> Outcome:
    """Query head h reads kv head h // (H / G). Which kv head each query head really reads is
    found by fitting the subject's output with every (query head, kv head) share of the
    reference on its exported weights; a different assignment that fits is a failure.

    Black-box it cannot be told: reading h % G is h // (H / G) with the query heads permuted,
    which random weights cannot reveal; hence the exported weights."""
    spec = ex.attention
    H, G = spec.n_head, spec.G
    # Enough rows that the H * G shares are told apart: twice as many outputs as unknowns.
    rows = max(ex.B, math.ceil(2 * H * G / (ex.T * ex.C)))
    x = _inputs(ex, shape=(rows, ex.T, ex.C))
    (exported,) = ctx.request(ex, [{"op": "export"}])
    weights = _checked_weights(exported, ex)
    ctx.submit(None, [{"op": "forward", "x": x}])
    declared = [h // (H // G) for h in range(H)]
    golden = _reference(x, weights, ex, torch.float64)  # while the subject runs
    yard = tol.max_abs_diff(_reference(x, weights, ex), golden)[0]
    (out,) = ctx.collect_forwards(ex, [x])
    allowed = tol.allowed(yard, ex.dtype, float(golden.abs().max()))
    if tol.max_abs_diff(out, golden)[0] <= allowed:
        return Outcome(PASS)
    tiled = [h % G for h in range(H)]
    x64, w64 = x.to(torch.float64), _cast(weights, torch.float64, "cpu")
    matches = []
    for k_reads, v_reads in ((tiled, tiled), (declared, tiled), (tiled, declared)):
        # The common mistakes first, keys and values apart: one of them may be tiled alone.
        grouped, mha = grouped_weights(w64, spec, k_reads, v_reads)
        err, index = tol.max_abs_diff(out, _oracle(x64, grouped, dataclasses.replace(
            ex, spec=mha)))
        if err <= allowed:
            matches.append((k_reads, v_reads, err, index))
    if matches:
        k_reads, v_reads, err, index = matches[0]
        which = ("keys and values" if k_reads == v_reads else
                 "values" if v_reads == tiled else "keys")
        rest = ("" if k_reads == v_reads else
                f", while the {'keys' if which == 'values' else 'values'} are grouped as "
                "declared (h // (H / G))")
        if len(matches) > 1:  # values tiled, keys either way: the keys leave no trace here
            which, rest = "values", (", and which kv head the keys come from does not show on "
                                     "this input (each query sees a single key)")
        return _fail(f"with H={H} query heads on G={G} kv heads, query head h must read kv "
                     f"head h // (H / G) = h // {H // G} (repeat_interleave), but the "
                     f"subject's output is the reference's with query heads reading the "
                     f"{which} of kv heads {tiled} (matched to {err:.3g}, allowed "
                     f"{allowed:.3g}): that is h % G, the {which} tiled (repeat) instead of "
                     f"repeated in place{rest}.", err, allowed, index)
    shares = _head_contributions(x, weights, spec)  # (H, G, B, T, C)
    target = out.to(torch.float64)
    if "o_bias" in weights:
        target = target - weights["o_bias"].detach().to(torch.float64).cpu()
    if not bool(target.isfinite().all()):
        return Outcome(PASS, notes=["non-finite output: no grouping to identify (see finite)"])
    fit = torch.linalg.lstsq(shares.reshape(H * G, -1).T, target.reshape(-1, 1)).solution
    reads = [int(i) for i in fit.reshape(H, G).argmax(dim=1)]
    if reads == declared:
        return Outcome(PASS, notes=["the output differs from the reference, but not by its "
                                    "grouping (see oracle)"])
    grouped, mha = _grouped(weights, spec, reads)
    theirs = _oracle(x.to(torch.float64), _cast(grouped, torch.float64, "cpu"),
                     dataclasses.replace(ex, spec=mha))
    err, index = tol.max_abs_diff(out, theirs)
    if err > allowed:
        return Outcome(PASS, notes=["the output fits no assignment of query heads to kv heads "
                                    "(see oracle)"])
    wrong = [h for h in range(H) if reads[h] != declared[h]]
    shown = ", ".join(f"{h} -> {reads[h]} (not {declared[h]})" for h in wrong[:6])
    return _fail(f"with H={H} query heads on G={G} kv heads, query head h must read kv head "
                 f"h // (H / G) = h // {H // G} (repeat_interleave), but the subject's output "
                 f"is the reference's with query heads reading kv heads {reads} (matched to "
                 f"{err:.3g}, allowed {allowed:.3g}): {shown}.", err, allowed, index)
