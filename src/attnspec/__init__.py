"""attnspec: a typed reference and a conformance suite for causal multi-head self-attention."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._errors import AttnspecError as AttnspecError
from ._errors import ConfigError as ConfigError
from ._errors import DivisibilityError as DivisibilityError
from ._errors import ShapeError as ShapeError
from ._errors import TargetError as TargetError
from ._errors import UsageError as UsageError

__version__ = "0.1.0"

# Tracebacks name the errors where users import them from: attnspec.ShapeError.
for _error in (AttnspecError, ConfigError, DivisibilityError, ShapeError, TargetError, UsageError):
    _error.__module__ = __name__
del _error

if TYPE_CHECKING:
    from ._api import trace as trace
    from ._config import AttentionConfig as AttentionConfig
    from ._config import divisors as divisors
    from ._engine import PROPERTIES as PROPERTIES
    from ._engine import verify as verify
    from ._plot import plot_heads as plot_heads
    from ._reference import AttentionWeights as AttentionWeights
    from ._reference import CausalSelfAttention as CausalSelfAttention
    from ._reference import HeadTensor as HeadTensor
    from ._reference import Residual as Residual
    from ._report import Report as Report
    from ._sharding import ShardError as ShardError
    from ._sharding import check_shardable as check_shardable
    from ._sharding import shard_positions_of as shard_positions_of
    from ._spec import ALiBi as ALiBi
    from ._spec import AttentionSpec as AttentionSpec
    from ._spec import DynamicNTK as DynamicNTK
    from ._spec import LinearScaling as LinearScaling
    from ._spec import Llama3Scaling as Llama3Scaling
    from ._spec import QKNorm as QKNorm
    from ._spec import RoPE as RoPE
    from ._spec import YaRN as YaRN
    from ._trace import ShapeTrace as ShapeTrace
    from ._typecheck import typecheck_enabled as typecheck_enabled
    from ._variants import SpecAttention as SpecAttention

# Loaded when first used: `attnspec verify` starts its worker before torch is imported, and the
# engine (Hypothesis) and plots (matplotlib) cost nothing until asked for.
_LAZY = {
    "trace": "._api", "AttentionConfig": "._config", "divisors": "._config",
    "PROPERTIES": "._engine", "verify": "._engine", "plot_heads": "._plot",
    "AttentionWeights": "._reference", "CausalSelfAttention": "._reference",
    "HeadTensor": "._reference", "Residual": "._reference", "Report": "._report",
    "ShapeTrace": "._trace", "typecheck_enabled": "._typecheck", "AttentionSpec": "._spec",
    "RoPE": "._spec", "ALiBi": "._spec", "QKNorm": "._spec",
    "LinearScaling": "._spec", "DynamicNTK": "._spec", "YaRN": "._spec",
    "Llama3Scaling": "._spec", "SpecAttention": "._variants",
    "ShardError": "._sharding", "check_shardable": "._sharding",
    "shard_positions_of": "._sharding",
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
