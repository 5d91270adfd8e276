"""Hypothesis strategies for attention: the ones attnspec's engine itself draws from.

Use them in your own property tests, with attnspec's reference as the oracle::

    from hypothesis import given
    from attnspec import strategies as ast

    @given(ast.kernel_cases(layout="bshd", features=("gqa", "softcap")))
    def test_my_attention(case):
        o_ref, _ = case.reference()
        ...

Conventions, as in hypothesis.extra.numpy: every strategy is a function returning a
`SearchStrategy`, its bounds are keyword-only, None means the documented default, and an
impossible argument raises `StrategyError` (an `attnspec.UsageError` and a
`hypothesis.errors.InvalidArgument`) when the strategy is made, not during a draw.

Importing this module imports Hypothesis and torch; `import attnspec` alone does not. It
registers `specs()` for `st.from_type(attnspec.AttentionSpec)` (and so for `st.builds` of
anything that takes an AttentionSpec).

- sizes: `batch_sizes`, `seq_lengths`, `head_dims`, `kernel_lengths`;
- configurations (n_embd, n_head): `configs`, `invalid_configs`;
- attention specs (protocol v2, `attnspec.AttentionSpec`): `specs`;
- tensors: `inputs` (x), `padded_batches` (x and a key mask), `cut_points` (causality);
- kernel calls (q, k, v in a layout): `kernel_cases`.
"""

from __future__ import annotations

from .session.kernel_strategies import KernelCase, kernel_cases, kernel_lengths
from .session.strategies import (
    PaddedBatch,
    StrategyError,
    batch_sizes,
    configs,
    cut_points,
    head_dims,
    inputs,
    invalid_configs,
    padded_batches,
    seq_lengths,
    specs,
)

StrategyError.__module__ = __name__  # tracebacks name it where users import it from


def _register() -> None:
    from hypothesis import strategies as st

    from .reference.spec import AttentionSpec

    st.register_type_strategy(AttentionSpec, specs())


_register()

__all__ = ["KernelCase", "PaddedBatch", "StrategyError", "batch_sizes", "configs", "cut_points",
           "head_dims", "inputs", "invalid_configs", "kernel_cases", "kernel_lengths",
           "padded_batches", "seq_lengths", "specs"]
