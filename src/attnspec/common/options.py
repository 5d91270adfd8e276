"""A run's options: one validated value, made once by each front end and passed down whole."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from .._errors import UsageError

__all__ = ["DEVICES", "DTYPE_NAMES", "HEADS_LIMIT", "HEAD_DIM_LIMIT", "MAX_SEQ_LIMIT", "PROFILES",
           "REQUIRED", "RunOptions"]

# The dtypes attnspec checks, by name (torch-free, so the command line starts fast).
DTYPE_NAMES = ("float32", "float64", "bfloat16", "float16")

PROFILES: dict[str, int] = {"smoke": 10, "default": 50, "thorough": 400, "ci": 50}
"""Examples per property for each tier; `ci` is `default`, derandomized, without a database."""

REQUIRED: dict[str, tuple[str, ...]] = {name: ("oracle",) for name in PROFILES}
"""The properties each profile requires to run: without them a pass would not say the subject
is attention (a Linear, the identity and a scale of 1/D pass every black-box property), so a run
where one could not run is incomplete (exit 3), unless black-box is asked for."""

DEVICES = ("cpu", "cuda", "all")

# B <= 4 and H <= 8 are drawn, so the (B, H, T, T) scores reach 4 * 8 * T * T elements.
MAX_SEQ_LIMIT = 4096
MODULE_MAX_SEQ = 64  # the longest T drawn by default: a module's cost grows with C x T
KERNEL_MAX_SEQ = 256  # a kernel's: past 128, the tile size kernels specialise on

# The (C, H) generation draws H in 1..MAX_HEADS, D in 1..MAX_HEAD_DIM, with C = H * D at most
# MAX_WIDTH; most examples are narrow (NARROW_HEADS, NARROW_HEAD_DIM). The worker asks a
# subject's `supports` about exactly the pairs a run can draw.
MAX_HEADS = 32
MAX_HEAD_DIM = 256
MAX_WIDTH = 512
NARROW_HEADS = 8
NARROW_HEAD_DIM = 16
HEADS_LIMIT = 256
HEAD_DIM_LIMIT = 1024
WIDTH_LIMIT = 16384
MAX_WORLD = 8  # the most ranks one sharded example runs on: each is a process


# A Triton kernel in Triton's interpreter (no GPU) runs each program's every op in numpy, about
# 0.1 to 1 s a call: where the run left them at their defaults, fewer and smaller examples,
# and a longer timeout, so that a default verify of one kernel takes about a minute on 2 cores
# (benchmarks/run.py --only triton). `thorough` keeps its full meaning.
INTERPRETED_EXAMPLES: dict[str, int] = {"smoke": 6, "default": 20, "ci": 20}
INTERPRETED_MAX_SEQ = 40  # past two tiles of 16, a tail block: the tile bugs show
INTERPRETED_MAX_HEADS = 4
INTERPRETED_MAX_HEAD_DIM = 32
INTERPRETED_TIMEOUT = 10.0  # x the timeout, per call
INTERPRETED_BF16 = ("bfloat16 not checked: Triton's interpreter computes bfloat16 wrongly (it "
                    "stores it as 16-bit integers and tl.dot multiplies their bit patterns: "
                    "triton-lang/triton#11584); a GPU checks it natively")


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class RunOptions:
    """How a run draws and runs examples; an impossible value raises `UsageError` here, naming
    the parameter, before any subject loads.

    **Arguments:** as `verify()` takes them: `device` (`"cpu"`, `"cuda"` or `"all"`),
    `dtypes` (None: what the subject claims), `profile`, `max_examples` (overrides the
    profile), `seed`, `timeout` (seconds per request to the worker), `max_seq` (the longest T
    drawn; None: 64 for modules, 256 for kernels), `max_heads`, `max_head_dim` and
    `max_width` (the largest H, D and C = H·D drawn, or
    the q and o width H·D with a head_dim of its own), `database` (False,
    True for `.hypothesis/attnspec`, or a directory) and `derandomize` (None: where the `CI`
    environment variable is set, unless a seed is given), `world_sizes` (the ranks sharded
    examples run on, where the subject's WORLD_SIZES allow them; None: all of its WORLD_SIZES),
    `worker_user` (None, or the account a root runner starts the worker and the ranks under),
    `black_box` (True: the oracle is not required, a pass without it says "conforms (black-box:
    oracle not run)"), `require` (property ids that must run besides the profile's).
    """

    device: str = "all"
    dtypes: tuple[str, ...] | None = None
    profile: str = "default"
    max_examples: int | None = None
    seed: int | None = None
    timeout: float = 30.0
    max_seq: int | None = None  # None: MODULE_MAX_SEQ or KERNEL_MAX_SEQ, by the subject
    max_heads: int = MAX_HEADS
    max_head_dim: int = MAX_HEAD_DIM
    max_width: int = MAX_WIDTH
    database: bool | str = True
    derandomize: bool | None = None
    world_sizes: tuple[int, ...] | None = None  # None: the subject's own WORLD_SIZES
    worker_user: str | None = None
    black_box: bool = False
    require: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.black_box, bool):
            raise UsageError(option="black_box", value=self.black_box,
                             reason="must be True or False.")
        if self.require is not None:
            given = (self.require,) if isinstance(self.require, str) else self.require
            try:
                ids = tuple(i.strip() for value in given for i in str(value).split(",")
                            if i.strip())
            except TypeError:
                ids = ()
            if not ids or not all(isinstance(v, str) for v in given):
                raise UsageError(option="require", value=self.require,
                                 reason="give property ids (comma-separated), such as "
                                        "oracle,mixing.")
            object.__setattr__(self, "require", ids)
            if self.black_box and "oracle" in ids:
                raise UsageError(option="require", value=",".join(ids),
                                 reason="requires the oracle, and black_box says a pass without "
                                        "it is wanted: give one or the other.")
        if self.profile not in PROFILES:
            raise UsageError(option="profile", value=self.profile,
                             reason=f"choose from {', '.join(PROFILES)}.")
        if self.max_examples is not None and (not _whole(self.max_examples)
                                              or self.max_examples < 1):
            raise UsageError(option="max_examples", value=self.max_examples,
                             reason="must be a whole number >= 1 (examples per property).")
        if isinstance(self.timeout, bool) or not isinstance(self.timeout, int | float) or not (
                0 < self.timeout < math.inf):
            raise UsageError(option="timeout", value=self.timeout,
                             reason="must be a finite number of seconds > 0.")
        if self.max_seq is not None and (
                not _whole(self.max_seq) or not 1 <= self.max_seq <= MAX_SEQ_LIMIT):
            raise UsageError(
                option="max_seq", value=self.max_seq,
                reason=f"must be between 1 and {MAX_SEQ_LIMIT} (the longest T drawn): at T = "
                       f"{MAX_SEQ_LIMIT} one (B, H, T, T) score tensor of the reference is "
                       "already 2 GiB in float32.")
        for name, limit, what in (("max_heads", HEADS_LIMIT, "H, the most query heads drawn"),
                                  ("max_head_dim", HEAD_DIM_LIMIT, "D, the largest head drawn"),
                                  ("max_width", WIDTH_LIMIT, "C = H x D, the widest drawn")):
            value = getattr(self, name)
            if not _whole(value) or not 1 <= value <= limit:
                raise UsageError(option=name, value=value,
                                 reason=f"must be between 1 and {limit} ({what}).")
        if self.world_sizes is not None:  # None: the subject's WORLD_SIZES, not narrowed
            self._check_world_sizes()
        if self.seed is not None and not _whole(self.seed):
            raise UsageError(option="seed", value=self.seed, reason="must be a whole number.")
        if self.device not in DEVICES:
            raise UsageError(option="device", value=self.device,
                             reason=f"choose {', '.join(DEVICES[:-1])} or {DEVICES[-1]}.")
        if self.dtypes is not None:
            dtypes = (self.dtypes,) if isinstance(self.dtypes, str) else tuple(self.dtypes)
            for name in dtypes:
                if name not in DTYPE_NAMES:
                    raise UsageError(option="dtypes", value=name,
                                     reason=f"choose from {', '.join(DTYPE_NAMES)}.")
            object.__setattr__(self, "dtypes", dtypes or None)
        if self.worker_user is not None:
            from .users import resolve_worker_user

            try:
                resolve_worker_user(str(self.worker_user))
            except ValueError as error:
                raise UsageError(option="worker_user", value=self.worker_user,
                                 reason=str(error)) from None

    def _check_world_sizes(self) -> None:
        given: Any = self.world_sizes
        try:  # a bare number is one size
            worlds: tuple[Any, ...] = (given,) if _whole(given) else tuple(given)
        except TypeError:
            worlds = (given,)
        bad = [w for w in worlds if not (_whole(w) and 2 <= w <= MAX_WORLD)]
        if not worlds or bad:
            which = f"{bad[0]!r} is not" if bad else "no size given; they must be"
            raise UsageError(option="world_sizes", value=self.world_sizes,
                             reason=f"{which} a whole number of ranks in 2..{MAX_WORLD} (each "
                                    "rank of a sharded example is a process of its own).")
        object.__setattr__(self, "world_sizes", tuple(sorted(set(worlds))))

    @property
    def sizes(self) -> tuple[int, int, int]:
        """(max_heads, max_head_dim, max_width): what bounds the (C, H) drawn."""
        return (self.max_heads, self.max_head_dim, self.max_width)

    @property
    def examples(self) -> int:
        """Examples per property."""
        return self.max_examples or PROFILES[self.profile]

    @property
    def required(self) -> tuple[str, ...]:
        """The ids this run requires: the profile's (none black-box) and `require`'s."""
        base = () if self.black_box else REQUIRED[self.profile]
        return tuple(dict.fromkeys((*base, *(self.require or ()))))

    @property
    def ci(self) -> bool:
        """CI services set CI: such runs are derandomized and keep no database, as `ci`."""
        return bool(os.environ.get("CI")) or self.profile == "ci"
