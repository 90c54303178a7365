"""Tracking settings read from a composed config (shared by the tasks and the sweep hook)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from graphssl.tracking import mlflow_store


def tracking_settings(cfg: DictConfig) -> dict[str, Any]:
    """Tracking URI, experiment name and artifact location of ``cfg`` (absolute paths)."""
    return store_settings(cfg.logger, Path(str(cfg.paths.outputs_dir)))


def store_settings(logger: Mapping[str, Any], outputs_dir: str | Path) -> dict[str, Any]:
    """Tracking URI, experiment name and artifact location from the logger settings
    (``logger.tracking_uri``, ``experiment_name``, ``telemetry``) and the outputs folder."""
    outputs = Path(outputs_dir).absolute()
    uri = mlflow_store.resolve_tracking_uri(logger.get("tracking_uri"), outputs)
    mlflow_store.configure_telemetry(bool(logger.get("telemetry", False)))
    return {
        "tracking_uri": uri,
        "experiment_name": str(logger["experiment_name"]),
        "artifact_location": mlflow_store.default_artifact_location(uri, outputs),
    }
