"""Hydra's submitit launchers (``submitit_local``, ``submitit_slurm``), made to wait for every
job even when one dies.

hydra-submitit-launcher collects the jobs' results in order and raises at the first job that
ended without a result (killed, cancelled with ``scancel``, past its time limit): the launching
process then closes the sweep while the other jobs still run, so the sweep's parent run counts
them as failed. These subclasses wait for every job and report each dead one as a failed job
(the error names it and its state), so the sweep callback closes the parent once all jobs have
ended, with the right counts; it marks the dead job's run, left ``RUNNING``, ``KILLED``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from unittest import mock

from hydra.core.utils import JobReturn, JobStatus
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import LocalLauncher, SlurmLauncher

__all__ = ["ResilientLocalLauncher", "ResilientSlurmLauncher"]

log = logging.getLogger(__name__)


class _WaitedJob:
    """A submitted job whose ``results()`` reports a dead job as a failed :class:`JobReturn`."""

    def __init__(self, job: Any, overrides: Sequence[str], idx: int, launcher: Any) -> None:
        self.job, self.overrides, self.idx, self.launcher = job, list(overrides), idx, launcher

    def results(self) -> list[JobReturn]:
        try:
            return list(self.job.results())
        except Exception as err:
            text = " ".join(str(err).split())
            error = RuntimeError(
                f"job #{self.idx} (submitit job {self.job.job_id}, overrides "
                f"{' '.join(self.overrides)}) ended without a result ({type(err).__name__}: "
                f"{text[:400]}); the other jobs ran on"
            )
            log.error("%s", error)
            ret = JobReturn()
            ret.overrides = self.overrides
            ret.status = JobStatus.FAILED
            ret.return_value = error
            cfg = self.launcher.config
            ret.task_name = str(cfg.hydra.job.name)
            ret.working_dir = str(Path(str(cfg.hydra.sweep.dir)) / str(self.idx))
            return [ret]


class _Waiting:
    """Mixin: wrap the jobs ``map_array`` returns in :class:`_WaitedJob`."""

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        import submitit

        original = submitit.AutoExecutor.map_array
        launcher = self

        def map_array(executor: Any, fn: Any, *iterables: Any) -> list[Any]:
            jobs = original(executor, fn, *iterables)
            overrides, idxs = iterables[0], iterables[2]
            return [_WaitedJob(j, o, i, launcher) for j, o, i in zip(jobs, overrides, idxs)]

        with mock.patch.object(submitit.AutoExecutor, "map_array", map_array):
            return super().launch(job_overrides, initial_job_idx)  # type: ignore[misc,no-any-return]


class ResilientLocalLauncher(_Waiting, LocalLauncher):
    """``hydra/launcher=submitit_local`` that waits for every job."""


class ResilientSlurmLauncher(_Waiting, SlurmLauncher):
    """``hydra/launcher=submitit_slurm`` that waits for every job."""
