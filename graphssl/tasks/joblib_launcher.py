"""Hydra's joblib launcher, made to survive the death of a worker process.

hydra-joblib-launcher runs every job of a sweep through one ``joblib.Parallel`` call on loky's
shared executor. When one worker dies (SIGKILL, the OOM killer, a segfault) loky declares the
whole executor broken: it kills the other workers, cancels every job not yet started and
raises ``TerminatedWorkerError``, so one dead job costs the whole sweep.

:class:`ResilientJoblibLauncher` keeps the launcher's interface and config
(``hydra/launcher=joblib``, ``hydra.launcher.n_jobs``) but gives each of the ``n_jobs``
slots a loky executor of its own with one worker. A worker that dies breaks only its slot: that
job is reported failed (its MLflow child run, left ``RUNNING`` by the dead process, is marked
``KILLED`` by the sweep callback when the sweep ends), the slot starts a fresh worker and the
other jobs run to the end. Workers are reused across the jobs of a slot, as loky's are.
Only ``n_jobs`` is read from the joblib settings; the other ``joblib.Parallel`` options
(``backend``, ``batch_size``, ``pre_dispatch``, …) do not apply to one job per worker.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, setup_globals
from hydra_plugins.hydra_joblib_launcher._core import execute_job
from hydra_plugins.hydra_joblib_launcher.joblib_launcher import JoblibLauncher
from joblib.externals.loky import cpu_count
from joblib.externals.loky.process_executor import ProcessPoolExecutor

__all__ = ["ResilientJoblibLauncher", "WorkerDiedError"]

log = logging.getLogger(__name__)

#: thread-pool variables limited in each worker, as joblib's loky backend does
_THREAD_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


class WorkerDiedError(RuntimeError):
    """The worker process running a job ended without returning (killed or crashed)."""


def _n_jobs(value: Any, n_tasks: int) -> int:
    n = int(value) if value is not None else -1
    if n < 0:
        n = max(1, cpu_count() + 1 + n)  # joblib's convention: -1 is every core
    return max(1, min(n, n_tasks))


class ResilientJoblibLauncher(JoblibLauncher):
    """``hydra/launcher=joblib`` where a dead worker fails only its own job."""

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        setup_globals()
        assert self.config is not None
        assert self.task_function is not None
        assert self.hydra_context is not None
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        n_jobs = _n_jobs(self.joblib.get("n_jobs"), len(job_overrides))
        log.info(
            "joblib launcher: %d jobs on %d workers (one loky worker per slot), sweep output "
            "dir: %s",
            len(job_overrides),
            n_jobs,
            sweep_dir,
        )
        for idx, overrides in enumerate(job_overrides):
            log.info("\t#%d : %s", idx, " ".join(filter_overrides(overrides)))

        todo: queue.Queue[int] = queue.Queue()
        for i in range(len(job_overrides)):
            todo.put(i)
        results: list[JobReturn | None] = [None] * len(job_overrides)
        singleton_state = Singleton.get_state()
        env = {var: os.environ.get(var, str(max(1, cpu_count() // n_jobs))) for var in _THREAD_VARS}

        def slot() -> None:
            executor: ProcessPoolExecutor | None = None
            try:
                while True:
                    try:
                        i = todo.get_nowait()
                    except queue.Empty:
                        return
                    if executor is None:
                        executor = ProcessPoolExecutor(max_workers=1, env=env)
                    future = executor.submit(
                        execute_job,
                        initial_job_idx + i,
                        job_overrides[i],
                        self.hydra_context,
                        self.config,
                        self.task_function,
                        singleton_state,
                    )
                    try:
                        results[i] = future.result()
                    except Exception as err:
                        results[i] = self._failed(job_overrides[i], initial_job_idx + i, err)
                        if executor._flags.broken is not None:  # the worker is gone
                            executor.shutdown(wait=False, kill_workers=True)
                            executor = None
            finally:
                if executor is not None:
                    executor.shutdown(wait=True)

        threads = [threading.Thread(target=slot, daemon=True) for _ in range(n_jobs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        out = [r for r in results if r is not None]
        assert len(out) == len(job_overrides)
        return out

    def _failed(self, overrides: Sequence[str], idx: int, err: BaseException) -> JobReturn:
        assert self.config is not None
        text = " ".join(filter_overrides(overrides))
        if type(err).__name__ in ("TerminatedWorkerError", "BrokenProcessPool"):
            err = WorkerDiedError(
                f"job #{idx} ({text}): its worker process died without returning "
                f"({type(err).__name__}: {' '.join(str(err).split())[:300]}); the other jobs "
                f"keep running"
            )
            log.error("%s", err)
        ret = JobReturn()
        ret.overrides = list(overrides)
        ret.status = JobStatus.FAILED
        ret.return_value = err
        ret.task_name = str(self.config.hydra.job.name)
        ret.working_dir = str(Path(str(self.config.hydra.sweep.dir)) / str(idx))
        return ret
