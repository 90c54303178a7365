"""Command-line entry points: one thin ``@hydra.main`` per task, all on the ``conf/`` tree.

=====================  ======================  ===========================================
command                config                  task
=====================  ======================  ===========================================
``graphssl``           ``conf/train.yaml``     :func:`graphssl.tasks.train.train`
``graphssl-evaluate``  ``conf/evaluate.yaml``  :func:`graphssl.tasks.evaluate.evaluate`
``graphssl-compare``   ``conf/compare.yaml``   :func:`graphssl.tasks.compare.run_compare`
``graphssl-report``    ``conf/report.yaml``    :func:`graphssl.tasks.report.run_report`
``graphssl-stability`` ``conf/stability.yaml`` :func:`graphssl.tasks.stability.run_stability`
=====================  ======================  ===========================================
"""

from __future__ import annotations

import errno
import logging
import os
import re
import signal
import sys
from collections.abc import Callable
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

import graphssl._startup  # noqa: F401  (OpenMP's wait policy, before anything loads torch)
from graphssl.package import config_dir
from graphssl.tasks._console import console_entry, quiet_libraries
from graphssl.tasks.memory import MemoryExhaustedError, memory_exhausted
from graphssl.tasks.validate import install_config_file_checks

CONFIG_PATH = str(config_dir())

log = logging.getLogger("graphssl")

# config files that are not UTF-8 or not a mapping are refused naming the file
install_config_file_checks()

#: errors caused by the user's input or environment: reported as one paragraph, no traceback
USER_ERRORS = (
    ValueError,
    TypeError,
    KeyError,
    FileNotFoundError,
    PermissionError,
    NotADirectoryError,
    ConnectionError,
    ImportError,
)


#: the commands that read stored runs also refuse an unknown run, parent or experiment id
LOOKUP_ERRORS = (*USER_ERRORS, LookupError)


def _built_by_hydra(err: BaseException) -> tuple[BaseException, str]:
    """The error a config's ``_target_`` raised, and where, when Hydra's instantiate wrapped it
    (``InstantiationException``, whose message spans lines); else ``(err, "")``."""
    from hydra.errors import InstantiationException

    cause = err.__cause__
    if not isinstance(err, InstantiationException) or cause is None:
        return err, ""
    text = str(err)
    target = re.search(r"target '([^']+)'", text)
    key = re.search(r"full_key: (\S+)", text)
    parts = [f"config key {key.group(1)}" if key else "", target.group(1) if target else ""]
    return cause, " (while building " + ", ".join(p for p in parts if p) + ")"


def _is_user_error(err: BaseException, user_errors: tuple[type[BaseException], ...]) -> bool:
    """A user error, a full disk, or a checkpoint/journal/store failure that says what was
    kept: all reported in one paragraph."""
    if isinstance(err, user_errors):
        return True
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return type(err).__name__ in ("CheckpointWriteError", "JournalWriteError")


def _run_task(
    command: str,
    task: Callable[[DictConfig], Any],
    cfg: DictConfig,
    user_errors: tuple[type[BaseException], ...] = USER_ERRORS,
) -> Any:
    """Run ``task(cfg)``; a user error ends a single run with one paragraph on stderr."""
    multirun = HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
    quiet_libraries()  # again: a multirun job may run in a fresh worker process
    try:
        return task(cfg)
    except KeyboardInterrupt as err:
        if multirun or type(err).__name__ != "TrainingInterrupted":
            raise
        # SIGTERM: the run, when one was created, is already marked KILLED (and the epoch
        # checkpointed if configured)
        runs = getattr(err, "graphssl_killed_runs", None) or []
        where = f"MLflow run {', '.join(runs)} marked KILLED" if runs else "no run was started"
        print(f"{command}: stopped: {err}; {where}", file=sys.stderr)
        raise SystemExit(128 + signal.SIGTERM) from err
    except Exception as err:
        paragraph = memory_exhausted(err)
        if paragraph is not None and os.environ.get("GRAPHSSL_TRACEBACK") != "1":
            if multirun:  # the job fails with the paragraph as its error; the sweep goes on
                if cfg.get("fail_fast", False):
                    log.error("job failed and fail_fast=true; stopping the sweep: %s", paragraph)
                    raise SystemExit(1) from err
                raise MemoryExhaustedError(paragraph) from err
            print(f"{command}: {paragraph}", file=sys.stderr)
            print(
                "(the MLflow run, if one was created, is marked FAILED; set GRAPHSSL_TRACEBACK=1 "
                "for the traceback)",
                file=sys.stderr,
            )
            raise SystemExit(1) from err
        cause, where = _built_by_hydra(err)
        if not _is_user_error(cause, user_errors):
            if multirun and cfg.get("fail_fast", False):
                log.error("job failed and fail_fast=true; stopping the sweep: %s", err)
                raise SystemExit(1) from err
            raise
        if multirun or os.environ.get("GRAPHSSL_TRACEBACK") == "1":
            if cfg.get("fail_fast", False):
                # SystemExit passes through Hydra's per-job handler and stops the sweep; the
                # sweep callback still closes the parent run with its failure counts.
                log.error("job failed and fail_fast=true; stopping the sweep: %s", err)
                raise SystemExit(1) from err
            raise  # Hydra records the failure and runs the remaining jobs
        print(f"{command}: error: {type(cause).__name__}: {cause}{where}", file=sys.stderr)
        print(
            "(the MLflow run, if one was created, is marked FAILED; set GRAPHSSL_TRACEBACK=1 "
            "for the traceback)",
            file=sys.stderr,
        )
        raise SystemExit(1) from err


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="train")
def _train_main(cfg: DictConfig) -> float | None:
    """``graphssl``: train, evaluate and log one run (or one job of a multirun)."""
    from graphssl.tasks.train import train

    if cfg.get("rerun"):  # graphssl rerun=<run id>: the stored run's config, unchanged
        from graphssl.tasks.rerun import rerun

        metrics = _run_task("graphssl", rerun, cfg, LOOKUP_ERRORS)
    else:
        metrics = _run_task("graphssl", train, cfg)
    value = metrics.get(str(cfg.get("optimized_metric")))
    return None if value is None else float(value)


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="evaluate")
def _evaluate_main(cfg: DictConfig) -> None:
    """``graphssl-evaluate``: probe and diagnose stored runs again, without training."""
    from graphssl.tasks.evaluate import evaluate

    _run_task("graphssl-evaluate", evaluate, cfg, LOOKUP_ERRORS)


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="compare")
def _compare_main(cfg: DictConfig) -> None:
    """``graphssl-compare``: EMIR ranking of the embedders of several runs."""
    from graphssl.tasks.compare import run_compare

    quiet_libraries()
    _run_task("graphssl-compare", run_compare, cfg, LOOKUP_ERRORS)


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="report")
def _report_main(cfg: DictConfig) -> None:
    """``graphssl-report``: which diagnostic predicts downstream accuracy, per group of runs."""
    from graphssl.tasks.report import run_report

    quiet_libraries()
    _run_task("graphssl-report", run_report, cfg, LOOKUP_ERRORS)


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="stability")
def _stability_main(cfg: DictConfig) -> None:
    """``graphssl-stability``: how many rows each diagnostic needs."""
    from graphssl.tasks.stability import run_stability

    quiet_libraries()
    _run_task("graphssl-stability", run_stability, cfg, LOOKUP_ERRORS)


# the console scripts: --version, quiet libraries and one line on Ctrl-C around each task
main = console_entry("graphssl", _train_main)
evaluate_main = console_entry("graphssl-evaluate", _evaluate_main)
compare_main = console_entry("graphssl-compare", _compare_main)
report_main = console_entry("graphssl-report", _report_main)
stability_main = console_entry("graphssl-stability", _stability_main)

if __name__ == "__main__":
    main()
