"""Sharded attention: the protocol's sharding hooks, the ranks (a supervised gang of worker
processes in one gloo group on 127.0.0.1), tp_equivalence and cp_equivalence.

The fast tests need no process; the slow ones start ranks at world size 2 only (CI's share:
4 ranks are the catalogue's and the conformance run's).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import attnspec
from attnspec._errors import TargetError, UsageError
from attnspec.common.options import RunOptions
from attnspec.properties.base import Example
from attnspec.properties.sharded import _rank_fault
from attnspec.reference.sharding import shard_positions_of
from attnspec.reference.spec import AttentionSpec
from attnspec.runner.gang import Gang, consequence
from attnspec.runner.subject import load_subject
from attnspec.session.engine import Session

HERE = Path(__file__).parent
GOOD = HERE / "good" / "sharded_gather.py"
FAULTY = HERE / "faulty" / "rank_fails.py"


# ---- without processes -------------------------------------------------------------------


def test_an_unsharded_example_replays_as_before_and_a_sharded_one_names_its_world() -> None:
    plain = Example(B=1, T=4, C=8, H=2)
    assert "world" not in plain.to_json()
    sharded = Example(B=1, T=8, C=8, H=2, spec=AttentionSpec(8, 2), world=2)
    assert sharded.to_json()["world"] == 2
    assert Example.from_json(sharded.to_json()) == sharded
    assert sharded.describe().endswith("world=2")


@pytest.mark.parametrize(("attrs", "message"), [
    ("WORLD_SIZES = (1, 2)", "WORLD_SIZES = (1, 2); it must be a sequence of whole numbers of "
                             "ranks in 2..8"),
    ("WORLD_SIZES = 2", "WORLD_SIZES = 2; it must be a sequence"),
    ("CP_LAYOUT = 'zigzag'", "CP_LAYOUT = 'zigzag'; it must be one of 'head_tail', "
                             "'contiguous'"),
])
def test_bad_sharding_declarations_are_target_errors(tmp_path: Path, attrs: str,
                                                     message: str) -> None:
    path = tmp_path / "subject.py"
    path.write_text(f"PROTOCOL = 2\n{attrs}\ndef build(spec): pass\n"
                    "def shard_heads(module, mesh): return module\n")
    with pytest.raises(TargetError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_subject(str(path))


def test_sharding_hooks_are_protocol_2_hooks(tmp_path: Path) -> None:
    path = tmp_path / "subject.py"
    path.write_text("def build(n_embd, n_head): pass\ndef shard_heads(module, mesh): pass\n")
    with pytest.raises(TargetError, match="defines shard_heads, which are protocol 2 hooks"):
        load_subject(str(path))
    subject = load_subject(str(GOOD))
    assert set(subject.hooks) == {"shard_heads", "shard_positions"}
    assert (subject.world_sizes, subject.cp_layout) == ((2, 4), "head_tail")


@pytest.mark.parametrize("sizes", [(1,), (2, 9), (), ("2",)])
def test_world_sizes_option_is_checked(sizes: tuple[Any, ...]) -> None:
    with pytest.raises(UsageError, match=r"world_sizes=.*a whole number of ranks in 2\.\.8"):
        RunOptions(world_sizes=sizes)
    assert RunOptions(world_sizes=(4, 2, 2)).world_sizes == (2, 4)
    with pytest.raises(UsageError, match="'x' is not a whole number of ranks"):
        RunOptions(world_sizes=(2, "x"))  # type: ignore[arg-type]


def test_the_rank_to_blame_is_the_one_whose_error_is_its_own() -> None:
    gloo = ("[../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
            "[127.0.0.1]:16257")
    assert consequence(gloo) and consequence("Timed out waiting 3000ms for recv operation")
    answers = [{"kind": "error", "message": gloo},
               {"kind": "error", "message": "forward raised: ValueError: no kernel"},
               {"kind": "stopped", "message": "stopped after another rank failed"}]
    assert _rank_fault(answers) == "rank 1 of 3: forward raised: ValueError: no kernel"
    both_gloo = [{"kind": "error", "message": gloo}, {"kind": "error", "message": gloo}]
    assert "deadlocked" in str(_rank_fault(both_gloo))
    assert _rank_fault([{"kind": "ok"}, {"kind": "ok"}]) is None


def test_a_replayed_sharded_example_is_validated() -> None:
    with Session(str(GOOD), RunOptions(world_sizes=(2,)), isolate=False) as session:
        spec = AttentionSpec(12, 6).to_json()
        good = {"B": 1, "T": 8, "C": 12, "H": 6, "spec": spec, "world": 2}
        assert session.replay_example("tp_equivalence", good).world == 2
        cases = {
            ("tp_equivalence", 4): "world=4; tp_equivalence runs on 2 ranks here",
            ("cp_equivalence", 2, 6): "T=6 cannot be split over world=2 in the head_tail "
                                      "layout: it needs T % 4 == 0",
            ("width", 2): "world=2, but width runs unsharded: drop the world",
        }
        for key, message in cases.items():
            data = {**good, "world": key[1]} | ({"T": key[2]} if len(key) > 2 else {})
            with pytest.raises(UsageError, match=message.replace("(", r"\(")):
                session.replay_example(key[0], data)
        with pytest.raises(UsageError, match="n_head=3 is not divisible by world=2"):
            session.replay_example("tp_equivalence", {**good, "C": 12, "H": 3,
                                                      "spec": AttentionSpec(12, 3).to_json()})


def test_a_python_object_target_skips_the_sharded_properties() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("sharded_gather_object", GOOD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    report = attnspec.verify(module, only="tp_equivalence,cp_equivalence", max_examples=2,
                             database=False)
    assert [p.verdict for p in report.properties] == ["skip", "skip"]
    assert "a Python object" in report.properties[0].message


# ---- ranks ----------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _listening(pids: list[int]) -> list[str]:
    """The local addresses (hex, as /proc/net/tcp* gives them) these processes listen on."""
    inodes = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                found.append(fields[1])
    return found



@pytest.mark.slow
@pytest.mark.process
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ranks_join_on_loopback_only_and_none_outlives_close() -> None:
    gang = Gang(str(GOOD), 2, timeout=30)
    gang.start()
    pids = gang.pids
    try:
        addresses = _listening([os.getpid(), *pids])
        assert addresses, "no listener found: the store and gloo must listen somewhere"
        loopback = ("0100007F:", "00000000000000000000FFFF0100007F:")  # 127.0.0.1, v4 in v6
        assert all(a.startswith(loopback) for a in addresses), addresses
        x = torch.randn(1, 4, 8, dtype=torch.float64)
        build = {"n_embd": 8, "n_head": 2, "seed": 1, "dtype": "float64", "device": "cpu",
                 "spec": AttentionSpec(8, 2).to_json(), "shard": "positions"}
        answers = gang.run([{"build": build, "steps": [{
            "op": "sharded_grad", "x": x[:, shard_positions_of(4, r, 2)],
            "cotangent": x[:, shard_positions_of(4, r, 2)]}]} for r in range(2)])
        assert [a["kind"] for a in answers] == ["ok", "ok"]
        assert answers[0]["results"][0]["out"].shape == (1, 2, 8)
    finally:
        gang.close()
    deadline = time.monotonic() + 5
    while any(map(_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(map(_alive, pids))


ROUNDING = HERE / "good" / "_sharded_rounding.py"
WRAPPED = HERE / "good" / "_sharded_wrapped.py"  # a wrapper, a DTensor output, None returned


@pytest.mark.slow
@pytest.mark.process
def test_the_reference_sharders_and_the_doubles_pass() -> None:
    # The double that rounds by batch position (as another CPU may) in float64, where the
    # allowance is tightest; the wrapped double; the built-ins. One run (one set of ranks) per
    # subject; the plain double is in the catalogue's good subjects.
    both = ("tp_equivalence", "cp_equivalence")
    for target, props, dtypes in ((ROUNDING, both, ["float64"]), (WRAPPED, both, None),
                                  ("attnspec.subjects.reference_tp", both[:1], None),
                                  ("attnspec.subjects.reference_ring", both[1:], None)):
        report = attnspec.verify(str(target), only=props, max_examples=3, seed=3,
                                 dtypes=dtypes, world_sizes=(2,), database=False,
                                 isolate=False)
        for prop in props:
            result = report.result(prop)
            assert result.verdict == "pass" and result.examples == 3, report.summary()
            assert result.drawn is not None and result.drawn["world"] == {"2": 3}


FAULTS = (("die", "crash", "rank 1 of 2 killed its process (exit code 3)"),
          ("hang", "timeout", "rank 1 of 2 gave no answer within timeout=2 s"),
          ("raise", "error", "rank 1 of 2: forward raised on input of shape (2, 4, 8)"),
          ("frame", "crash", "rank 1 of 2 sent something that is not an answer (a frame of "
                             "2147483648 bytes, over the"))


@pytest.mark.slow
@pytest.mark.process
def test_a_failing_rank_is_named_and_the_ranks_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    fault = tmp_path / "fault"
    pids = tmp_path / "pids"
    pids.mkdir()
    monkeypatch.setenv("ATTNSPEC_RANK_FAULT_FILE", str(fault))
    monkeypatch.setenv("ATTNSPEC_RANK_PIDS", str(pids))
    ex = Example(B=2, T=4, C=8, H=2, seed=5, spec=AttentionSpec(8, 2), world=2)
    # One example each (a replay: no shrinking, whose every try restarts the ranks), in one
    # run: rank 1 dies, hangs, raises, and each time is named; then the restarted ranks pass.
    with Session(str(FAULTY), RunOptions(world_sizes=(2,), timeout=2),
                 isolate=False) as session:  # the ranks are processes all the same
        for kind, verdict, says in FAULTS:
            fault.write_text(kind)
            tp = session.replay("tp_equivalence", ex)
            assert tp.verdict == verdict and says in tp.message, (kind, tp)
            assert not tp.message.startswith("rank 0"), tp.message  # never the peer's error
            if verdict != "error":
                assert tp.where == {"rank": 1}, (kind, tp.where)
        fault.write_text("")
        assert session.replay("tp_equivalence", ex).verdict == "pass"
        assert session.replay("cp_equivalence", ex).verdict == "pass"
    started = [int(p.name) for p in pids.iterdir()]
    assert len(started) >= 8 and not any(map(_alive, started)), started  # 4 starts x 2 ranks


@pytest.mark.slow
@pytest.mark.process
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ranks_die_with_a_killed_runner(tmp_path: Path) -> None:
    env = {**os.environ, "ATTNSPEC_RANK_FAULT": "hang", "ATTNSPEC_RANK_PIDS": str(tmp_path)}
    runner = subprocess.Popen(
        [sys.executable, "-m", "attnspec", "verify", str(FAULTY), "--only", "tp_equivalence",
         "--world-sizes", "2", "--timeout", "60", "--no-database"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        pids = [int(p.name) for p in tmp_path.iterdir()]
        assert len(pids) == 2 and all(map(_alive, pids))
        runner.send_signal(signal.SIGKILL)
        runner.wait(10)
        deadline = time.monotonic() + 5
        while any(map(_alive, pids)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(map(_alive, pids)), "a rank outlived its runner"
    finally:
        runner.kill()
        runner.wait()


def test_the_verdict_table_names_the_world_and_the_rank() -> None:
    from attnspec.common.report import _short

    ce = Example(B=1, T=8, C=8, H=2, spec=AttentionSpec(8, 2), world=2).to_json()
    assert _short(ce, {"b": 0, "t": 3, "c": 1, "rank": 1}).endswith(
        "float32 cpu world=2 rank 1")
    assert "world" not in _short(Example(B=1, T=8, C=8, H=2).to_json(), None)


ALIBI_RANK_0 = HERE / "broken" / "tp_alibi_slopes_of_rank_0.py"


@pytest.mark.slow
@pytest.mark.process
def test_tp_names_the_rank_whose_heads_are_wrong_not_the_first_all_reduced_one() -> None:
    # Every rank returns the same all-reduced output; only rank 1's head has the wrong slope.
    from attnspec import ALiBi

    ex = Example(B=1, T=4, C=8, H=2, seed=5, spec=AttentionSpec(8, 2, positions=ALiBi()),
                 world=2)
    with Session(str(ALIBI_RANK_0), RunOptions(world_sizes=(2,)), isolate=False) as session:
        tp = session.replay("tp_equivalence", ex)
    assert tp.verdict == "fail" and tp.message.startswith("The output on rank 1 of 2"), tp
    assert "100% of the error lies in query head 1, rank 1's." in tp.message, tp.message
    assert tp.where is not None and tp.where["rank"] == 1, tp.where


def test_an_all_reduced_error_is_pinned_on_no_rank_without_the_weights() -> None:
    from attnspec.properties.sharded import _blamed

    ex = Example(B=1, T=2, C=4, H=2, spec=AttentionSpec(4, 2), world=2)
    want = torch.zeros(1, 2, 4)
    off = torch.ones(1, 2, 4)
    rank, why = _blamed("out", 0, [off, off.clone()], want, None, ex, 1.0)
    assert rank == -1 and "cannot be told from it without export_weights" in why, why
    rank, why = _blamed("grad_x", 0, [off, off.clone()], want, None, ex, 1.0)
    assert rank == -1 and "cannot be told from d/dx" in why, why
    # Ranks that differ by as much as the error: the first one off is the one to name.
    assert _blamed("out", 1, [want, off], want, None, ex, 1.0) == (1, "")
