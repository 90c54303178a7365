"""Tracking settings read from a composed config (shared by the tasks and the sweep hook)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from graphssl.tracking import mlflow_store


def tracking_settings(cfg: DictConfig) -> dict[str, Any]:
    """Tracking URI, experiment name and artifact location of ``cfg`` (absolute paths)."""
    outputs = Path(str(cfg.paths.outputs_dir)).absolute()
    uri = mlflow_store.resolve_tracking_uri(cfg.logger.get("tracking_uri"), outputs)
    mlflow_store.configure_telemetry(bool(cfg.logger.get("telemetry", False)))
    return {
        "tracking_uri": uri,
        "experiment_name": str(cfg.logger.experiment_name),
        "artifact_location": mlflow_store.default_artifact_location(uri, outputs),
    }
