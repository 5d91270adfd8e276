"""attnspec.strategies: each strategy draws within its bounds, refuses impossible bounds when
made (naming the strategy, the values and why), and is the one the engine draws from."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

import attnspec
from attnspec import strategies as ast
from attnspec.session import kernel_strategies, strategies

ROOT = Path(__file__).resolve().parents[1]
FEW = settings(max_examples=25, deadline=None, database=None,
               suppress_health_check=[HealthCheck.too_slow])


# ---- sizes -----------------------------------------------------------------------------------


@FEW
@given(st.data())
def test_sizes_stay_within_their_bounds(data: st.DataObject) -> None:
    low = data.draw(st.integers(1, 40), label="low")
    high = data.draw(st.integers(low, 80), label="high")
    for strategy in (ast.batch_sizes, ast.seq_lengths, ast.head_dims, ast.kernel_lengths):
        drawn = data.draw(strategy(min_value=low, max_value=high), label=strategy.__name__)
        assert low <= drawn <= high, (strategy.__name__, low, high, drawn)


def _many(strategy: st.SearchStrategy[Any], n: int = 60) -> list[Any]:
    seen: list[Any] = []

    @settings(max_examples=n, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(value: Any) -> None:
        seen.append(value)

    collect()
    return seen


def test_defaults_are_the_documented_ones() -> None:
    assert {*_many(ast.batch_sizes())} <= set(range(1, 5))
    assert max(_many(ast.seq_lengths())) <= 64
    assert max(_many(ast.kernel_lengths())) <= 256
    assert max(_many(ast.head_dims())) <= 256
    for C, H in _many(ast.configs()):
        assert 1 <= H <= 32 and C % H == 0 and 1 <= C // H <= 256 and C <= 512


def test_lengths_favour_block_boundaries() -> None:
    # The point of these strategies over st.integers: the edges kernels tile by come up often.
    drawn = _many(ast.kernel_lengths(max_value=300), n=200)
    assert {1, 63, 64, 65, 127, 128, 129} & set(drawn), sorted(set(drawn))
    assert len({d for d in _many(ast.head_dims(), n=200) if d in (32, 64, 128, 256)}) >= 2


@FEW
@given(ast.configs(max_heads=4, max_head_dim=8, max_width=24))
def test_configs_divide_and_respect_the_bounds(config: tuple[int, int]) -> None:
    C, H = config
    assert 1 <= H <= 4 and C % H == 0 and C // H <= 8 and C <= 24


@settings(FEW, suppress_health_check=[HealthCheck.filter_too_much])  # as documented
@given(ast.configs(supported=[(64, 1), (128, 2)]))
def test_configs_draw_only_what_is_supported(config: tuple[int, int]) -> None:
    assert config in ((64, 1), (128, 2))


@FEW
@given(ast.invalid_configs(max_embd=20))
def test_invalid_configs_cannot_be_built(config: tuple[int, int]) -> None:
    C, H = config
    assert C < 1 or H < 1 or C % H != 0
    with pytest.raises(attnspec.ConfigError):
        attnspec.CausalSelfAttention(C, H)


@FEW
@given(st.integers(1, 300).flatmap(lambda T: st.tuples(st.just(T), ast.cut_points(T=T))))
def test_cut_points_are_sorted_positions_with_the_edges(drawn: tuple[int, tuple[int, ...]],
                                                         ) -> None:
    T, cuts = drawn
    assert list(cuts) == sorted(set(cuts)) and all(0 <= c < T for c in cuts)
    assert {0, T - 1, T // 2} <= set(cuts)


# ---- specs -----------------------------------------------------------------------------------


@FEW
@given(ast.specs(max_heads=6, max_head_dim=12, max_width=48, max_seq=20))
def test_specs_by_default_vary_everything_within_the_bounds(spec: attnspec.AttentionSpec) -> None:
    assert 1 <= spec.n_head <= 6 and 1 <= spec.D <= 12 and spec.n_head * spec.D <= 48
    assert spec.n_head % spec.G == 0
    assert spec.window is None or 1 <= spec.window <= 20


@FEW
@given(ast.specs(variants={"n_kv_head": "any", "positions": [attnspec.RoPE()]}, grouped=True,
                 rotary=True))
def test_specs_keep_what_variants_leave_out(spec: attnspec.AttentionSpec) -> None:
    assert 1 < spec.G < spec.n_head and isinstance(spec.positions, attnspec.RoPE)
    assert (spec.window, spec.softcap, spec.qk_norm, spec.sinks) == (None, None, None, False)


@FEW
@given(ast.specs(variants={"window": "any"}, windowed=True, max_seq=16))
def test_windowed_specs_leave_room_past_the_window(spec: attnspec.AttentionSpec) -> None:
    assert spec.window is not None and 1 <= spec.window < 16


@FEW
@given(ast.specs(variants={"n_kv_head": "any"}, head_shards=2))
def test_head_shards_divide_the_heads(spec: attnspec.AttentionSpec) -> None:
    assert spec.n_head % 2 == 0 and spec.G % 2 == 0


# ---- tensors ---------------------------------------------------------------------------------


@FEW
@given(ast.inputs(shape=st.tuples(ast.batch_sizes(), ast.seq_lengths(max_value=9),
                                  st.just(12)), dtype=torch.bfloat16, scale=3.0))
def test_inputs_have_the_shape_dtype_and_scale_asked(x: torch.Tensor) -> None:
    assert x.shape[2] == 12 and 1 <= x.shape[0] <= 4 and 1 <= x.shape[1] <= 9
    assert x.dtype == torch.bfloat16 and x.device.type == "cpu" and x.isfinite().all()


def test_inputs_are_the_engines_own_for_the_same_seed() -> None:
    from attnspec.properties.base import Example, _inputs

    (x,) = _many(ast.inputs(shape=(2, 5, 12)), n=1)
    seeds = _many(strategies.SEEDS, n=1)  # the same derandomized choice: the first seed
    ex = Example(B=2, T=5, C=12, H=3, seed=seeds[0])
    assert torch.equal(x, _inputs(ex))


@FEW
@given(ast.padded_batches(shape=st.tuples(ast.batch_sizes(), ast.seq_lengths(max_value=12),
                                          st.just(8))))
def test_padded_batches_mask_the_real_tokens_on_one_side(batch: ast.PaddedBatch) -> None:
    B, T, C = batch.x.shape
    assert batch.key_mask.shape == (B, T) and batch.key_mask.dtype == torch.bool
    assert batch.key_mask.sum(dim=1).tolist() == list(batch.lengths)
    assert all(1 <= n <= T for n in batch.lengths)
    assert T == 1 or min(batch.lengths) < T  # at least one row padded where there is room
    for row, n in zip(batch.key_mask, batch.lengths, strict=True):
        real = row[T - n:] if batch.side == "left" else row[:n]
        assert real.all() and row.sum() == n


@FEW
@given(ast.padded_batches(shape=(2, 6, 4), side="left"))
def test_padded_batches_take_a_side(batch: ast.PaddedBatch) -> None:
    assert batch.side == "left" and batch.key_mask[:, -1].all()


# ---- kernel cases ----------------------------------------------------------------------------


KERNEL_BOUNDS = {"max_seq": 40, "max_heads": 6, "max_head_dim": 24}


@FEW
@given(ast.kernel_cases(layout="bshd", corner="bottom_right", window="pair",
                        features=("gqa", "cross", "noncausal", "softcap", "scale"),
                        **KERNEL_BOUNDS))
def test_kernel_cases_are_in_their_layout_and_bounds(case: ast.KernelCase) -> None:
    ex = case.example
    assert case.q.shape == (ex.B, ex.Tq, ex.H, ex.D)
    assert case.k.shape == case.v.shape == (ex.B, ex.Tk, ex.G, ex.D)
    assert ex.H <= 6 and ex.D <= 24 and max(ex.Tq, ex.Tk) <= 40 and ex.H % ex.G == 0
    assert len({ex.B, ex.H, ex.Tq, ex.D}) == 4  # distinct: a layout mix-up cannot hide
    assert case.q.dtype == torch.float32 and case.corner == "bottom_right"
    o, lse = case.reference()
    assert o.shape == (ex.B, ex.Tq, ex.H, ex.D) and lse.shape == (ex.B, ex.H, ex.Tq)


@FEW
@given(ast.kernel_cases(**KERNEL_BOUNDS))
def test_kernel_cases_default_to_causal_self_attention(case: ast.KernelCase) -> None:
    ex = case.example
    assert case.causal and case.window is None and case.softcap is None
    assert ex.G == ex.H and ex.Tq == ex.Tk and case.alibi_slopes is None and case.sinks is None
    assert case.q.shape == (ex.B, ex.H, ex.Tq, ex.D)  # bhsd


def test_a_kernel_case_reference_is_the_oracle_propertys() -> None:
    from attnspec.properties.kernel import inputs, reference

    (case,) = _many(ast.kernel_cases(features=("softcap", "alibi", "sinks"), **KERNEL_BOUNDS),
                    n=1)
    o, lse = case.reference()
    want_o, want_lse, _ = reference(case.example, *inputs(case.example), "top_left")
    assert torch.equal(o, want_o) and torch.equal(lse, want_lse)


def test_kernel_draws_keep_the_budgets_by_heads_and_rows_and_reach_every_bound() -> None:
    """B x H x Tq x Tk x D stays within the flop budget (the float64 reference's cost) and the
    scores within theirs, by taking heads and rows away: lengths up to max_seq, head dims up
    to 256 and heads up to 32 are all still drawn."""
    from attnspec.properties.kernel import KERNEL_BY_ID
    from attnspec.reference.conventions import KernelConventions
    from attnspec.session.kernel_strategies import FLOP_BUDGET, SCORE_BUDGET, kernel_examples

    drawn = _many(kernel_examples(KERNEL_BY_ID["oracle"], KernelConventions(
        layout="bhsd", causal="bottom_right", window=None, features=("cross", "gqa")),
        dtypes={"cpu": ["float32"]}, max_seq=256, max_heads=32, max_head_dim=256), n=800)
    for ex in drawn:
        assert ex.B * ex.H * ex.Tq * ex.Tk <= SCORE_BUDGET, ex
        assert ex.B * ex.H * ex.Tq * ex.Tk * ex.D <= FLOP_BUDGET, ex
        assert len({ex.B, ex.H, ex.Tq, ex.D}) == 4 and ex.Tk not in (ex.B, ex.H, ex.D), ex
    assert max(max(ex.Tq, ex.Tk) for ex in drawn) == 256
    assert max(ex.D for ex in drawn) == 256 and max(ex.H for ex in drawn) >= 30
    widest = max(drawn, key=lambda ex: ex.B * ex.H * ex.Tq * ex.Tk * ex.D)
    assert widest.B * widest.H * widest.Tq * widest.Tk * widest.D > FLOP_BUDGET // 4
    # two rows at least: where they are past a budget, H is lowered (it was drawn for one row,
    # and 19 of 600 batch_independence examples passed the flop budget)
    for ex in _many(kernel_examples(KERNEL_BY_ID["batch_independence"], KernelConventions(
            layout="bhsd", causal="bottom_right", window=None, features=("cross", "gqa")),
            dtypes={"cpu": ["float32"]}, max_seq=256, max_heads=32, max_head_dim=256), n=400):
        assert ex.B >= 2 and ex.B * ex.H * ex.Tq * ex.Tk * ex.D <= FLOP_BUDGET, ex


@pytest.mark.parametrize("prop_id", ["oracle", "gqa_grouping", "batch_independence"])
def test_long_kernel_draws_keep_their_lengths_and_head_dims_past_both_budgets(
        prop_id: str) -> None:
    """With --max-seq 1024, Tq x Tk (x D) can pass the budgets with the fewest heads and rows:
    such examples are drawn with the least H and B apart from the other sizes (the budgets
    never cut lengths or head dims: 1023 x 1023 and D = 256 at long lengths are drawn; they
    were all rejected, B being lowered onto H), and nothing else passes a budget; the bounds
    and the property's least H (gqa_grouping: 2, G < H) and B (batch_independence: 2) hold."""
    from attnspec.properties.kernel import KERNEL_BY_ID
    from attnspec.reference.conventions import KernelConventions
    from attnspec.session.kernel_strategies import FLOP_BUDGET, SCORE_BUDGET, kernel_examples

    prop = KERNEL_BY_ID[prop_id]
    fewest_heads, fewest_rows = (2 if prop_id == "gqa_grouping" else 1), max(prop.min_batch, 1)
    drawn = _many(kernel_examples(prop, KernelConventions(
        layout="bhsd", causal="bottom_right", window=None, features=("cross", "gqa")),
        dtypes={"cpu": ["float32"]}, max_seq=1024, max_heads=32, max_head_dim=256), n=800)
    past = [ex for ex in drawn if ex.B * ex.H * ex.Tq * ex.Tk * ex.D > FLOP_BUDGET
            or ex.B * ex.H * ex.Tq * ex.Tk > SCORE_BUDGET]
    for ex in drawn:
        assert len({ex.B, ex.H, ex.Tq, ex.D}) == 4 and ex.Tk not in (ex.B, ex.H, ex.D), ex
        assert max(ex.Tq, ex.Tk) <= 1024 and ex.D <= 256 and fewest_heads <= ex.H <= 32, ex
        assert ex.B >= fewest_rows and ex.H % ex.G == 0, ex
        assert ex.G < ex.H or prop_id != "gqa_grouping", ex
    for ex in past:  # the least H apart from D, Tq, Tk; the least B apart from those and H
        assert all(h in (ex.D, ex.Tq, ex.Tk) for h in range(fewest_heads, ex.H)), ex
        assert all(b in (ex.H, ex.D, ex.Tq, ex.Tk) for b in range(fewest_rows, ex.B)), ex
    assert any(ex.Tq * ex.Tk * ex.D > FLOP_BUDGET // 2 and ex.D >= 192 for ex in past)
    assert any(ex.B * ex.H * ex.Tq * ex.Tk > SCORE_BUDGET and min(ex.Tq, ex.Tk) >= 1000
               for ex in past)


# ---- bad arguments ---------------------------------------------------------------------------


@pytest.mark.parametrize(("make", "said"), [
    (lambda: ast.seq_lengths(min_value=5, max_value=3),
     "seq_lengths(min_value=5, max_value=3) cannot draw sequence lengths T: min_value=5 is "
     "above max_value=3"),
    (lambda: ast.batch_sizes(min_value=9),
     "batch_sizes(min_value=9) cannot draw batch sizes B: min_value=9 is above max_value=4 "
     "(the default)"),
    (lambda: ast.head_dims(max_value=-2), "head_dims(max_value=-2) cannot draw head dims D: "
     "max_value=-2 is below 1"),
    (lambda: ast.kernel_lengths(min_value=1.5), "min_value must be a whole number"),
    (lambda: ast.configs(max_width=0), "configs(max_width=0) cannot draw configurations "
     "(n_embd, n_head): max_width=0 is below 1"),
    (lambda: ast.configs(supported=[(10, 3)]), "supported lists (10, 3), which is no "
     "configuration: each pair is (n_embd, n_head), whole numbers >= 1 with n_embd % n_head"),
    (lambda: ast.cut_points(T=0), "cut_points(T=0) cannot draw cut points: T must be"),
    (lambda: ast.specs(variants={"heads": "any"}), "variants names 'heads'; the fields"),
    (lambda: ast.specs(variants={"window": [0]}), "variants['window'] lists 0, which no "
     "attention spec can have"),
    (lambda: ast.specs(variants={}, windowed=True), "windowed=True, but variants allow no "
     "window"),
    (lambda: ast.specs(variants={"n_kv_head": [1]}, grouped=True), "grouped=True, but "
     "variants allow no n_kv_head"),
    (lambda: ast.specs(head_shards=0), "head_shards must be a whole number of ranks >= 1"),
    (lambda: ast.inputs(shape=(2, -1, 4)), "inputs(shape=(2, -1, 4)) cannot draw input "
     "tensors: shape must be a tuple of whole sizes >= 0"),
    (lambda: ast.inputs(shape=(2, 3), dtype=torch.int64), "dtype must be one of float32"),
    (lambda: ast.inputs(shape=(2, 3), scale=float("nan")), "scale must be a finite number"),
    (lambda: ast.padded_batches(shape=(2, 3)), "shape must be a tuple of 3 whole sizes >= 1"),
    (lambda: ast.padded_batches(shape=(2, 3, 4), side="top"), "side must be 'left', 'right'"),
    (lambda: ast.kernel_cases(layout="varlen"), "varlen packs sequences"),
    (lambda: ast.kernel_cases(corner="middle"), "kernel_cases(corner='middle') cannot draw "
     "kernel cases: corner='middle': it must be one of 'top_left'"),
    (lambda: ast.kernel_cases(features=("flash",)), "features lists 'flash'"),
    (lambda: ast.kernel_cases(features="gqa"), "features is a tuple of names, not one string"),
    (lambda: ast.kernel_cases(max_heads=1, max_head_dim=1), "distinct=True needs H and D"),
])
def test_bad_arguments_are_refused_when_the_strategy_is_made(make: Any, said: str) -> None:
    with pytest.raises(ast.StrategyError) as caught:
        make()  # made, not drawn: the error comes before any example
    assert said in str(caught.value), str(caught.value)
    assert str(caught.value).startswith("attnspec.strategies.")
    assert isinstance(caught.value, attnspec.UsageError | InvalidArgument)
    assert caught.value.option is not None and caught.value.reason


def test_a_drawn_shape_that_is_impossible_is_refused_by_name() -> None:
    with pytest.raises(ast.StrategyError, match=r"inputs\(shape=\(-1,\)\) cannot draw"):
        _many(ast.inputs(shape=st.just((-1,))), n=1)


# ---- the engine draws from these ------------------------------------------------------------


def test_the_public_strategies_are_the_engines() -> None:
    for name in ast.__all__:
        here = kernel_strategies if hasattr(kernel_strategies, name) and name in \
            kernel_strategies.__all__ else strategies
        assert getattr(ast, name) is getattr(here, name), name


def test_the_engine_draws_its_examples_through_the_public_strategies(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: dict[str, int] = {}

    def counted(name: str, module: Any) -> None:
        real = getattr(module, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[name] = calls.get(name, 0) + 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    for name in ("specs", "configs", "seq_lengths", "batch_sizes", "cut_points", "head_dims",
                 "invalid_configs"):
        counted(name, strategies)
    counted("kernel_lengths", kernel_strategies)
    # protocol 1 (configs, divisibility's invalid configs) and protocol 2 (specs)
    for target, only in (("attnspec.subjects.sdpa", "causality,divisibility"),
                         ("attnspec.subjects.variants", "window"),
                         ("attnspec.subjects.kernel_sdpa", "oracle")):
        report = attnspec.verify(target, only=only, max_examples=5, seed=0, database=False,
                                 isolate=False, dtypes=["float32"])
        assert report.ok, report.summary()
    assert set(calls) == {"specs", "configs", "seq_lengths", "batch_sizes", "cut_points",
                          "head_dims", "invalid_configs", "kernel_lengths"}, calls


def test_importing_the_strategies_is_not_importing_attnspec() -> None:
    # `import attnspec` stays free of Hypothesis; attnspec.strategies is where it loads.
    probe = ("import sys, attnspec; print('hypothesis' in sys.modules); "
             "from attnspec import strategies; print('hypothesis' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "True"]


# ---- the example users copy ------------------------------------------------------------------


@pytest.mark.slow
def test_the_users_example_passes_and_catches_a_bug(tmp_path: Path) -> None:
    # Run as a user runs it (pytest on the file), under this repository's strict pytest
    # settings; Hypothesis's database goes to a temporary folder, not to the checkout.
    example = ROOT / "examples" / "test_with_attnspec_strategies.py"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(example)], capture_output=True, text=True, timeout=600,
                          check=False, cwd=ROOT,
                          env={**os.environ, "HYPOTHESIS_STORAGE_DIRECTORY": str(tmp_path)})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "failed" not in done.stdout, done.stdout[-2000:]
