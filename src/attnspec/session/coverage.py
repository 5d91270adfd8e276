"""What a property's examples reached (the coverage line) and each example's size (which failure is
the smallest)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..common.options import (
    NARROW_HEAD_DIM,
    NARROW_HEADS,
)
from ..properties.base import Example
from ..properties.kernel import (
    KernelExample,
)
from ..reference.spec import ALiBi, AttentionSpec, RoPE


def _size(ex: Example | KernelExample) -> tuple[int, ...]:
    if isinstance(ex, KernelExample):
        return (ex.B * ex.H * ex.Tq * ex.Tk * ex.D, ex.Tq, ex.Tk, ex.B, ex.H, ex.D,
                len(ex.cuts), ex.seed)
    return (ex.B * ex.T * ex.C, ex.T, ex.B, ex.C, ex.H, len(ex.cuts), ex.seed)


def _kernel_features(ex: KernelExample) -> list[str]:
    """A kernel example's departures from causal self-attention, as coverage labels."""
    return [name for name, on in (
        ("plain", ex.causal and ex.Tq == ex.Tk and ex.G == ex.H and ex.window is None
         and ex.softcap is None and not ex.alibi and not ex.sinks),
        ("noncausal", not ex.causal), ("cross_short_q", ex.Tq < ex.Tk),
        ("cross_long_q", ex.Tq > ex.Tk), ("mqa", ex.G == 1 < ex.H), ("gqa", 1 < ex.G < ex.H),
        ("window", ex.window is not None), ("scale", ex.softmax_scale is not None),
        ("softcap", ex.softcap is not None), ("alibi", ex.alibi), ("sinks", ex.sinks),
        ("varlen", ex.lengths is not None),
        ("empty_sequence", ex.lengths is not None and any(0 in p for p in ex.lengths)))
        if on]


def _features(spec: AttentionSpec) -> list[str]:
    """The spec's departures from plain attention, as coverage labels."""
    found = ["plain"] if set(spec.to_json()) == {"n_embd", "n_head"} else []
    found += [name for name, on in (
        ("mqa", spec.G == 1 < spec.n_head), ("gqa", 1 < spec.G < spec.n_head),
        ("head_dim", spec.head_dim is not None), ("window", spec.window is not None),
        ("scale", spec.scale is not None), ("softcap", spec.softcap is not None),
        ("no_bias", not spec.bias), ("alibi", isinstance(spec.positions, ALiBi))) if on]
    if isinstance(spec.positions, RoPE):
        found.append("rope_interleaved" if spec.positions.interleaved else "rope_half")
        if spec.positions.scaling is not None:  # rope_linear, rope_dynamicntk, rope_yarn, ...
            found.append("rope_" + type(spec.positions.scaling).__name__.lower().replace(
                "scaling", "") or "rope_scaled")
    if isinstance(spec.positions, ALiBi) and spec.positions.slopes is not None:
        found.append("alibi_slopes")
    if spec.qk_norm is not None:
        found.append(f"qk_norm_{spec.qk_norm.kind}" + ("" if spec.qk_norm.per_head else "_whole"))
    if spec.sinks:
        found.append("sinks")
    return found


@dataclass
class _Coverage:
    """What the examples run so far covered, so a report shows the range a pass was earned on."""

    ranges: dict[str, list[int]] = field(default_factory=dict)
    shapes: set[tuple[int, ...]] = field(default_factory=set)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, prop: str, ex: Example | KernelExample) -> None:
        if isinstance(ex, KernelExample):
            self._add_kernel(ex)
            return
        for axis in ("B", "T", "C", "H"):
            value = getattr(ex, axis)
            low, high = self.ranges.get(axis, (value, value))
            self.ranges[axis] = [min(low, value), max(high, value)]
        self.shapes.add((ex.B, ex.T, ex.C, ex.H))
        if prop == "divisibility":  # only build() runs: no tensor, so no dtype or device
            return
        low, high = self.ranges.get("D", (ex.D, ex.D))
        self.ranges["D"] = [min(low, ex.D), max(high, ex.D)]
        sizes = self.counts.setdefault("size", {})
        size = "wide" if ex.H > NARROW_HEADS or ex.D > NARROW_HEAD_DIM else "narrow"
        sizes[size] = sizes.get(size, 0) + 1
        for key in ("dtype", "device"):
            seen = self.counts.setdefault(key, {})
            seen[getattr(ex, key)] = seen.get(getattr(ex, key), 0) + 1
        seen = self.counts.setdefault("input_scale", {})  # trained scales: peaked rows drawn
        seen[f"{ex.scale:g}"] = seen.get(f"{ex.scale:g}", 0) + 1
        if ex.world:  # sharded examples: how many ran on each number of ranks
            seen = self.counts.setdefault("world", {})
            seen[str(ex.world)] = seen.get(str(ex.world), 0) + 1
        if ex.spec is not None:  # which variants the examples exercised, by feature
            seen = self.counts.setdefault("variant", {})
            for feature in _features(ex.spec):
                seen[feature] = seen.get(feature, 0) + 1

    def _add_kernel(self, ex: KernelExample) -> None:
        for axis in ("B", "H", "G", "Tq", "Tk", "D"):
            value = getattr(ex, axis)
            low, high = self.ranges.get(axis, (value, value))
            self.ranges[axis] = [min(low, value), max(high, value)]
        self.shapes.add((ex.B, ex.H, ex.Tq, ex.Tk, ex.D))
        for key, value in (("dtype", ex.dtype), ("device", ex.device),
                           ("input_scale", f"{ex.scale:g}")):
            seen = self.counts.setdefault(key, {})
            seen[value] = seen.get(value, 0) + 1
        seen = self.counts.setdefault("variant", {})
        for feature in _kernel_features(ex):
            seen[feature] = seen.get(feature, 0) + 1

    def to_json(self) -> dict[str, Any] | None:
        if not self.shapes:
            return None
        return {**self.ranges, "shapes": len(self.shapes), **self.counts}
