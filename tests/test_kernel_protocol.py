"""The kernel protocol: the kernel reference against an independent formulation, declarations
checked at load with clear messages, the command line and the plugin on kernels, replays, and
the worker's harness (poisoned outputs, aliasing, plain tensors). Cheap: seconds each."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch
from torch import Tensor

import attnspec
from attnspec.reference.conventions import KernelConventions

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "tests" / "kernels"
BROKEN = KERNELS / "broken"
GOOD = ROOT / "tests" / "kernels" / "good"


def _sdpa_reference(q, k, v, *, causal, corner, scale, window=None):
    """o and the LSE by torch SDPA's math with an explicit mask: another formulation."""
    Tq, Tk = q.size(2), k.size(2)
    i = torch.arange(Tq)[:, None] + (Tk - Tq if corner == "bottom_right" else 0)
    j = torch.arange(Tk)[None, :]
    keep = (j <= i) if causal else torch.ones(Tq, Tk, dtype=torch.bool)
    if window is not None:
        left, right = window
        keep = keep & (j >= i - left) & (j <= i + right)
    H, G = q.size(1), k.size(1)
    k, v = k.repeat_interleave(H // G, 1), v.repeat_interleave(H // G, 1)
    s = torch.einsum("bhid,bhjd->bhij", q, k) * scale
    s = s.masked_fill(~keep, -math.inf)
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    return p @ v, lse


@pytest.mark.parametrize("corner", ["top_left", "bottom_right"])
@pytest.mark.parametrize(("Tq", "Tk"), [(5, 9), (9, 5), (7, 7)])
def test_the_kernel_reference_agrees_with_an_explicit_mask(corner: str, Tq: int, Tk: int) -> None:
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 6, Tq, 11, generator=gen, dtype=torch.float64)
    k, v = (torch.randn(2, 3, Tk, 11, generator=gen, dtype=torch.float64) for _ in range(2))
    for window in (None, (2, 0), (1, 3)):
        causal = window is None or window[1] == 0
        o, lse = attnspec.kernel_attention(q, k, v, causal=causal, corner=corner, scale=0.3,
                                           window=window)
        want_o, want_lse = _sdpa_reference(q, k, v, causal=causal, corner=corner, scale=0.3,
                                           window=window)
        torch.testing.assert_close(o, want_o)
        torch.testing.assert_close(lse, want_lse)  # -inf where a row sees no key, both
    seen = lse.isfinite()
    if corner == "bottom_right" and Tq > Tk:  # rows before the corner see nothing: 0 and -inf
        assert not bool(seen.all()) and bool((o[~seen] == 0).all())


def _kernel_file(tmp_path: Path, body: str, name: str = "k.py") -> str:
    path = tmp_path / name
    path.write_text("import torch\nimport torch.nn.functional as F\nPROTOCOL = 'kernel'\n"
                    + textwrap.dedent(body))
    return str(path)


_PLAIN = """
def attention(q, k, v, *, causal):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
"""


_WITH_CACHE = """
def attention_with_cache(q, k_cache, v_cache, *, cache_seqlens, causal, block_table=None,
                         k=None, v=None):
    return q
"""


@pytest.mark.parametrize(("declared", "says"), [
    ("LAYOUT = 'bhds'", "LAYOUT = 'bhds': it must be one of 'bhsd'"),
    ("CAUSAL = 'top'", "CAUSAL = 'top': it must be one of 'top_left'"),
    ("WINDOW = (-1, -1)", "WINDOW = (-1, -1): it must be None (it takes none), or one of"),
    ("FEATURES = ('gqa', 'paged')", "FEATURES lists 'paged': the features are gqa, scale"),
    ("FEATURES = 'gqa'", "FEATURES = 'gqa': give a tuple of names"),
    ("KNOBS = {'num_splits': 3}", "KNOBS['num_splits'] = 3: give a tuple of values"),
    ("KNOBS = {'causal': (1, 2)}", "KNOBS['causal']: causal is a keyword attnspec passes"),
    ("LSE = 'natural'\nLAYOUT = 'varlen'\nLSE_LAYOUT = 'bhs'",
     "LSE_LAYOUT = 'bhs' with LAYOUT = 'varlen': a varlen kernel's LSE is 'hs' or 'sh'"),
    ("BACKWARD = 'yes'", "BACKWARD = 'yes': it must be True or False"),
    ("MASKED_ROWS = 'nan'", "MASKED_ROWS = 'nan': it must be one of 'zero'"),
    ("PAGED = 16", "PAGED = 16 without attention_with_cache: a page size means nothing"),
    ("PAGED = 0\n" + _WITH_CACHE, "PAGED = 0: it must be None (no paged cache) or the page "
                                   "size, an int from 1 to 4096"),
    ("PAGED = True\n" + _WITH_CACHE, "PAGED = True: it must be None"),
    ("attention_with_cache = 3", "attention_with_cache = 3: it must be a function"),
    ("LAYOUT = 'varlen'\n" + _WITH_CACHE, "attention_with_cache with LAYOUT = 'varlen'"),
    ("def attention_with_cache(q, k_cache):\n    return q\n",
     "cannot be called as attention_with_cache(q, k_cache, v_cache, cache_seqlens=..."),
])
def test_a_bad_declaration_fails_at_load_saying_which_and_why(
        tmp_path: Path, declared: str, says: str) -> None:
    path = _kernel_file(tmp_path, declared + "\n" + _PLAIN)
    with pytest.raises(attnspec.TargetError) as error:
        attnspec.verify(path, isolate=False, profile="smoke", database=False)
    assert says in str(error.value), str(error.value)
    assert path in str(error.value)  # what was being loaded


def test_a_kernel_without_attention_or_with_module_hooks_is_refused(tmp_path: Path) -> None:
    with pytest.raises(attnspec.TargetError, match="has no attention"):
        attnspec.verify(_kernel_file(tmp_path, "x = 1\n"), isolate=False, database=False)
    with pytest.raises(attnspec.TargetError, match="defines decode, a module hook"):
        attnspec.verify(_kernel_file(tmp_path, _PLAIN + "def decode(m, x, c, o): pass\n", "h.py"),
                        isolate=False, database=False)
    with pytest.raises(attnspec.TargetError, match=r"cannot be called as attention\(q, k, v"):
        attnspec.verify(_kernel_file(tmp_path, "def attention(q, k):\n    return q\n", "a.py"),
                        isolate=False, database=False)


def test_the_conventions_round_trip_and_a_forged_value_is_refused() -> None:
    from attnspec.subjects import flash_style

    c = KernelConventions.of(flash_style)
    assert KernelConventions.from_json(c.to_json()) == c
    with pytest.raises(attnspec.ConfigError, match="unknown fields"):
        KernelConventions.from_json({**c.to_json(), "cheat": True})
    with pytest.raises(attnspec.ConfigError, match="LAYOUT"):
        KernelConventions.from_json({**c.to_json(), "layout": "nope"})


def test_the_cache_properties_skip_saying_why_and_replay_a_cache_example() -> None:
    report = attnspec.verify("attnspec.subjects.kernel_sdpa", only=["paged", "kv_append"],
                             isolate=False, database=False, profile="smoke")
    reasons = {p.id: (p.verdict, p.message) for p in report.properties}
    assert reasons["paged"][0] == reasons["kv_append"][0] == "skip", reasons
    assert "no attention_with_cache" in reasons["kv_append"][1], reasons
    contiguous = KERNELS / "good" / "kv_cache_bhsd.py"
    report = attnspec.verify(str(contiguous), only="paged", isolate=False, database=False,
                             profile="smoke")
    assert "PAGED = None" in report.properties[0].message, report.properties[0]
    example = {"kind": "kernel", "B": 3, "H": 2, "G": 1, "Tq": 1, "Tk": 10, "D": 4,
               "cache_seqlens": [0, 7, 4], "new_tokens": 3, "page_size": 4}
    (result,) = attnspec.verify(str(BROKEN / "page_table_ignored.py"), only="paged",
                                replay=example, isolate=False, database=False).properties
    assert result.verdict == "fail" and "physical page" in result.message, result.message
    (result,) = attnspec.verify(str(KERNELS / "good" / "paged_cache.py"), only="paged",
                                replay=example, isolate=False, database=False).properties
    assert result.verdict == "pass", result.message
    for bad, says in (({**example, "Tk": 9},
                       r"Tk must be max\(cache_seqlens\) \+ new_tokens"),
                      ({**example, "cache_seqlens": [1]}, "cache_seqlens must be B=3"),
                      ({**example, "page_size": 0}, "page_size must be")):
        with pytest.raises(attnspec.UsageError, match=says):
            attnspec.verify(str(KERNELS / "good" / "paged_cache.py"), only="paged",
                            replay=bad, isolate=False, database=False)


def test_module_property_ids_are_refused_for_a_kernel_with_its_own_ids() -> None:
    with pytest.raises(attnspec.UsageError) as error:
        attnspec.verify("attnspec.subjects.kernel_sdpa", only=["prefix"], isolate=False,
                        database=False)
    assert "prefix is module properties" in str(error.value) or "prefix is" in str(error.value)
    assert "fresh_results" in str(error.value)  # the kernel's ids are listed
    with pytest.raises(attnspec.UsageError, match="varlen are kernel properties|varlen is kernel"):
        attnspec.verify("attnspec.subjects.reference", only=["varlen"], isolate=False,
                        database=False)


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CI": ""}
    return subprocess.run([sys.executable, "-m", "attnspec", "verify", *args],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout)


@pytest.mark.slow
def test_the_cli_rejects_a_broken_kernel_and_its_replay_reproduces_the_failure(
        tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    done = _cli(str(BROKEN / "corner_bottom_right_as_top_left.py"), "--only", "causality",
                "--profile", "ci", "--no-database", "--report", str(report))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "causality: fail:" in done.stdout and "CAUSAL = 'top_left'" in done.stdout
    data = json.loads(report.read_text())
    (prop,) = data["properties"]
    assert prop["counterexample"]["kind"] == "kernel" and prop["counterexample"]["Tk"] > \
        prop["counterexample"]["Tq"]  # keys beyond the top-left diagonal: Tk > Tq
    replay = prop["replay"].split("--replay ", 1)[1].strip("'")
    again = _cli(str(BROKEN / "corner_bottom_right_as_top_left.py"), "--only", "causality",
                 "--replay", replay, "--no-database")
    assert again.returncode == 1, again.stdout + again.stderr
    assert "causality" in again.stdout and "fail" in again.stdout


def test_a_bad_kernel_replay_is_a_usage_error() -> None:
    good = {"kind": "kernel", "B": 2, "H": 4, "G": 2, "Tq": 3, "Tk": 5, "D": 8}
    for bad, says in (({**good, "G": 3}, "G=3 must divide H=4"),
                      ({**good, "T": 3}, "unknown field 'T'"),
                      ({k: v for k, v in good.items() if k != "Tk"}, "missing Tk"),
                      ({**good, "lengths": [[1, 1]]}, "lengths must be B=2 pairs")):
        with pytest.raises(attnspec.UsageError, match=says):
            attnspec.verify("attnspec.subjects.kernel_sdpa", only="oracle", replay=bad,
                            isolate=False, database=False)
    report = attnspec.verify("attnspec.subjects.kernel_sdpa", only="oracle", replay=good,
                             isolate=False, database=False)
    assert report.ok and report.properties[0].examples == 1


@pytest.mark.parametrize("name", ["returns_empty", "single_key_returns_v",
                                  "returns_tensor_subclass"])
def test_the_harness_names_the_cheat(name: str) -> None:
    """Poisoned memory, an output in an input's memory, a tensor subclass: each is named."""
    replays = {"returns_empty": ("fresh_results", {"Tq": 5, "Tk": 7}, "poisoned"),
               "single_key_returns_v": ("oracle", {"Tq": 1, "Tk": 1}, "in the memory of its "
                                                                      "input v"),
               "returns_tensor_subclass": ("dtype", {"Tq": 5, "Tk": 7}, "not a plain "
                                                                         "torch.Tensor")}
    prop, sizes, says = replays[name]
    example = {"kind": "kernel", "B": 2, "H": 4, "G": 4, "D": 8, **sizes}
    report = attnspec.verify(str(BROKEN / f"{name}.py"), only=prop, replay=example,
                             isolate=False, database=False)
    (result,) = report.properties
    assert result.verdict in ("fail", "error") and says in result.message, result.message


@pytest.mark.slow
def test_the_plugin_collects_a_kernels_own_properties() -> None:
    env = {**os.environ, "CI": ""}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--attnspec-subject",
         str(BROKEN / "gqa_head_modulo.py"), "--attnspec-max-examples", "10", "-k",
         "gqa_grouping or varlen"], capture_output=True, text=True, cwd=ROOT, env=env,
        timeout=300)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "test_gqa_grouping[" in done.stdout or "gqa_grouping" in done.stdout
    assert "replay: attnspec verify" in done.stdout
    assert "1 failed" in done.stdout and "skipped" in done.stdout  # varlen: not a varlen kernel


def test_a_cache_answer_with_a_resized_cache_or_no_lse_is_refused() -> None:
    from attnspec.common.protocol import BadAnswer, check_results

    q, cache = torch.zeros(1, 2, 1, 4), torch.zeros(1, 1, 8, 4)
    step = {"op": "kernel_cache", "q": q, "k_cache": cache, "v_cache": cache,
            "out_shape": [1, 2, 1, 4], "lse": True, "lse_shape": [1, 2, 1]}
    ok = {"out": q.clone(), "device": "cpu", "lse": torch.zeros(1, 2, 1), "lse_grad": False,
          "k_cache": cache.clone(), "v_cache": cache.clone()}
    check_results({"kind": "ok", "results": [ok]}, [step], device="cpu")
    for forged, says in (({**ok, "k_cache": cache[:, :, :4].clone()}, "k_cache after the call"),
                         ({**ok, "lse": None}, "no LSE"),
                         ({**ok, "v_cache": cache.long()}, "not a floating tensor")):
        with pytest.raises(BadAnswer, match=says):
            check_results({"kind": "ok", "results": [forged]}, [step], device="cpu")


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_the_yardstick_is_computed_as_far_as_the_verdict_needs_and_judges_as_the_whole(
        dtype: str) -> None:
    """An error within the floor computes no fair rounding, one past the first's allowance
    computes the second; at every error the verdict and the message are those of the whole
    yardstick (the larger error of both roundings), computed eagerly."""
    from attnspec.properties import kernel as kp
    from attnspec.properties import tolerance as tol
    from attnspec.properties.kernel import checks, judging

    ex = kp.KernelExample(B=2, H=3, G=3, Tq=37, Tk=37, D=24, dtype=dtype, device="cpu",
                          seed=5, scale=3.0, causal=True)
    q, k, v = kp.inputs(ex)
    golden = checks._golden(ex, q, k, v, "top_left")
    low = getattr(torch, dtype)
    whole = max(tol.max_abs_diff(kp.reference(ex, q, k, v, "top_left", low, reorder=r)[0],
                                 golden[0])[0] for r in (False, True))
    assert whole > 0
    lazy = judging.Yardstick(ex, q, k, v, "top_left", golden)
    assert judging._judge("o", golden[0], golden[0], lazy, ex) is None
    assert lazy._left == [False, True]  # nothing computed: the floor covered it
    floor = tol.floor(dtype, judging._finite_max(golden[0]))
    computed = []
    for err in (floor / 2, floor * 1.01, tol.K * whole + floor * 0.99,
                tol.K * whole + floor * 1.01, 10 * (tol.K * whole + floor)):
        got = golden[0].clone()
        got[1, 2, 30, 5] += err
        lazy = judging.Yardstick(ex, q, k, v, "top_left", golden)
        said, eager = judging._judge("o", got, golden[0], lazy, ex), \
            judging._judge("o", got, golden[0], whole, ex)
        assert (said is None) == (eager is None), err
        assert said is None or said.message == eager.message
        computed.append(2 - len(lazy._left))
    assert computed[0] == 0 and computed[-1] == 2, computed
    assert lazy["o"] == whole and not lazy._left


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
@pytest.mark.parametrize("features", [{}, {"softcap": 5.0, "alibi": True},
                                      {"sinks": True, "window": (7, 0)}])
def test_the_batched_reference_equals_the_reference_row_by_row(dtype: str,
                                                               features: dict) -> None:
    """Rows of equal lengths go to the core in one call: the values (and gradients) are those
    of one call per row, bit for bit, in the golden's dtype and the example's, both roundings."""
    import dataclasses

    from attnspec.properties import kernel as kp

    ex = kp.KernelExample(B=3, H=6, G=2, Tq=65, Tk=97, D=24, dtype=dtype, device="cpu",
                          seed=4, scale=2.0, causal=True, **features)
    by_row = dataclasses.replace(ex, lengths=((65, 97),) * 3)  # the varlen path: row by row
    q, k, v = kp.inputs(ex)
    do = kp.inputs(dataclasses.replace(ex, scale=1.0), 31)[0].double()
    for low in (torch.float64, getattr(torch, dtype)):
        for reorder in (False, True):
            a, b = (kp.reference(e, q, k, v, "bottom_right", low, reorder=reorder, grad=do)
                    for e in (ex, by_row))
            assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
            assert a[2] is not None and b[2] is not None
            assert all(torch.equal(x, y) for x, y in zip(a[2], b[2], strict=True))


def test_kernel_inputs_are_disjoint_windows_of_one_pool_copied_out_of_it() -> None:
    """q, k and v come from one window of the process's pool of float64 N(0, 1) values (no
    value shared between them), at an offset drawn from the seed and salt; they are copies
    (a check that wrote into one could not change another example's); a request past half the
    pool is drawn afresh."""
    from attnspec.properties import kernel as kp
    from attnspec.properties.kernel import example

    ex = kp.KernelExample(B=2, H=4, G=2, Tq=9, Tk=11, D=7, dtype="float64", device="cpu",
                          seed=12, scale=1.0, causal=True)
    q, k, v = example._drawn(ex, 0)
    values = torch.cat([t.flatten() for t in (q, k, v)])
    assert values.unique().numel() == values.numel()
    pool = example._pool()
    for t in (q, k, v):
        assert t.untyped_storage().data_ptr() != pool.untyped_storage().data_ptr()
    assert all(torch.equal(a, b) for a, b in zip(example._drawn(ex, 0), (q, k, v), strict=True))
    assert not torch.equal(example._drawn(ex, 1)[0], q)
    assert abs(float(pool.mean())) < 2e-3 and abs(float(pool.std()) - 1) < 2e-3
    big = example._normal(ex, 5, example.POOL_SIZE // 2 + 1)
    assert big.numel() == example.POOL_SIZE // 2 + 1 and abs(float(big.std()) - 1) < 5e-3
    assert big.untyped_storage().data_ptr() != pool.untyped_storage().data_ptr()


def test_a_kernel_answer_naming_what_it_wrote_is_checked() -> None:
    from attnspec.common.protocol import BadAnswer, check_results

    q = torch.zeros(1, 2, 3, 4)
    step = {"op": "kernel", "q": q, "k": q, "v": q, "out_shape": [1, 2, 3, 4], "lse": False,
            "lse_shape": [1, 2, 3], "inputs_after": True}
    ok = {"out": q.clone(), "device": "cpu", "lse": None, "lse_grad": False,
          "inputs": {n: q.clone() for n in "qkv"}, "written": "k"}
    check_results({"kind": "ok", "results": [ok]}, [step], device="cpu")
    for forged in ("weights", "q,k,v,q", 3):
        with pytest.raises(BadAnswer, match="'written'"):
            check_results({"kind": "ok", "results": [{**ok, "written": forged}]}, [step],
                          device="cpu")


def test_a_kernel_answer_for_the_call_made_alongside_is_checked() -> None:
    from attnspec.common.protocol import BadAnswer, check_results

    q = torch.zeros(1, 2, 3, 4)
    step = {"op": "kernel", "q": q, "k": q, "v": q, "out_shape": [1, 2, 3, 4], "lse": False,
            "lse_shape": [1, 2, 3], "alongside": {n: q for n in "qkv"}}
    ok = {"out": q.clone(), "device": "cpu", "lse": None, "lse_grad": False,
          "alongside": q.clone()}
    check_results({"kind": "ok", "results": [ok]}, [step], device="cpu")
    for forged, match in ((None, "'alongside'"), ("o", "'alongside'"),
                          (torch.zeros(1, 2, 3), "second thread"),
                          (q.half(), "second thread")):
        with pytest.raises(BadAnswer, match=match):
            check_results({"kind": "ok", "results": [{**ok, "alongside": forged}]}, [step],
                          device="cpu")


def test_fresh_results_calls_from_two_threads_at_once_and_with_a_stride_0_k() -> None:
    """The worker runs the fourth call while a second thread calls on the first inputs (both
    started at one barrier, overlapping), and sends k as one row expanded along B."""
    from attnspec.runner import execute

    seen: list[tuple[str, tuple[int, ...], float, float]] = []
    gate = threading.Barrier(2, timeout=10)

    def call(q: Tensor, k: Tensor, v: Tensor, **keywords: object) -> Tensor:
        start = time.monotonic()
        gate.wait()  # both calls in flight at once, or this times out
        seen.append((threading.current_thread().name, tuple(k.stride()), start,
                     time.monotonic()))
        return torch.nn.functional.scaled_dot_product_attention(
            q, k.repeat_interleave(q.shape[1] // k.shape[1], 1),
            v.repeat_interleave(q.shape[1] // k.shape[1], 1), is_causal=True)

    class Subject:
        build = staticmethod(call)

    state = execute.Executed(subject=Subject())  # type: ignore[arg-type]
    state.device = "cpu"
    q = torch.randn(2, 4, 5, 3)
    kv = torch.randn(1, 2, 5, 3).expand(2, 2, 5, 3).contiguous()
    step = {"op": "kernel", "q": q, "k": kv, "v": kv.clone(), "keywords": {"causal": True},
            "lse": False, "out_shape": [2, 4, 5, 3], "lse_shape": [2, 4, 5],
            "broadcast": ["k"], "alongside": {"q": q + 1, "k": kv, "v": kv}}
    sent = execute._kernel(state, step)
    assert sorted(name for name, *_ in seen) == ["MainThread", "attnspec-alongside"]
    main = next(s for s in seen if s[0] == "MainThread")
    assert main[1][0] == 0  # k's batch stride
    assert sent["alongside"].shape == sent["out"].shape
    assert not torch.equal(sent["alongside"], sent["out"])
