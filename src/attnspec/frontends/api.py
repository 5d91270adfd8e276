"""Small conveniences over the reference."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch import Tensor, nn

from .._errors import UsageError
from ..common.options import MAX_HEAD_DIM, MAX_HEADS, MAX_WIDTH
from ..reference.config import check_config
from ..reference.module import CausalSelfAttention, Kernel
from ..reference.spec import AttentionSpec
from ..reference.trace import ShapeTrace
from ..reference.variants import SpecAttention

if TYPE_CHECKING:
    from ..common.options import RunOptions
    from ..common.report import Progress, Report
    from ..properties.base import Example

M = TypeVar("M", bound=nn.Module)


def spec_call(spec: AttentionSpec) -> str:
    """The spec as the call that makes it, defaults left out, for messages."""
    given = [f"{f.name}={getattr(spec, f.name)!r}" for f in fields(spec)
             if f.name in ("n_embd", "n_head") or getattr(spec, f.name) != f.default]
    return f"AttentionSpec({', '.join(given)})"


def resolve_spec(
    call: str, n_embd: object, n_head: object, spec: object
) -> AttentionSpec | None:
    """The spec a `call(n_embd, n_head, spec=...)` asks for; None means plain (C, H) attention.

    n_embd and n_head may repeat the spec's own values, never contradict them.
    """
    if spec is None:
        if n_embd is None or n_head is None:
            raise UsageError(f"{call}(n_embd={n_embd!r}, n_head={n_head!r}): give both n_embd "
                             f"(C) and n_head (H), or spec=attnspec.AttentionSpec(...).")
        check_config(n_embd, n_head)
        return None
    if not isinstance(spec, AttentionSpec):
        raise TypeError(f"{call}(spec={spec!r}): expected an attnspec.AttentionSpec, got "
                        f"{type(spec).__name__}.")
    for name, given in (("n_embd", n_embd), ("n_head", n_head)):
        own = getattr(spec, name)
        # bool is an int to Python, but n_head=True is a mistake, not 1.
        if given is not None and (isinstance(given, bool) or given != own):
            raise UsageError(
                f"{call}(n_embd={n_embd!r}, n_head={n_head!r}, spec={spec_call(spec)}): "
                f"{name}={given!r} disagrees with the spec's {name}={own!r}. Give the spec "
                f"alone (it carries n_embd and n_head), or values that match it.")
    return spec


def seeded(build: Callable[[], M], *, batch: int, seq: int, n_embd: int, seed: int,
           ) -> tuple[M, Tensor]:
    """The module and input (B, T, C) one seed gives, leaving torch's global seed alone."""
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = build()
    return module, torch.randn(batch, seq, n_embd, generator=gen)


def trace(
    n_embd: int | None = None, n_head: int | None = None, *,
    spec: AttentionSpec | None = None, batch: int = 2, seq: int = 5, seed: int = 0,
    kernel: Kernel = "explicit",
) -> ShapeTrace:
    """Trace the shape at every stage of one forward pass of the reference.

    ```python
    print(attnspec.trace(12, 3, batch=2, seq=5))   # (2, 5, 12) -> (2, 3, 5, 4) -> (2, 5, 12)
    print(attnspec.trace(spec=attnspec.AttentionSpec(n_embd=12, n_head=4, n_kv_head=2)))
    ```

    **Arguments:** `n_embd` (C) and `n_head` (H), validated first, for `CausalSelfAttention`;
    or `spec`, an `AttentionSpec`, for `SpecAttention` (its trace adds the `"B G T D"` key/value
    heads; n_embd and n_head may then be left out, and must match the spec if given); `batch`
    (B) and `seq` (T), each >= 1; `seed` for the random weights and input; `kernel` as in
    `CausalSelfAttention` (a spec is traced with the explicit math only).

    **Returns:** a `ShapeTrace`; `str()` of it is the table.
    """
    resolved = resolve_spec("trace", n_embd, n_head, spec)
    where = (f"trace(n_embd={n_embd}, n_head={n_head})" if resolved is None
             else f"trace(spec={spec_call(resolved)})")
    for name, value in (("batch", batch), ("seq", seq)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{where}: {name}={value!r}; {name} must be an int >= 1.")
    if resolved is None:
        assert n_embd is not None and n_head is not None  # resolve_spec checked them
        C, H = n_embd, n_head
        attn, x = seeded(lambda: CausalSelfAttention(C, H, kernel=kernel).eval(),
                         batch=batch, seq=seq, n_embd=C, seed=seed)
        with torch.no_grad():
            return attn.traced(x)[1]
    if kernel != "explicit":
        raise UsageError(f"{where}: kernel={kernel!r}; a spec is traced by SpecAttention, which "
                         f"has the explicit math only, so leave kernel='explicit'.")
    spec_attn, x = seeded(lambda: SpecAttention(resolved).eval(), batch=batch, seq=seq,
                          n_embd=resolved.n_embd, seed=seed)
    with torch.no_grad():
        return spec_attn.traced(x)[1]


def verify(
    target: Any, *, only: Iterable[str] | str | None = None,
    skip: Iterable[str] | str | None = None, device: str = "all",
    dtypes: Sequence[str] | None = None, profile: str = "default",
    max_examples: int | None = None, seed: int | None = None, timeout: float = 30.0,
    report: str | os.PathLike[str] | None = None, isolate: bool | None = None,
    progress: bool | Progress = False, exitfirst: bool = False,
    replay: Mapping[str, Any] | Example | None = None, database: bool | str = True,
    on_start: Callable[[Report], None] | None = None, max_seq: int | None = None,
    max_heads: int = MAX_HEADS, max_head_dim: int = MAX_HEAD_DIM, max_width: int = MAX_WIDTH,
    world_sizes: Sequence[int] | None = None, worker_user: str | None = None,
    workers: int | None = None, black_box: bool = False,
    require: Iterable[str] | str | None = None,
) -> Report:
    """Check an implementation of causal self-attention against every property.

    ```python
    report = attnspec.verify("path/to/impl.py")          # or "pkg.mod", "pkg.mod:NAME"
    assert report.ok, report.summary()
    ```

    **Arguments:**

    - `target`: a TARGET string (run in a supervised worker process), or a module or object
      with `build` (run in this process).
    - `only`, `skip`: property ids (see `PROPERTIES`).
    - `device`: `"cpu"`, `"cuda"` or `"all"` (CUDA where present).
    - `dtypes`: restrict the dtypes (intersected with the subject's `DTYPES`).
    - `profile`: `"smoke"`, `"default"`, `"thorough"` or `"ci"`; `max_examples` overrides it.
    - `seed`: the same seed gives the same examples and verdicts.
    - `timeout`: seconds allowed for one example before the worker is killed.
    - `max_seq`: the longest sequence (T) drawn (None: 64 for modules, 256 for kernels);
      raise it past a blocked kernel's block size.
    - `max_heads`, `max_head_dim`, `max_width`: the largest H, D and C = H x D drawn (32, 256
      and 512). Three examples in four are narrow (H <= 8, D <= 16); the others range over all
      of it, favouring the head sizes kernels specialise on (32, 64, 80, 96, 128, 256 and their
      neighbours), with B = 1 and T up to max(9, max_seq // 8).
    - `world_sizes`: the ranks tp_equivalence and cp_equivalence shard over (None: every one
      of the subject's WORLD_SIZES, 2 and 4 by default); each rank is a process.
    - `worker_user`: run the worker and the ranks as this user (a name or uid; the runner must
      be root): the subject then cannot reach the runner's memory, files or signals.
    - `report`: a path for the JSON report, written atomically after every property, and a
      last time once everything the subject started has been killed.
    - `workers`: how many runners check properties at once, each with its own worker (None:
      2 where this process may use 2 cores or more, else 1; 1 with `exitfirst`); with more
      than one, a TARGET string runs in runners forked from this process, and the verdicts
      are the same (with `exitfirst`, failures found at once in two runners are both kept).
    - `black_box`: accept a pass without the oracle (a subject that exports no weights, and
      whose weights attnspec cannot find by name): it then says "conforms (black-box: oracle
      not run)". Without it such a run is incomplete (`status == "incomplete"`, not `ok`).
    - `require`: property ids that must run besides the oracle (a run where one is skipped is
      incomplete).
    - `exitfirst`: stop after the first property that does not pass.
    - `replay`: one example's JSON (from a replay command) to run alone, with `only`.
    - `progress`: True for progress on stderr (a live line on a terminal, plain lines
      otherwise), or a callable `(property, done, total, result_or_None)`.
    - `on_start`: called with the empty report once the subject is loaded (its header is set).

    **Returns:** a `Report`. A TARGET that cannot be loaded raises `TargetError`; bad options
    raise `UsageError`.
    """
    from ..session.run import run
    from ..session.selection import select_properties

    props = select_properties(only, skip, kernel=None)  # each family's, once the subject loads
    options = run_options(device=device, dtypes=dtypes, profile=profile,
                          max_examples=max_examples, seed=seed, timeout=timeout,
                          max_seq=max_seq, max_heads=max_heads, max_head_dim=max_head_dim,
                          max_width=max_width, database=database, world_sizes=world_sizes,
                          worker_user=worker_user, black_box=black_box, require=require)
    return run(target, options, props, only=only, skip=skip, report=report, isolate=isolate,
               progress=progress, exitfirst=exitfirst, replay=replay, on_start=on_start,
               workers=workers)


def run_options(*, dtypes: Sequence[str] | None, world_sizes: Sequence[int] | None,
                require: Iterable[str] | str | None, **given: Any) -> RunOptions:
    """verify()'s options as the session takes them; a bad one raises UsageError naming it."""
    from ..common.options import RunOptions

    return RunOptions(dtypes=None if dtypes is None else tuple(dtypes),
                      world_sizes=None if world_sizes is None else tuple(world_sizes),
                      require=None if require is None else tuple(
                          [require] if isinstance(require, str) else require), **given)
