"""Command-line entry points (thin wrappers around importable functions)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

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


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="config")
def main(cfg: DictConfig) -> float | None:
    """``graphssl``: train, evaluate and log one run (or one job of a multirun)."""
    from graphssl.pipeline import run

    multirun = HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
    try:
        metrics = run(cfg)
    except USER_ERRORS as err:
        if multirun or os.environ.get("GRAPHSSL_TRACEBACK") == "1":
            if cfg.get("fail_fast", False):
                # SystemExit passes through Hydra's per-job handler and stops the sweep; the
                # sweep callback still closes the parent run with its failure counts.
                log.error("job failed and fail_fast=true; stopping the sweep: %s", err)
                raise SystemExit(1) from err
            raise  # Hydra records the failure and runs the remaining jobs
        print(f"graphssl: error: {type(err).__name__}: {err}", file=sys.stderr)
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
    value = metrics.get(str(cfg.get("optimized_metric")))
    return None if value is None else float(value)


if __name__ == "__main__":
    main()
