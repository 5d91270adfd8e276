"""attnspec: a typed reference and a conformance suite for causal multi-head self-attention."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._api import trace as trace
from ._config import AttentionConfig as AttentionConfig
from ._config import divisors as divisors
from ._errors import AttnspecError as AttnspecError
from ._errors import ConfigError as ConfigError
from ._errors import DivisibilityError as DivisibilityError
from ._errors import ShapeError as ShapeError
from ._errors import TargetError as TargetError
from ._errors import UsageError as UsageError
from ._reference import AttentionWeights as AttentionWeights
from ._reference import CausalSelfAttention as CausalSelfAttention
from ._reference import HeadTensor as HeadTensor
from ._reference import Residual as Residual
from ._trace import ShapeTrace as ShapeTrace
from ._typecheck import typecheck_enabled as typecheck_enabled

__version__ = "0.1.0"

# Tracebacks name the errors where users import them from: attnspec.ShapeError.
for _error in (AttnspecError, ConfigError, DivisibilityError, ShapeError, TargetError, UsageError):
    _error.__module__ = __name__
del _error

if TYPE_CHECKING:
    from ._engine import PROPERTIES as PROPERTIES
    from ._engine import verify as verify
    from ._plot import plot_heads as plot_heads
    from ._report import Report as Report


def __getattr__(name: str) -> Any:
    # The engine pulls in Hypothesis: load it only when asked for.
    if name in ("verify", "PROPERTIES"):
        from . import _engine

        return getattr(_engine, name)
    if name == "plot_heads":  # matplotlib is imported inside, when it is called
        from ._plot import plot_heads

        return plot_heads
    if name == "Report":
        from ._report import Report

        return Report
    raise AttributeError(f"module 'attnspec' has no attribute {name!r}")
