"""Hydra's joblib and submitit launchers, made to survive the death of one job's process.

**joblib.** hydra-joblib-launcher runs every job of a sweep through one ``joblib.Parallel``
call on loky's shared executor. When one worker dies (SIGKILL, the OOM killer, a segfault) loky
declares the whole executor broken: it kills the other workers, cancels every job not yet
started and raises ``TerminatedWorkerError``, so one dead job costs the whole sweep. Here each
of the ``n_jobs`` slots gets a loky executor of its own with one worker: a worker that dies
breaks only its slot, that job is reported failed, the slot starts a fresh worker and the other
jobs run to the end. Workers are reused across the jobs of a slot, as loky's are, and limit
their thread pools as joblib's loky backend does. Only ``n_jobs`` is read from the joblib
settings; the other ``joblib.Parallel`` options (``batch_size``, ``pre_dispatch``, …) do not
apply to one job per worker.

**submitit** (``submitit_local``, ``submitit_slurm``). hydra-submitit-launcher collects the
jobs' results in order and raises at the first job that ended without a result (killed,
cancelled with ``scancel``, past its time limit); the launching process then closes the sweep
while the other jobs still run, and the parent run counts them as failed. Here every job is
waited for and a dead one is reported as a failed job naming it.

**Stopping a joblib sweep.** Ctrl-C or SIGTERM to the launching process (a KeyboardInterrupt
there, see :mod:`graphssl.tracking.sweep`) starts no further job and ends every worker:
SIGTERM first, so a training job ends its run ``KILLED`` after its current epoch, SIGKILL for
whatever is left after a grace period. Each worker also asks the kernel for SIGTERM when the
launching process dies (``PR_SET_PDEATHSIG``) and exits once it is gone and no job runs, so a
launcher killed with SIGKILL leaves no worker behind.

**Stopping a submitit or Ray sweep.** Their jobs do not run in processes the launcher owns
(a SLURM job, a local job controller, a Ray worker), so stopping the launcher alone leaves them
running. The wrapped ``launch`` cancels every job it submitted that has not ended
(:func:`cancel_submitit_jobs`, :func:`cancel_ray_tasks`) before the stop reaches the sweep
callback, which then closes the parent with its children's counts.

Either way the sweep exits non-zero, and the sweep callback (:mod:`graphssl.tracking.sweep`)
marks the dead job's MLflow run — left ``RUNNING`` by its process — ``KILLED`` and records the
counts on the parent. Hydra only instantiates launchers from its ``hydra_plugins`` package, so
:func:`install` patches the plugins' ``launch`` methods instead of registering new launcher
classes; the sweep callback calls it when a multirun starts, in the launching process where
``launch`` runs (after Hydra has loaded its plugins, which re-executes their modules).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

from hydra.core.utils import JobReturn, JobStatus

from graphssl.processes import die_with_parent, end_processes, watch_parent

__all__ = ["WorkerDiedError", "install"]

log = logging.getLogger(__name__)

#: thread-pool variables limited in each joblib worker, as joblib's loky backend does
_THREAD_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
_PATCHED = "_graphssl_survives_dead_workers"
#: seconds a stopped sweep's workers get to end their runs after SIGTERM before SIGKILL
_STOP_GRACE_S = 20.0


class WorkerDiedError(RuntimeError):
    """The process running a job ended without returning (killed, cancelled or crashed)."""


def _failed(config: Any, overrides: Sequence[str], idx: int, err: BaseException) -> JobReturn:
    ret = JobReturn()
    ret.overrides = list(overrides)
    ret.status = JobStatus.FAILED
    ret.return_value = err
    ret.task_name = str(config.hydra.job.name)
    ret.working_dir = str(Path(str(config.hydra.sweep.dir)) / str(idx))
    return ret


def _oneline(err: BaseException, limit: int = 300) -> str:
    return f"{type(err).__name__}: {' '.join(str(err).split())[:limit]}"


# ---------------------------------------------------------------------------------- joblib
def _n_jobs(value: Any, n_tasks: int, cpus: int) -> int:
    n = int(value) if value is not None else -1
    if n < 0:
        n = max(1, cpus + 1 + n)  # joblib's convention: -1 is every core
    return max(1, min(n, n_tasks))


#: set in a joblib worker while it runs a job
_BUSY = threading.Event()


def _init_worker(parent_pid: int) -> None:
    """In each joblib worker: end with the launching process.

    The kernel sends SIGTERM when the launcher dies (a training job then ends its run
    ``KILLED`` after its epoch); an idle loky worker would then wait for work forever on a
    pipe that its sibling workers keep open, so a watchdog thread ends the worker as soon as
    the launcher is gone and no job is running.
    """
    die_with_parent(signal.SIGTERM, parent_pid)
    watch_parent(_exit_when_idle, parent_pid)


def _exit_when_idle() -> None:
    while _BUSY.is_set():
        time.sleep(0.2)
    os._exit(128 + signal.SIGTERM)


def _run_job(*args: Any) -> Any:
    """Hydra's ``execute_job`` in a worker, marked busy for the watchdog."""
    from hydra_plugins.hydra_joblib_launcher._core import execute_job

    _BUSY.set()
    try:
        return execute_job(*args)
    finally:
        _BUSY.clear()


def joblib_launch(
    launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
) -> Sequence[JobReturn]:
    """``JoblibLauncher.launch`` with one loky worker per slot (see the module docstring)."""
    from hydra.core.singleton import Singleton
    from hydra.core.utils import configure_log, filter_overrides, setup_globals
    from joblib.externals.loky import cpu_count
    from joblib.externals.loky.process_executor import ProcessPoolExecutor

    setup_globals()
    config = launcher.config
    assert config is not None and launcher.hydra_context is not None
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    sweep_dir = Path(str(config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    n_jobs = _n_jobs(launcher.joblib.get("n_jobs"), len(job_overrides), cpu_count())
    log.info(
        "joblib launcher (n_jobs=%d): %d jobs, one loky worker per slot, sweep output dir: %s",
        n_jobs,
        len(job_overrides),
        sweep_dir,
    )
    for idx, overrides in enumerate(job_overrides):
        log.info("\t#%d : %s", initial_job_idx + idx, " ".join(filter_overrides(overrides)))

    todo: queue.Queue[int] = queue.Queue()
    for i in range(len(job_overrides)):
        todo.put(i)
    results: list[JobReturn | None] = [None] * len(job_overrides)
    singleton_state = Singleton.get_state()
    env = {v: os.environ.get(v, str(max(1, cpu_count() // n_jobs))) for v in _THREAD_VARS}

    stopping = threading.Event()
    executors: list[Any] = []
    parent_pid = os.getpid()

    def slot() -> None:
        executor: Any = None
        try:
            while not stopping.is_set():
                try:
                    i = todo.get_nowait()
                except queue.Empty:
                    return
                idx = initial_job_idx + i
                if executor is None:
                    executor = ProcessPoolExecutor(
                        max_workers=1, env=env, initializer=_init_worker, initargs=(parent_pid,)
                    )
                    executors.append(executor)
                future = executor.submit(
                    _run_job,
                    idx,
                    job_overrides[i],
                    launcher.hydra_context,
                    config,
                    launcher.task_function,
                    singleton_state,
                )
                try:
                    results[i] = future.result()
                except BaseException as err:  # a job ended by SIGTERM returns KeyboardInterrupt
                    if stopping.is_set():
                        return
                    if executor._flags.broken is not None:  # the worker is gone
                        err = WorkerDiedError(
                            f"job #{idx} ({' '.join(filter_overrides(job_overrides[i]))}): its "
                            f"worker process died without returning ({_oneline(err)}); the "
                            f"other jobs keep running"
                        )
                        log.error("%s", err)
                        executor.shutdown(wait=False, kill_workers=True)
                        executor = None
                    results[i] = _failed(config, job_overrides[i], idx, err)
        finally:
            if executor is not None:
                executor.shutdown(wait=True)

    threads = [threading.Thread(target=slot, daemon=True) for _ in range(n_jobs)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    except BaseException:
        # Ctrl-C or SIGTERM (a KeyboardInterrupt, see graphssl.tracking.sweep): start no other
        # job and end the workers — SIGTERM first, so a training job ends its run KILLED; a
        # worker still there after the grace period is killed and its run marked KILLED by
        # the sweep parent's closing
        stopping.set()
        never = 0
        while True:
            try:
                todo.get_nowait()
            except queue.Empty:
                break
            never += 1
        _report_stop({"jobs_not_started": str(never)})
        workers = [p for ex in list(executors) for p in (ex._processes or {}).values()]
        end_processes(workers, grace=_STOP_GRACE_S)
        for t in threads:
            t.join(timeout=_STOP_GRACE_S)
        raise
    done = [r for r in results if r is not None]
    assert len(done) == len(job_overrides), "every job must have a result"
    return done


# --------------------------------------------------------------------------------- submitit
class _WaitedJob:
    """A submitted job whose ``results()`` reports a dead job as a failed :class:`JobReturn`."""

    def __init__(self, job: Any, overrides: Sequence[str], idx: int, config: Any) -> None:
        self.job, self.overrides, self.idx, self.config = job, list(overrides), idx, config

    def results(self) -> list[JobReturn]:
        try:
            return list(self.job.results())
        except Exception as err:
            error = WorkerDiedError(
                f"job #{self.idx} (submitit job {self.job.job_id}: "
                f"{' '.join(o for o in self.overrides if not o.startswith('hydra.'))}) ended "
                f"without a result ({_oneline(err, 2000)}); the other jobs ran on"
            )
            log.error("%s", error)
            return [_failed(self.config, self.overrides, self.idx, error)]


def cancel_submitit_jobs(jobs: Sequence[Any], grace: float = _STOP_GRACE_S) -> None:
    """Cancel the submitit ``jobs`` that have not ended (the launching process is stopping).

    A local job (``submitit_local``) is a controller process with the job's process below it:
    the controller gets SIGTERM, which it forwards to the job as SLURM's ``scancel`` does (a
    training job ends its run ``KILLED`` after its epoch), and whatever is left of the tree
    after ``grace`` seconds is killed. submitit's own ``LocalJob.cancel`` sends SIGINT instead,
    on which the controller prints a KeyboardInterrupt traceback on the launcher's terminal
    and kills the job 1 s later. Any other job (``submitit_slurm``) is cancelled with
    ``job.cancel`` (``scancel``).
    """
    from graphssl.processes import end_process_trees

    controllers = []
    for job in jobs:
        try:
            if job.done():
                continue
            process = getattr(job, "_process", None)  # submitit.local.local.LocalJob's
            if process is not None:
                controllers.append(process)
            else:
                job.cancel(check=False)
        except Exception as err:  # cancel the others all the same
            log.warning("could not cancel submitit job %s: %s", job.job_id, _oneline(err))
    if controllers:
        end_process_trees([p.pid for p in controllers], grace=grace)
        for process in controllers:
            with contextlib.suppress(Exception):
                process.wait(timeout=1.0)  # reaped: its pid reads as gone afterwards


def waiting_launch(original: Callable[..., Sequence[JobReturn]]) -> Callable[..., Any]:
    """Wrap a submitit launcher's ``launch`` so that it waits for every job, and cancels the
    jobs it submitted when it is stopped (Ctrl-C, or SIGTERM turned into a KeyboardInterrupt
    by the sweep callback) or fails: the sweep's parent run is closed after them."""

    def launch(
        launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        import submitit

        map_array = submitit.AutoExecutor.map_array
        submitted: list[Any] = []

        def waited(executor: Any, fn: Any, *iterables: Any) -> list[Any]:
            jobs = map_array(executor, fn, *iterables)
            submitted.extend(jobs)
            overrides, idxs = iterables[0], iterables[2]
            return [_WaitedJob(j, o, i, launcher.config) for j, o, i in zip(jobs, overrides, idxs)]

        try:
            with mock.patch.object(submitit.AutoExecutor, "map_array", waited):
                return original(launcher, job_overrides, initial_job_idx)
        except BaseException:
            _stopping(lambda: cancel_submitit_jobs(submitted))
            raise

    return launch


def _stopping(cancel: Callable[[], None]) -> None:
    """Run ``cancel`` with SIGINT and SIGTERM ignored (main thread): a second Ctrl-C while the
    jobs are being cancelled would leave some running."""
    held: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        held = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        cancel()
    finally:
        for s, handler in held.items():
            signal.signal(s, handler)


# ------------------------------------------------------------------------------------- Ray
def cancel_ray_tasks(refs: Sequence[Any], grace: float = _STOP_GRACE_S) -> None:
    """Cancel the Ray tasks of ``refs`` that have not ended: ``ray.cancel`` first (a
    KeyboardInterrupt in the task, so a training job ends its run ``KILLED``), then, after
    ``grace`` seconds, ``ray.cancel(force=True)`` (its worker is killed; the run it left
    ``RUNNING`` is marked ``KILLED`` when the sweep's parent is closed, if on this host)."""
    import ray

    pending = [r for r in refs if not ray.wait([r], timeout=0)[0]]
    for ref in pending:
        with contextlib.suppress(Exception):
            ray.cancel(ref)
    if not pending:
        return
    _, left = ray.wait(pending, num_returns=len(pending), timeout=grace)
    for ref in left:
        with contextlib.suppress(Exception):
            ray.cancel(ref, force=True)
    if left:
        ray.wait(left, num_returns=len(left), timeout=30.0)


def ray_launch(original: Callable[..., Sequence[JobReturn]]) -> Callable[..., Any]:
    """Wrap ``RayLauncher.launch`` so that it cancels the tasks it submitted when it is stopped
    or fails (hydra-ray-launcher waits on them one by one and leaves them running)."""

    def launch(
        launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        from hydra_plugins.hydra_ray_launcher import _core

        submit = _core.launch_job_on_ray
        refs: list[Any] = []

        def submitted(*args: Any, **kwargs: Any) -> Any:
            ref = submit(*args, **kwargs)
            refs.append(ref)
            return ref

        try:
            with mock.patch.object(_core, "launch_job_on_ray", submitted):
                return original(launcher, job_overrides, initial_job_idx)
        except BaseException:
            _stopping(lambda: cancel_ray_tasks(refs))
            raise

    return launch


def _ignore(tags: dict[str, str]) -> None:
    return None


#: where a stopped joblib launch reports what it left undone, as tags for the sweep's parent run
#: (:func:`install`'s ``report_stop``)
_report_stop: Callable[[dict[str, str]], None] = _ignore


def install(report_stop: Callable[[dict[str, str]], None] | None = None) -> None:
    """Patch the installed joblib and submitit launcher plugins (idempotent; a plugin that is
    not installed is skipped).

    Args:
        report_stop: called with tags for the sweep's parent run when Ctrl-C or SIGTERM stops
            a joblib launch (``{"jobs_not_started": "<count>"}``); the sweep callback passes
            its own. ``None`` keeps the one given before.
    """
    global _report_stop
    if report_stop is not None:
        _report_stop = report_stop
    try:
        from hydra_plugins.hydra_joblib_launcher.joblib_launcher import JoblibLauncher
    except ImportError:
        pass
    else:
        if not getattr(JoblibLauncher, _PATCHED, False):
            log.debug("joblib launcher: one loky worker per slot")
            JoblibLauncher.launch = joblib_launch  # type: ignore[method-assign,assignment]
            setattr(JoblibLauncher, _PATCHED, True)
    try:
        from hydra_plugins.hydra_submitit_launcher.submitit_launcher import (
            BaseSubmititLauncher,
        )
    except ImportError:
        pass
    else:
        if not getattr(BaseSubmititLauncher, _PATCHED, False):
            BaseSubmititLauncher.launch = waiting_launch(  # type: ignore[method-assign]
                BaseSubmititLauncher.launch
            )
            setattr(BaseSubmititLauncher, _PATCHED, True)
    try:
        from hydra_plugins.hydra_ray_launcher.ray_launcher import RayLauncher
    except ImportError:
        return
    if not getattr(RayLauncher, _PATCHED, False):
        RayLauncher.launch = ray_launch(RayLauncher.launch)  # type: ignore[method-assign]
        setattr(RayLauncher, _PATCHED, True)
