"""The worker lifecycle of one session: the subject's worker, its twin (the second process of
the self-comparisons, loaded in a thread beside the first passes), the ranks of sharded
examples, fresh workers for a failure's replay, and the subject's detached processes swept at
close."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch

from .._errors import TargetError
from ..common.protocol import Executor
from ..common.users import WorkerUser
from ..runner.isolation import become_subreaper, children, is_subreaper, stop_subreaper, sweep
from ..runner.spawn import Spawned, spawn
from ..runner.worker import InProcess, SubjectCrash, Worker

if TYPE_CHECKING:
    from ..runner.gang import Gang
    from ..runner.worker import SubjectInfo


class Workers:
    """The processes one session's subject runs in; `close` ends every one of them."""

    def __init__(self, target: Any, *, isolate: bool, timeout: float,
                 sizes: tuple[int, int, int], user: WorkerUser | None,
                 twin_ahead: bool) -> None:
        self.isolated = isolate
        self.timeout, self.sizes, self.user = timeout, sizes, user
        # Ranks and twins load TARGET by name: a Python object has none.
        self.rank_target = target if isinstance(target, str) else None
        # The subject's detached processes are re-parented here and killed at close; the
        # children this process had before are the caller's and are left alone.
        self._was_subreaper = is_subreaper()  # the CLI's runner is one already, for the run
        self.subreaper = become_subreaper()
        self._own_children = set(children())
        self.swept: int | None = None  # how many detached processes close() killed
        # The twin's process, started here or when it is first needed, for its Worker to adopt;
        # not for another user, whose workers are spawned as that user when they start.
        self._twin_spawned: Spawned | None = None
        if isolate and twin_ahead and user is None:
            self._twin_spawned = spawn()
        try:
            self.executor: Executor = (Worker(target, timeout=timeout, sizes=sizes, user=user)
                                       if isolate else InProcess(target, sizes))
        except BaseException:  # a TARGET that fails to load may have detached processes too
            self._sweep()
            raise
        # Ranks for sharded examples, per world size: started at the first such example, kept
        # for the run (a start costs seconds), always processes (they load TARGET by name).
        self._gangs: dict[int, Gang] = {}
        # A second worker for the self-comparisons (`Context.submit_apart`), so that no process
        # sees both sides of one: loaded in a thread from the first property that needs it.
        self.twin: Worker | None = None
        self.twin_loading: threading.Thread | None = None
        self._twin_error: str | None = None
        self.twin_wait = True  # False in verify's quick pass, which need not wait for it

    def start_twin(self) -> None:
        """Start loading the twin worker in a thread (a start is about 1.7 s of CPU, spent
        beside the quick pass), once."""
        if self.isolated and self.twin_loading is None:
            if self._twin_spawned is None and self.user is None:  # another user's: its Worker's
                self._twin_spawned = spawn()
            self.twin_loading = threading.Thread(target=self._load_twin, daemon=True,
                                                 name="attnspec-twin")
            self.twin_loading.start()

    def _load_twin(self) -> None:
        assert self.rank_target is not None
        try:
            self.twin = Worker(self.rank_target, timeout=self.timeout, sizes=self.sizes,
                               user=self.user, spawned=self._twin_spawned)
        except TargetError as error:  # it loaded once already: the subject's doing
            self._twin_error = (f"the second worker, which runs one side of each "
                                f"self-comparison, could not be started: {error}")

    def twin_worker(self) -> Executor | None:
        """The twin worker; in verify's quick pass None unless it is loaded already (the quick
        pass then compares in one process, as in process: a failure there is one all the same,
        and the full pass, which waits for the twin, catches what one process hides). The
        quick pass never starts it: a rejection there costs no second worker."""
        if not self.twin_wait and (self.twin_loading is None or self.twin_loading.is_alive()):
            return None
        self.start_twin()
        assert self.twin_loading is not None
        self.twin_loading.join()
        if self.twin is None:
            raise SubjectCrash("crash", self._twin_error or "the second worker did not start",
                               ran=False)
        return self.twin

    def twins(self) -> Callable[[], Executor | None] | None:
        """What a check calls for the second process (None in process: there is none)."""
        return self.twin_worker if self.isolated else None

    def gang(self, world: int) -> Gang:
        """The ranks for a sharded example over `world` processes, started once per run."""
        gang = self._gangs.get(world)
        if gang is None:
            from ..runner.gang import Gang

            assert self.rank_target is not None
            gang = self._gangs[world] = Gang(self.rank_target, world, timeout=self.timeout,
                                             sizes=self.sizes, user=self.user)
        return gang

    @contextlib.contextmanager
    def fresh(self, info: SubjectInfo) -> Iterator[Callable[[], Worker]]:
        """A factory of new workers for one replay, each told this run's `info` (the weights
        found by name); every one it started is closed at the end."""
        started: list[Worker] = []

        def start() -> Worker:
            worker = Worker(self.rank_target or "", timeout=self.timeout, sizes=self.sizes,
                            user=self.user)
            worker.info = info
            started.append(worker)
            return worker

        try:
            yield start
        finally:
            for worker in started:
                worker.close()

    @contextlib.contextmanager
    def judging(self) -> Iterator[None]:
        """One torch thread for the runner while it judges a worker's subject: its references
        are small, and a second thread only fights the worker for the cores (about 20% of a
        default verify on 2 cores). In process the subject's own threads are left alone."""
        threads = torch.get_num_threads()
        if not self.isolated or threads == 1:
            yield
            return
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(threads)

    def close(self) -> None:
        gangs, self._gangs = list(self._gangs.values()), {}
        for gang in gangs:
            gang.close()
        spawned, self._twin_spawned = self._twin_spawned, None
        if spawned is not None and (self.twin_loading is None or self.twin_loading.is_alive()):
            # Never needed, or a run that ends (-x, a failure) while it loads: no waiting.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(spawned[0].pid, signal.SIGKILL)
            spawned[0].wait()
            if self.twin_loading is None:
                spawned[1].close()
        if self.twin_loading is not None:
            self.twin_loading.join()
        twin, self.twin = self.twin, None
        if twin is not None:
            twin.close()
        self.executor.close()
        # What the subject detached from its group (setsid) was re-parented here: end it too.
        if self.swept is None:
            self._sweep()

    def _sweep(self) -> None:
        if self.subreaper:
            self.swept = sweep(self._own_children)
            if not self._was_subreaper:
                stop_subreaper()
