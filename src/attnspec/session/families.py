"""The two families of subject, modules (protocol 1 and 2: x -> y) and kernels (q, k, v -> o,
lse), behind one interface: each gives its catalogue, its example type, its strategy, what it
needs of a subject (the skip reasons), its check and its replay's parser. A session picks its
family once, `FAMILIES[protocol]`, and asks it rather than testing which it is."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..common.options import KERNEL_MAX_SEQ, MODULE_MAX_SEQ, NARROW_HEAD_DIM, NARROW_HEADS
from ..common.protocol import Executor
from ..properties import BY_ID, PROPERTY_IDS, TWINNED, run_check
from ..properties.base import Context, Example, Outcome
from ..properties.kernel import (
    KERNEL_BY_ID,
    KERNEL_PROPERTY_IDS,
    KERNEL_TWINNED,
    KernelExample,
    run_kernel_check,
)
from ..properties.kernel import skip_reason as kernel_skip_reason
from ..reference.conventions import KernelConventions
from ..reference.spec import RoPE, positions_from_json
from .environment import _hide_own_source_from_hypothesis
from .replay import kernel_example, module_example

if TYPE_CHECKING:
    from .._errors import UsageError
    from .engine import Session

_HOOK_SIGNATURES = {
    "decode": "decode(module, x, cache, offset) -> (output, cache)",
    "padded": "padded(module, x, key_mask) -> output",
    "cross": "cross(module, x_q, x_kv) -> output, causal from CORNER",
    "shifted": "shifted(module, x, offset) -> output, x's positions starting at offset",
    "decode_padded": "decode_padded(module, x, key_mask, cache, offset) -> (output, cache)",
    "shard_heads": "shard_heads(module, mesh) -> module, tensor parallel over heads",
    "shard_positions": "shard_positions(module, mesh) -> module, context parallel over "
                       "positions",
}

Twin = Callable[[], Executor | None] | None


class Family:
    """What a session asks of its subject's family (ModuleFamily and KernelFamily say how)."""

    name: str  # "module" or "kernel"
    ids: tuple[str, ...]
    twinned: frozenset[str]  # the self-comparisons, whose two sides run in two processes
    example_type: type[Example] | type[KernelExample]
    supports: str  # the subject's refusal hook, as messages name it
    cases: str  # what supports() is given, in the plural
    length_axes: tuple[str, ...]  # the axes of sequence length, for the coverage judge
    dtype_declinable: bool  # whether supports() sees the dtype (and so may decline one)
    max_seq: int  # the longest sequence drawn unless the run says otherwise
    weighted: bool  # whether its subjects have weights (exported, or found by name)

    def conventions(self, info: Any) -> KernelConventions | None:
        """What the subject declared of its calling conventions (kernels only)."""
        return None

    def probe(self, session: Session) -> str | None:
        """The load's probe calls: a hint, where the subject is written against the protocol
        in a common wrong way (None: it is not, as far as they show)."""
        raise NotImplementedError

    def strategy(self, session: Session, prop: str, narrow: bool) -> Any:
        raise NotImplementedError

    def skip_reason(self, session: Session, prop: str) -> str | None:
        raise NotImplementedError

    def check(self, session: Session, executor: Executor, prop: str, ex: Any, twin: Twin, *,
              fresh: bool = False) -> Outcome:
        """One example of `prop`; `fresh`: in new workers, where no load's call came first."""
        raise NotImplementedError

    def parse_replay(self, session: Session, prop: str, data: Mapping[str, Any],
                     bad: Callable[[str], UsageError]) -> Any:
        raise NotImplementedError

    def replayable_fresh(self, prop: str) -> bool:
        """Whether a failure of `prop` may be replayed in fresh workers (not over ranks)."""
        return True

    def strategy_drawn(self, strategy: Any) -> Any:
        _hide_own_source_from_hypothesis()  # the strategy, new here, before a draw mines it
        return strategy


class ModuleFamily(Family):
    name = "module"
    ids = PROPERTY_IDS
    twinned = TWINNED
    example_type = Example
    supports = "supports(spec)"
    cases = "specs"
    length_axes = ("T",)
    dtype_declinable = False
    max_seq = MODULE_MAX_SEQ
    weighted = True

    def probe(self, session: Session) -> str | None:
        from ..properties.found import module_hint

        return module_hint(session.run_probe, session.probes())

    def strategy(self, session: Session, prop: str, narrow: bool) -> Any:
        from .strategies import examples  # Hypothesis loads only when examples are drawn

        heads, dim, width = session.sizes
        if narrow:  # verify's quick pass: most bugs show at a fraction of a wide example's cost
            heads, dim = min(heads, NARROW_HEADS), min(dim, NARROW_HEAD_DIM)
        info = session.info
        return self.strategy_drawn(examples(
            BY_ID[prop], dtypes=session.dtypes, supported=info.supported,
            max_seq=session.max_seq, max_heads=heads, max_head_dim=dim, max_width=width,
            variants=info.variants if info.protocol == 2 else None,
            worlds=session.worlds(prop), layout=info.cp_layout))

    def skip_reason(self, session: Session, prop: str) -> str | None:
        spec, info = BY_ID[prop], session.info
        v2 = info.protocol == 2
        variants = info.variants or {}
        if spec.needs_window and not v2:
            return "the subject speaks protocol 1 (plain attention): it has no window"
        if spec.needs_window and not any(w is not None for w in _listed(variants, "window")):
            return "the subject's VARIANTS allow no window"
        if spec.needs_groups and not v2:
            return "the subject speaks protocol 1 (plain attention): every head has its own k, v"
        if spec.needs_groups and not _grouped_heads(variants, session.sizes[0]):
            return (f"no grouped-query spec to draw: the subject's VARIANTS allow no n_kv_head "
                    f"with 1 < n_kv_head < n_head for n_head <= {session.sizes[0]} (max_heads)")
        if spec.needs_rope and v2 and not any(
                isinstance(p, RoPE) for p in _positions_listed(variants)):
            return "the subject's VARIANTS allow no RoPE positions"
        if spec.needs_hook is not None and not v2:
            return ("the subject speaks protocol 1, and inference and sharding hooks are "
                    "protocol 2's (docs/design.md, section 3)")
        if spec.needs_hook is not None and spec.needs_hook not in info.hooks:
            return (f"the subject defines no {spec.needs_hook} hook "
                    f"({_HOOK_SIGNATURES[spec.needs_hook]}; docs/design.md, section 3)")
        if spec.shards is not None:
            reason = _shard_skip_reason(session, prop)
            if reason is not None:
                return reason
        if spec.invalid_configs and v2:
            return ("protocol v2 subjects are built only from valid AttentionSpecs, which "
                    "refuse C % H, H % n_kv_head and sizes below 1 themselves")
        if spec.needs_export and not info.has_export:
            return _no_weights(session, prop)
        if spec.needs_cuda and not (info.cuda and "cuda" in session.devices):
            return "no CUDA device"
        return None

    def check(self, session: Session, executor: Executor, prop: str, ex: Any, twin: Twin, *,
              fresh: bool = False) -> Outcome:
        sharded = BY_ID[prop].shards is not None
        return run_check(executor, prop, ex, session.workers.gang if sharded else None, twin)

    def parse_replay(self, session: Session, prop: str, data: Mapping[str, Any],
                     bad: Callable[[str], UsageError]) -> Any:
        return module_example(session, prop, data, bad)

    def replayable_fresh(self, prop: str) -> bool:
        return BY_ID[prop].shards is None


class KernelFamily(Family):
    name = "kernel"
    ids = KERNEL_PROPERTY_IDS
    twinned = KERNEL_TWINNED
    example_type = KernelExample
    supports = "supports(case)"
    cases = "cases"
    length_axes = ("Tq", "Tk")
    dtype_declinable = True
    max_seq = KERNEL_MAX_SEQ
    weighted = False

    def conventions(self, info: Any) -> KernelConventions | None:
        return KernelConventions.from_json(info.kernel)

    def probe(self, session: Session) -> str | None:
        from ..properties.kernel import first_call, layout_hint

        assert session.conventions is not None
        # First: this is the worker's first call, the one a warm-up would hide.
        session.first_call = first_call(Context(session.executor), session.conventions,
                                        *session.probe_dtype())
        return layout_hint(Context(session.executor), session.conventions,
                           *session.probe_dtype())

    def strategy(self, session: Session, prop: str, narrow: bool) -> Any:
        from .kernel_strategies import kernel_examples

        assert session.conventions is not None
        heads, dim, _ = session.sizes
        return self.strategy_drawn(kernel_examples(
            KERNEL_BY_ID[prop], session.conventions, dtypes=session.dtypes,
            max_seq=session.max_seq, max_heads=heads, max_head_dim=dim, narrow=narrow))

    def skip_reason(self, session: Session, prop: str) -> str | None:
        assert session.conventions is not None
        return kernel_skip_reason(KERNEL_BY_ID[prop], session.conventions)

    def check(self, session: Session, executor: Executor, prop: str, ex: Any, twin: Twin, *,
              fresh: bool = False) -> Outcome:
        if prop == "determinism" and session.first_call and not fresh:
            return Outcome("fail", session.first_call)  # the load's first call, not ex's
        assert session.conventions is not None
        return run_kernel_check(Context(executor, None, twin), prop, ex, session.conventions)

    def parse_replay(self, session: Session, prop: str, data: Mapping[str, Any],
                     bad: Callable[[str], UsageError]) -> Any:
        return kernel_example(session, prop, data, bad)


MODULES, KERNELS = ModuleFamily(), KernelFamily()
FAMILIES: dict[int | str, Family] = {1: MODULES, 2: MODULES, "kernel": KERNELS}


def _no_weights(session: Session, prop: str) -> str:
    """Why a property that needs the subject's weights has none to use."""
    found = session.found
    if found is None or not found.why:
        return "the subject has no export_weights"
    if prop != "oracle":  # the oracle's says what was tried, once
        return ("the subject has no export_weights, and no weights of its were confirmed by "
                "name (see oracle)")
    return f"the subject has no export_weights, and {found.why}"


def _shard_skip_reason(session: Session, prop: str) -> str | None:
    import torch.distributed as td

    info, sizes = session.info, session.sizes
    if session.workers.rank_target is None:
        return ("the TARGET is a Python object: ranks are processes of their own, which "
                "load the subject by name (pass a path or a module name)")
    if not session.worlds():
        return (f"this run's world_sizes {list(session.options.world_sizes or ())} exclude "
                f"every one of the subject's WORLD_SIZES {list(info.world_sizes)}: "
                "give one of those, or leave world_sizes out to use them all")
    if not session.worlds(prop):
        bound = (f"max_heads={sizes[0]} and the subject's n_kv_head"
                 if BY_ID[prop].shards == "heads" else
                 f"max_seq={session.max_seq} ({info.cp_layout} layout: T % "
                 f"{'2W' if info.cp_layout == 'head_tail' else 'W'} == 0)")
        return (f"no world in {session.worlds()} fits {bound}: raise the bound or add a "
                "smaller world size")
    if not (td.is_available() and td.is_gloo_available()):
        return "this torch has no torch.distributed with gloo, which sharded examples use"
    if "cpu" not in session.devices or not session.dtypes.get("cpu"):
        return ("sharded examples run on CPU ranks (gloo); this run checks "
                f"{', '.join(session.devices)} only")
    return None


def _listed(variants: Mapping[str, Any], name: str) -> list[Any]:
    """The values a v2 subject lets `name` take ("any": a stand-in that is not None)."""
    values = variants.get(name)
    if values is None:
        return [None]
    return [1] if values == "any" else list(values)


def _positions_listed(variants: Mapping[str, Any]) -> list[Any]:
    declared = variants.get("positions")
    if declared is None:
        return []
    if declared == "any":
        return [RoPE()]
    return [positions_from_json(p) for p in declared]


def _grouped_heads(variants: Mapping[str, Any], max_heads: int) -> list[int]:
    from .strategies import grouped_heads  # Hypothesis loads only when examples are drawn

    return grouped_heads(variants, max_heads)
