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

import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

CONFIG_PATH = str(Path(__file__).resolve().parent.parent / "conf")

log = logging.getLogger("graphssl")

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


def _run_task(
    command: str,
    task: Callable[[DictConfig], Any],
    cfg: DictConfig,
    user_errors: tuple[type[BaseException], ...] = USER_ERRORS,
) -> Any:
    """Run ``task(cfg)``; a user error ends a single run with one paragraph on stderr."""
    multirun = HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
    try:
        return task(cfg)
    except user_errors as err:
        if multirun or os.environ.get("GRAPHSSL_TRACEBACK") == "1":
            if cfg.get("fail_fast", False):
                # SystemExit passes through Hydra's per-job handler and stops the sweep; the
                # sweep callback still closes the parent run with its failure counts.
                log.error("job failed and fail_fast=true; stopping the sweep: %s", err)
                raise SystemExit(1) from err
            raise  # Hydra records the failure and runs the remaining jobs
        print(f"{command}: error: {type(err).__name__}: {err}", file=sys.stderr)
        print(
            "(the MLflow run, if one was created, is marked FAILED; set GRAPHSSL_TRACEBACK=1 "
            "for the traceback)",
            file=sys.stderr,
        )
        raise SystemExit(1) from err
    except Exception as err:
        if multirun and cfg.get("fail_fast", False):
            log.error("job failed and fail_fast=true; stopping the sweep: %s", err)
            raise SystemExit(1) from err
        raise


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="train")
def main(cfg: DictConfig) -> float | None:
    """``graphssl``: train, evaluate and log one run (or one job of a multirun)."""
    from graphssl.tasks.train import train

    if cfg.get("rerun"):  # graphssl rerun=<run id>: the stored run's config, unchanged
        from graphssl.tasks.rerun import rerun

        metrics = _run_task("graphssl", rerun, cfg, (*USER_ERRORS, LookupError))
    else:
        metrics = _run_task("graphssl", train, cfg)
    value = metrics.get(str(cfg.get("optimized_metric")))
    return None if value is None else float(value)


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="evaluate")
def evaluate_main(cfg: DictConfig) -> None:
    """``graphssl-evaluate``: probe and diagnose stored runs again, without training."""
    from graphssl.tasks.evaluate import evaluate

    # LookupError: an unknown run or experiment id
    _run_task("graphssl-evaluate", evaluate, cfg, (*USER_ERRORS, LookupError))


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="compare")
def compare_main(cfg: DictConfig) -> None:
    """``graphssl-compare``: EMIR ranking of the embedders of several runs."""
    from graphssl.tasks.compare import run_compare

    run_compare(cfg)


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="report")
def report_main(cfg: DictConfig) -> None:
    """``graphssl-report``: which diagnostic predicts downstream accuracy, per group of runs."""
    from graphssl.tasks.report import run_report

    run_report(cfg)


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="stability")
def stability_main(cfg: DictConfig) -> None:
    """``graphssl-stability``: how many rows each diagnostic needs."""
    from graphssl.tasks.stability import run_stability

    run_stability(cfg)


if __name__ == "__main__":
    main()
