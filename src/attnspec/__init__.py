"""attnspec: a typed reference and a conformance suite for causal multi-head self-attention."""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from ._errors import AttnspecError as AttnspecError
from ._errors import ConfigError as ConfigError
from ._errors import DivisibilityError as DivisibilityError
from ._errors import ShapeError as ShapeError
from ._errors import TargetError as TargetError
from ._errors import UsageError as UsageError

__version__ = "0.3.0"

# numpy is optional: torch's import-time note that it is absent is noise on every command.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)

# Tracebacks name the errors where users import them from: attnspec.ShapeError.
for _error in (AttnspecError, ConfigError, DivisibilityError, ShapeError, TargetError, UsageError):
    _error.__module__ = __name__
del _error

if TYPE_CHECKING:
    from .common.report import Report as Report
    from .frontends.api import trace as trace
    from .frontends.api import verify as verify
    from .frontends.many_api import verify_many as verify_many
    from .frontends.plot import plot_heads as plot_heads
    from .reference.config import AttentionConfig as AttentionConfig
    from .reference.config import divisors as divisors
    from .reference.core import kernel_attention as kernel_attention
    from .reference.module import AttentionWeights as AttentionWeights
    from .reference.module import CausalSelfAttention as CausalSelfAttention
    from .reference.module import HeadTensor as HeadTensor
    from .reference.module import Residual as Residual
    from .reference.sharding import ShardError as ShardError
    from .reference.sharding import check_shardable as check_shardable
    from .reference.sharding import shard_positions_of as shard_positions_of
    from .reference.spec import ALiBi as ALiBi
    from .reference.spec import AttentionSpec as AttentionSpec
    from .reference.spec import DynamicNTK as DynamicNTK
    from .reference.spec import LinearScaling as LinearScaling
    from .reference.spec import Llama3Scaling as Llama3Scaling
    from .reference.spec import QKNorm as QKNorm
    from .reference.spec import RoPE as RoPE
    from .reference.spec import YaRN as YaRN
    from .reference.trace import ShapeTrace as ShapeTrace
    from .reference.typecheck import typecheck_enabled as typecheck_enabled
    from .reference.variants import SpecAttention as SpecAttention
    from .session.engine import KERNEL_PROPERTIES as KERNEL_PROPERTIES
    from .session.engine import PROPERTIES as PROPERTIES

# Loaded when first used: `attnspec verify` starts its worker before torch is imported, and the
# engine (Hypothesis) and plots (matplotlib) cost nothing until asked for.
_LAZY = {
    "trace": ".frontends.api", "AttentionConfig": ".reference.config",
    "divisors": ".reference.config",
    "PROPERTIES": ".session.engine", "KERNEL_PROPERTIES": ".session.engine",
    "kernel_attention": ".reference.core", "verify": ".frontends.api",
    "verify_many": ".frontends.many_api",
    "plot_heads": ".frontends.plot",
    "AttentionWeights": ".reference.module", "CausalSelfAttention": ".reference.module",
    "HeadTensor": ".reference.module", "Residual": ".reference.module", "Report": ".common.report",
    "ShapeTrace": ".reference.trace", "typecheck_enabled": ".reference.typecheck",
    "AttentionSpec": ".reference.spec",
    "RoPE": ".reference.spec", "ALiBi": ".reference.spec", "QKNorm": ".reference.spec",
    "LinearScaling": ".reference.spec", "DynamicNTK": ".reference.spec", "YaRN": ".reference.spec",
    "Llama3Scaling": ".reference.spec", "SpecAttention": ".reference.variants",
    "ShardError": ".reference.sharding", "check_shardable": ".reference.sharding",
    "shard_positions_of": ".reference.sharding",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'attnspec' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
