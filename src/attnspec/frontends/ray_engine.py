"""`--engine ray`: one Ray task per target, on a cluster's nodes.

A task runs the same judge as the local engine, exec'd (`python -m attnspec.frontends.many`)
on its node: the runner and its worker processes live there, the subject never in the Ray
worker process itself. What comes back is text, the judge's JSON report, parsed by the driver
with json.loads; nothing the subject made is unpickled here. Ray reruns a task whose node or
worker died (once: `max_retries=1`); the driver writes a target's line once, when its task
ends, so the JSONL holds each target exactly once whatever was lost on the way. A target
whose task dies on both tries is reported so, with what its last try finished.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Generator, Mapping, Sequence
from typing import Any

from .._errors import UsageError
from .many import ATTEMPTS, Target, judge_request, line_of

__all__ = ["judge_on_ray", "run_judge"]

INSTALL = "pip install 'attnspec[ray]'"


_server: subprocess.Popen[str] | None = None  # this Ray worker's judge server, kept


def _ask(request: Mapping[str, Any]) -> dict[str, Any]:
    """A judge's answer from this Ray worker's judge server (started on first use: a Ray
    worker runs threads and may not fork, the server may; later tasks reuse it)."""
    global _server
    if _server is None or _server.poll() is not None:
        _server = subprocess.Popen(
            [sys.executable, "-m", "attnspec.frontends.many", "--serve"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert _server.stdin is not None and _server.stdout is not None
    try:
        _server.stdin.write(json.dumps(request) + "\n")
        _server.stdin.flush()
        answer = _server.stdout.readline()
    except OSError:
        answer = ""
    if not answer:
        code = _server.wait()
        _server = None
        return {"code": None, "report": None,
                "problem": f"the node's judge server ended (exit status {code})"}
    loaded = json.loads(answer)
    return loaded if isinstance(loaded, dict) else {"problem": "the judge server answered "
                                                               "something else"}


def run_judge(request: Mapping[str, Any], sha256: str | None) -> str:
    """On the node: one judge, forked by the node's judge server; its report, its exit status,
    and where it ran, as one JSON text."""
    from .many import _key_of

    started = time.time()
    node = socket.gethostname()
    with contextlib.suppress(Exception):  # the Ray node's id: two nodes may share a host
        import ray

        node = f"{node} {ray.get_runtime_context().get_node_id()[:12]}"
    seen = _key_of(str(request["target"])).sha256
    if sha256 is not None and seen != sha256:  # another file than the driver hashed
        return json.dumps({"code": None, "report": None, "node": node, "started": started,
                           "problem": f"on node {node} the target's file has sha256 "
                                      f"{seen[:12]}, not the driver's {sha256[:12]}: the "
                                      "nodes must see the same files (a shared folder)"})
    return json.dumps({**_ask(request), "node": node, "started": started})


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UsageError(option="engine", value="ray",
                         reason=f"Ray is not installed here: {INSTALL}.") from None
    return ray


def judge_on_ray(targets: Sequence[Target], options: Mapping[str, Any], digest: str, *,
                 jobs: int, address: str | None, workers: int | None
                 ) -> Generator[dict[str, Any], None, None]:
    """Each target's line as its Ray task ends (the cluster at `address`, or a local one of
    `jobs` CPUs)."""
    ray = _ray()
    started_here = not ray.is_initialized()
    if started_here:
        init: dict[str, Any] = {"log_to_driver": False, "include_dashboard": False,
                                "configure_logging": False}
        try:
            if address is None:
                ray.init(num_cpus=jobs, **init)
            else:
                ray.init(address=address, **init)
        except (ConnectionError, RuntimeError, ValueError) as error:
            raise UsageError(option="ray_address", value=address or "local",
                             reason=f"no Ray cluster could be reached or started ({error})."
                             ) from None
    remote = ray.remote(num_cpus=1, max_retries=ATTEMPTS - 1)(run_judge)
    pending: dict[Any, tuple[Target, float]] = {}
    try:
        for target in targets:
            request = judge_request(target, options, "", workers)
            ref = remote.remote(request, target.sha256 if target.hash_of == "file" else None)
            pending[ref] = (target, time.time())
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                target, submitted = pending.pop(ref)
                yield _line(ray, ref, target, digest, submitted)
    finally:
        for ref in pending:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        if started_here:
            with contextlib.suppress(Exception):
                ray.shutdown()


def _line(ray: Any, ref: Any, target: Target, digest: str, submitted: float
          ) -> dict[str, Any]:
    try:
        answer = json.loads(ray.get(ref))
    except ray.exceptions.RayError as error:  # lost on each try: its node or worker died
        first = str(error).strip().splitlines()[0][:300] if str(error).strip() else ""
        return line_of(target, digest, None,
                       f"its Ray task was lost on each of {ATTEMPTS} tries "
                       f"({type(error).__name__}: {first})",
                       time.time() - submitted, submitted, ATTEMPTS)
    started = float(answer.get("started") or submitted)
    data = answer.get("report") if isinstance(answer.get("report"), dict) else None
    problem = answer.get("problem")
    return line_of(target, digest, data, None if problem is None else str(problem),
                   time.time() - started, started, None, {"node": answer.get("node")})
