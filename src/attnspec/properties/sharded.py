"""Sharded attention: tp_equivalence and cp_equivalence over ranks."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..common.grad import vjp
from ..common.protocol import BadAnswer, check_results
from ..reference.spec import AttentionSpec
from ..reference.variants import spec_attention
from . import tolerance as tol

if TYPE_CHECKING:
    pass



from .base import (
    PASS,
    Context,
    Example,
    Outcome,
    SubjectFault,
    Unsupported,
    _at,
    _cast,
    _info,
    _inputs,
    _reference_weights,
    _where,
)
from .yardsticks import _checked_weights, _trained


def _rank_fault(answers: Sequence[Mapping[str, Any]]) -> str | None:
    """The message of the rank to blame when some rank answered with an error: the first whose
    error is its own, not gloo's word that a peer failed it."""
    from ..common.protocol import consequence

    faults = [(r, str(a.get("message", a))) for r, a in enumerate(answers)
              if a.get("kind") not in ("ok", "unsupported")]
    if not faults:
        return None
    world = len(answers)
    own = [(r, m) for r, m in faults if not consequence(m)]
    if own:
        rank, message = own[0]
        return f"rank {rank} of {world}: {message}"
    failed = "; ".join(f"rank {r}: {m}" for r, m in faults)
    if len(faults) == world:
        return (f"every rank failed in a collective ({failed}): the ranks deadlocked, most "
                "likely in mismatched collectives.")
    return f"ranks failed in a collective that others left ({failed})."


def _blamed(key: str, first: int, outs: Sequence[Tensor], want: Tensor,
            weights: Mapping[str, Tensor] | None, ex: Example, err: float) -> tuple[int, str]:
    """The rank to name for a sharded result off by `err`, and why: under tensor parallelism
    the ranks all-reduce, so where all return the same result the first one off says nothing.
    The output's error is then mapped back through o's columns onto the heads (rank r holds
    heads r·H/W ..), given the exported weights; d/dx's cannot be, so no rank is named."""
    if first < 0 or len(outs) < 2:
        return first, ""  # positions (CP) name their owner already
    spread = max(tol.max_abs_diff(o, outs[0])[0] for o in outs[1:])
    if spread * 10 > err:
        return first, ""  # the ranks differ by as much: the first one off is the one to name
    W, spec = len(outs), ex.attention
    same = " Every rank returns this same result (the ranks' outputs are all-reduced)"
    if key != "out" or weights is None:
        return -1, (f"{same}; which rank's heads are wrong cannot be told from "
                    + ("d/dx." if key != "out" else "it without export_weights."))
    o = weights["o_weight"].detach().to(torch.float64).cpu()  # (C, H·D)
    delta = (outs[0].to(torch.float64) - want.to(torch.float64)).reshape(-1, o.size(0))
    heads = torch.linalg.lstsq(o, delta.T).solution  # (H·D, N): each head's share, merged
    energy = heads.reshape(W, -1).pow(2).sum(dim=1)
    rank = int(energy.argmax())
    part = float(energy[rank] / energy.sum().clamp_min(1e-300))
    per = spec.n_head // W
    held = f"head {rank}" if per == 1 else f"heads {rank * per}..{(rank + 1) * per - 1}"
    return rank, (f"{same}, so the rank named is the one whose heads are wrong: mapped back "
                  f"through o's columns, {part:.0%} of the error lies in query {held}, rank "
                  f"{rank}'s.")


def _sharded_yardsticks(ex: Example, x: Tensor, cotangent: Tensor, kind: str, layout: str,
                        weights: Mapping[str, Tensor] | None = None,
                        ) -> tuple[float, float, float, tuple[Tensor, Tensor]]:
    """How far a correctly sharded computation in the example's dtype lands from float64, for
    the output, the input gradient and the weight gradients: the larger of the reference's and
    the simulated sharded reference's errors, on `weights` (attnspec's own by default); and the
    float64 reference's output and input gradient there."""
    from ..reference.sharding import cp_reference, tp_reference

    spec = ex.attention
    weights = _reference_weights(ex) if weights is None else _cast(weights, torch.float64, "cpu")
    dtype = x.dtype

    def run(fn: Callable[..., Tensor], dt: torch.dtype) -> tuple[Tensor, Tensor, list[Tensor]]:
        with torch.enable_grad():
            xs = x.to(dt).requires_grad_(True)
            leaves = {k: v.to(dt).requires_grad_(True) for k, v in weights.items()}
            out = fn(xs, leaves)
            grads = vjp([out], [xs, *leaves.values()], [cotangent.to(dt)])
        gx = torch.zeros_like(xs) if grads[0] is None else grads[0]
        return out.detach(), gx, [g for g in grads[1:] if g is not None]

    def sharded(xs: Tensor, w: Mapping[str, Tensor]) -> Tensor:
        if kind == "heads":
            return tp_reference(xs, w, spec, ex.world)
        return cp_reference(xs, w, spec, ex.world, layout)

    gold = run(lambda xs, w: spec_attention(xs, w, spec), torch.float64)
    out_yard = grad_yard = weight_yard = 0.0
    for fn in (lambda xs, w: spec_attention(xs, w, spec), sharded):
        out, gx, gw = run(fn, dtype)
        out_yard = max(out_yard, tol.max_abs_diff(out, gold[0])[0])
        grad_yard = max(grad_yard, tol.max_abs_diff(gx, gold[1])[0])
        weight_yard = max([weight_yard, *(tol.max_abs_diff(a, b)[0]
                                          for a, b in zip(gw, gold[2], strict=True))])
    return out_yard, grad_yard, weight_yard, (gold[0], gold[1])


def _estimated_sharded_yardsticks(ex: Example, x: Tensor, cotangent: Tensor, kind: str,
                                  layout: str) -> tuple[float, float, float, tuple[Tensor, Tensor]]:
    """Without exports: the larger yardsticks of attnspec's random weights and of the same
    at trained logits (`_yardstick_weights`)."""
    base = _reference_weights(ex)
    trained = _trained(base, x, ex.attention)
    runs = [_sharded_yardsticks(ex, x, cotangent, kind, layout, w)
            for w in (base, *([trained] if trained is not None else []))]
    return (max(r[0] for r in runs), max(r[1] for r in runs), max(r[2] for r in runs),
            runs[0][3])


def _close(what: str, got: Tensor, want: Tensor, own: float, yard: float, ex: Example,
           ) -> tuple[float, float, tuple[int, ...] | None] | None:
    """(error, allowed, index) when `got` (sharded) is farther from `want` (unsharded) than two
    computations each as accurate as the reference in this dtype can be; None when close.
    `own`: the unsharded subject's own distance from its float64 run."""
    if got.shape != want.shape:
        raise SubjectFault(f"{what}: the sharded module gave shape {tuple(got.shape)}, the "
                           f"unsharded one {tuple(want.shape)}.")
    err, index = tol.max_abs_diff(got, want)
    allowed = tol.allowed(2 * max(own, yard), ex.dtype, float(want.abs().max()))
    return (err, allowed, index) if err > allowed else None


@dataclass
class _Ranks:
    """One sharded example's ranks as the checks compare them: which positions each holds,
    its results, and how a failure names the rank to blame."""

    ex: Example
    kind: str  # "heads" or "positions"
    layout: str
    held: list[list[int]]  # each rank's positions
    results: list[dict[str, Any]]

    @property
    def W(self) -> int:  # noqa: N802 - the world size, as everywhere
        return len(self.held)

    @property
    def hook(self) -> str:
        return "shard_heads" if self.kind == "heads" else "shard_positions"

    def assembled(self, key: str) -> list[tuple[int, Tensor]]:
        """(rank, the full tensor by that rank): TP ranks each give it all; CP ranks their
        positions, put back in place."""
        ex, W = self.ex, self.W
        for r, res in enumerate(self.results):
            if res[key] is None:
                raise SubjectFault(f"rank {r} of {W}: d(output)/d(input) is missing (the "
                                   "sharded output does not depend on the input).")
            want = (ex.B, len(self.held[r]), ex.C)
            if tuple(res[key].shape) != want:
                raise SubjectFault(f"rank {r} of {W}: {self.hook}'s module returned "
                                   f"{'output' if key == 'out' else 'input gradient'} of shape "
                                   f"{tuple(res[key].shape)} for input {want}.")
        if self.kind == "heads":
            return [(r, res[key]) for r, res in enumerate(self.results)]
        whole = torch.empty((ex.B, ex.T, ex.C), dtype=self.results[0][key].dtype)
        for idx, res in zip(self.held, self.results, strict=True):
            whole[:, idx] = res[key]
        return [(-1, whole)]

    def owner(self, index: tuple[int, ...] | None) -> int:
        if index is None or self.kind == "heads":
            return -1
        return next(r for r, idx in enumerate(self.held) if index[1] in idx)

    def failure(self, what: str, r: int, found: tuple[float, float, tuple[int, ...] | None],
                ) -> Outcome:
        err, allowed, index = found
        r = self.owner(index) if r < 0 else r
        who = f"rank {r} of {self.W}" if r >= 0 else f"{self.W} ranks"  # r < 0: no position
        where = _where(index) or {}
        if r >= 0:
            where["rank"] = r
        layout_note = f", {self.layout} layout" if self.kind == "positions" else ""
        return Outcome("fail", f"{what} on {who} ({self.hook}{layout_note}) differs from "
                       f"the unsharded module's by {err:.3g}, allowed {allowed:.3g}"
                       f"{_at(index)}.", err, allowed, where or None)


_Golden = tuple[float, float, float, tuple[Tensor, Tensor]]


def _own_error(value: Tensor, value64: Tensor | None) -> float:
    """How far the unsharded module's own run is from its float64 run (0: none was made)."""
    if value64 is not None and value64.shape != value.shape:
        raise SubjectFault(f"the unsharded module's float64 run gave shape "
                           f"{tuple(value64.shape)} where its own run gave "
                           f"{tuple(value.shape)}.")
    return 0.0 if value64 is None else tol.max_abs_diff(value, value64)[0]


def _check_sharded(ctx: Context, ex: Example, kind: str) -> Outcome:
    from ..reference.sharding import shard_positions_of

    if ctx.gangs is None or not ex.world:
        raise SubjectFault("a sharded example needs ranks; this executor has none.")
    W = ex.world
    layout = _info(ctx, "cp_layout", "head_tail")
    x, cotangent = _inputs(ex, salt=9100), _inputs(ex, salt=9200)
    held = ([list(range(ex.T))] * W if kind == "heads"
            else [shard_positions_of(ex.T, r, W, layout) for r in range(W)])
    ranks, mine, own64, shared, golden, yards = _run_sharded(ctx, ex, kind, layout, held, x,
                                                             cotangent)
    return (_against_unsharded(ranks, mine, own64, shared, yards)
            or _against_golden(ranks, mine, shared, golden)
            or _param_grads(ranks, mine, own64, yards))


def _run_sharded(ctx: Context, ex: Example, kind: str, layout: str, held: list[list[int]],
                 x: Tensor, cotangent: Tensor) -> tuple[
                     _Ranks, dict[str, Any], dict[str, Any] | None, Any, _Golden | None,
                     tuple[float, float, float]]:
    """The ranks' sharded run and, beside it, the unsharded module's (and its float64 run,
    and the golden on its exported weights, where it exports them), checked as answers."""
    W = len(held)
    hook = "shard_heads" if kind == "heads" else "shard_positions"
    build = {**ex.build(), "shard": kind}
    assert ctx.gangs is not None
    gang = ctx.gangs(W)
    gang.submit([{"build": build, "steps": [{"op": "sharded_grad", "x": x[:, idx],
                                              "cotangent": cotangent[:, idx]}]}
                 for idx in held])
    # With exports, the golden on the exported weights too: the unsharded run made beside the
    # ranks is the subject's, and its process can see the ranks and copy their error.
    export = bool(getattr(getattr(ctx.executor, "info", None), "has_export", False))
    ctx.submit(ex, [*([{"op": "export"}] if export else []),
                    {"op": "grad", "x": x, "cotangent": cotangent, "params": True}])
    claimed = getattr(getattr(ctx.executor, "info", None), "dtypes", None)
    golden: _Golden | None = None
    try:
        *exported, mine = ctx.collect()
        shared = _checked_weights(exported[0], ex) if exported else None
        if shared is not None:
            golden = _sharded_yardsticks(ex, x, cotangent, kind, layout, shared)
        own64 = None  # the subject's own float64 run: how far this dtype's rounding takes it
        if ex.dtype != "float64" and (claimed is None or "float64" in claimed):
            (own64,) = ctx.request(dataclasses.replace(ex, dtype="float64"), [
                {"op": "grad", "x": x.double(), "cotangent": cotangent.double(),
                 "params": True}])
        yards = golden if golden is not None else _estimated_sharded_yardsticks(
            ex, x, cotangent, kind, layout)  # while the ranks run
    except Exception:
        gang.collect()  # the ranks' answers, so that the next example starts clean
        raise
    except BaseException:  # Ctrl-C: do not wait for ranks that may hang
        gang.restart_later()
        raise
    answers = gang.collect()
    declined = [r for r, a in enumerate(answers) if a.get("kind") == "unsupported"]
    if declined and len(declined) == W:
        raise Unsupported(str(answers[0].get("message")))
    if declined:
        raise SubjectFault(f"supports(spec) declined on rank{'s' * (len(declined) > 1)} "
                           f"{', '.join(map(str, declined))} of {W} only: every rank must "
                           "answer alike for the same spec.")
    blame = _rank_fault(answers)
    if blame is not None:
        raise SubjectFault(f"{hook}(module, mesh) over {W} ranks: {blame}")
    for r, (a, idx) in enumerate(zip(answers, held, strict=True)):  # a rank is the subject's
        try:
            check_results(a, [{"op": "sharded_grad", "x": x[:, idx]}], device=ex.device,
                          who=f"rank {r} of {W}")
        except BadAnswer as bad:
            gang.restart_later()  # its next answer cannot be matched to a request
            raise SubjectFault(str(bad)) from None
    if mine["grad_x"] is None:
        raise SubjectFault("the unsharded module's output does not depend on its input through "
                           "autograd, so gradients cannot be compared.")
    ranks = _Ranks(ex, kind, layout, held, [a["results"][0] for a in answers])
    return ranks, mine, own64, shared, golden, (yards[0], yards[1], yards[2])


def _against_unsharded(ranks: _Ranks, mine: dict[str, Any], own64: dict[str, Any] | None,
                       shared: Any, yards: tuple[float, float, float]) -> Outcome | None:
    """The ranks' output and input gradient against the unsharded module's run."""
    ex = ranks.ex
    for key, what, yard in (("out", "the output", yards[0]),
                            ("grad_x", "d(output)/d(input)", yards[1])):
        own = _own_error(mine[key], None if own64 is None else own64[key])
        assembled = ranks.assembled(key)
        for r, got in assembled:
            found = _close(what, got, mine[key], own, yard, ex)
            if found is not None:
                r, why = _blamed(key, r, [t for _, t in assembled], mine[key], shared, ex,
                                 found[0])
                wrong = ranks.failure(what.capitalize() if key == "out" else what, r, found)
                wrong.message += why
                return wrong
    return None


def _against_golden(ranks: _Ranks, mine: dict[str, Any], shared: Any,
                    golden: _Golden | None) -> Outcome | None:
    """With exported weights: the ranks' output and input gradient against the reference on
    them, which the unsharded module's run (the subject's, beside the ranks) cannot bend."""
    if golden is None:
        return None
    ex = ranks.ex
    for key, what, yard, want in (("out", "the output", golden[0], golden[3][0]),
                                  ("grad_x", "d(output)/d(input)", golden[1], golden[3][1])):
        assembled = ranks.assembled(key)
        for r, got in assembled:
            err, index = tol.max_abs_diff(got, want)
            allowed = tol.allowed(yard, ex.dtype, float(want.abs().max()))
            if err > allowed:
                beside = tol.max_abs_diff(mine[key], want)[0]
                r, why = _blamed(key, r, [t for _, t in assembled], want, shared, ex, err)
                wrong = ranks.failure(what.capitalize() if key == "out" else what, r,
                                      (err, allowed, index))
                wrong.message = (
                    wrong.message.split(" differs from ")[0] + " differs from the reference "
                    f"on the subject's exported weights by {err:.3g}, allowed {allowed:.3g} "
                    f"({tol.K:g} x the reference's and the simulated sharded reference's "
                    f"own error in {ex.dtype} + floor){_at(index)}, though it matches the "
                    "unsharded module's run made beside the ranks"
                    + (f" (itself {beside:.3g} off)" if beside > allowed else "")
                    + ": a sharded result must be attention's, whatever the unsharded "
                    "module gives while the ranks run." + why)
                return wrong
    return None


def _param_grads(ranks: _Ranks, mine: dict[str, Any], own64: dict[str, Any] | None,
                 yards: tuple[float, float, float]) -> Outcome:
    """Each parameter's gradient on the ranks against the unsharded module's: whole on every
    rank (a DTensor, or reduced already), or each rank's share summing to it."""
    notes: list[str] = []
    for name, want in mine["params"].items():
        if want is None:
            continue
        own = _own_error(want, None if own64 is None else own64["params"].get(name))
        wrong = _param_grad(ranks, name, want, own, yards[2], notes)
        if wrong is not None:
            return wrong
    return Outcome(PASS, notes=notes)


def _param_grad(ranks: _Ranks, name: str, want: Tensor, own: float, yard: float,
                notes: list[str]) -> Outcome | None:
    ex, W, hook = ranks.ex, ranks.W, ranks.hook
    grads: list[Tensor | None] = []
    dtensor = False
    for res in ranks.results:  # a wrapper (nn.Sequential, torch.compile) prefixes the names
        named = [n for n in res["params"] if n == name or n.endswith("." + name)]
        if len(named) != 1:
            grads.append(None)
            continue
        grads.append(res["params"][named[0]])
        dtensor |= res.get("param_layout", {}).get(named[0]) == "dtensor"
    shaped = [g for g in grads if g is not None]
    if not shaped:
        return Outcome("fail", f"d(output)/d({name}) is missing on every rank under {hook} "
                       f"(no parameter named {name}, or with that suffix, has a gradient), "
                       "though the unsharded module has it.")
    if any(tuple(g.shape) != tuple(want.shape) for g in shaped):
        notes.append(f"{name} is sharded without DTensor: its gradient is not compared")
        return None
    full = [torch.zeros_like(want) if g is None else g for g in grads]

    def off(got: Tensor, label: str, r: int = -1) -> Outcome | None:
        found = _close(f"d(output)/d({name})", got, want, own, yard, ex)
        if found is None:
            return None
        err, allowed, _ = found
        return Outcome("fail", f"d(output)/d({name}, shape {tuple(want.shape)}) {label} "
                       f"under {hook} differs from the unsharded module's by {err:.3g}, "
                       f"allowed {allowed:.3g}.", err, allowed, {"rank": r} if r >= 0 else None)

    each = [off(g, f"on rank {r} of {W}", r) for r, g in enumerate(full)]
    if all(o is None for o in each):
        return None  # every rank holds the whole gradient (DTensor, or reduced already)
    if dtensor:  # a DTensor gradient is the whole gradient, on every rank
        return next(o for o in each if o is not None)
    # Local gradients of a replicated weight: each rank's share, summed over the ranks.
    total = off(sum((g.double() for g in full), torch.zeros((), dtype=torch.float64)),
                f"summed over the {W} ranks")
    if total is not None:
        total.message += (" (Nor does every rank's own gradient equal it: "
                          + next(o for o in each if o is not None).message.split(" under ")[0]
                          + " differs.)")
    return total


def _check_refusal(ctx: Context, ex: Example) -> Outcome:
    """shard_heads must refuse a spec whose n_head the world does not divide: n_head = W + 1,
    the example's D. Cheap where it refuses (one build and a raise per rank); a hook that
    accepts leaves the ranks to be restarted."""
    W = ex.world
    H = W + 1
    probe = dataclasses.replace(ex, C=H * ex.D, H=H, spec=AttentionSpec(H * ex.D, H), world=W)
    gang = ctx.gangs(W) if ctx.gangs is not None else None
    if gang is None or gang.probe_futile:
        return Outcome(PASS)
    answers = gang.run([{"build": probe.build(), "steps": [{"op": "shard_refuses",
                                                            "hook": "shard_heads"}]}] * W)
    if any(a.get("kind") != "ok" for a in answers):  # the build itself declined or failed
        gang.probe_futile = True  # each try would cost a restart of the ranks
        r, a = next((r, a) for r, a in enumerate(answers) if a.get("kind") != "ok")
        return Outcome(PASS, notes=[f"shard_heads' refusal of n_head={H} over world={W} not "
                                    f"asked: the build on rank {r} gave {a.get('kind')}"])
    for r, a in enumerate(answers):  # a rank is the subject's: check what it sent
        try:
            check_results(a, [{"op": "shard_refuses"}], device=None, who=f"rank {r} of {W}")
        except BadAnswer as bad:
            gang.restart_later()
            raise SubjectFault(str(bad)) from None
    accepted = [r for r, a in enumerate(answers) if not a["results"][0]["raised"]]
    if accepted:
        if len(accepted) < W:  # ranks that parted ways: one may wait in a collective forever
            gang.restart_later()
        return Outcome("fail", f"shard_heads(module, mesh) accepted n_head={H} over world={W} "
                       f"on rank{'s' * (len(accepted) > 1)} {', '.join(map(str, accepted))} "
                       f"(built for {probe.attention.describe()}): n_head % world != 0 leaves "
                       "some rank a fraction of a head. Raise instead, as "
                       "attnspec.check_shardable(spec, world, 'heads') does.",
                       where={"rank": accepted[0]})
    return Outcome(PASS)


def check_tp_equivalence(ctx: Context, ex: Example) -> Outcome:
    """shard_heads' module, on every rank, gives the unsharded module's output, input gradient
    and weight gradients, within what sharded rounding explains; and the hook refuses a world
    that does not divide n_head."""
    outcome = _check_sharded(ctx, ex, "heads")
    if outcome.kind == PASS:
        refusal = _check_refusal(ctx, ex)
        refusal.notes += outcome.notes
        return refusal
    return outcome


def check_cp_equivalence(ctx: Context, ex: Example) -> Outcome:
    """shard_positions' module, each rank given its positions of the layout, gives the
    unsharded module's outputs and gradients there; weight gradients sum over the ranks."""
    return _check_sharded(ctx, ex, "positions")
