"""The MLflow store: where it is, creating it once, and writing runs through one client.

Only :mod:`graphssl.tracking` imports MLflow (design.md §2). The default store is
``sqlite:///<absolute outputs dir>/mlflow.db`` with artifacts in ``<outputs dir>/mlartifacts``;
``MLFLOW_TRACKING_URI`` overrides it. Telemetry stays off unless the user turns it on.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

log = logging.getLogger(__name__)

#: keys whose values are never logged in clear (issue: security).
SECRET_KEY = re.compile(r"(password|passwd|token|secret|api[_-]?key|(^|[._/])key$)", re.I)
MAX_PARAM_CHARS = 6000


def configure_telemetry(enabled: bool = False) -> None:
    """Turn MLflow's telemetry off (default) before MLflow is imported."""
    if not enabled:
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        os.environ.setdefault("DO_NOT_TRACK", "true")


def resolve_tracking_uri(tracking_uri: str | None, outputs_dir: str | os.PathLike[str]) -> str:
    """``tracking_uri`` if given, else ``$MLFLOW_TRACKING_URI``, else the SQLite default."""
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    root = Path(outputs_dir).absolute()
    return f"sqlite:///{root / 'mlflow.db'}"


def default_artifact_location(tracking_uri: str, outputs_dir: str | os.PathLike[str]) -> str | None:
    """Artifacts beside a local SQLite store; ``None`` (server default) for remote stores."""
    if tracking_uri.startswith("sqlite:///"):
        return (Path(outputs_dir).absolute() / "mlartifacts").as_uri()
    return None


def client(tracking_uri: str) -> MlflowClient:
    """An ``MlflowClient`` on ``tracking_uri``.

    For a local SQLite store, checks its folder is writable and creates/migrates the schema
    under a file lock, so several processes starting at once on a fresh store do not race
    (design.md §6). For a server, a dead address fails in seconds instead of retrying for
    minutes (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``/``_TIMEOUT`` are only defaulted, not forced).
    """
    configure_telemetry(os.environ.get("GRAPHSSL_MLFLOW_TELEMETRY", "") == "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
    if tracking_uri.startswith("sqlite:///"):
        folder = Path(tracking_uri[len("sqlite:///") :]).parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise PermissionError(
                f"cannot create the MLflow store folder {folder} ({err.strerror}); expected a "
                f"writable outputs folder — set GRAPHSSL_OUTPUTS or logger.tracking_uri"
            ) from err
        if not os.access(folder, os.W_OK):
            raise PermissionError(
                f"the MLflow store folder {folder} is not writable; expected a writable "
                f"outputs folder — set GRAPHSSL_OUTPUTS or logger.tracking_uri"
            )
    from mlflow.tracking import MlflowClient

    if tracking_uri.startswith("sqlite:///"):
        from filelock import FileLock

        db = Path(tracking_uri[len("sqlite:///") :])
        with FileLock(str(db) + ".lock", timeout=300):
            c = MlflowClient(tracking_uri=tracking_uri)
            c.search_experiments(max_results=1)  # creates or migrates the schema, once
        return c
    return MlflowClient(tracking_uri=tracking_uri)


def ensure_experiment(
    mlflow_client: MlflowClient,
    name: str,
    artifact_location: str | None = None,
    retries: int = 5,
) -> str:
    """Return the id of experiment ``name``, creating it (and the store) if needed.

    Creating a fresh SQLite store migrates its schema (7–9 s); concurrent first uses race, so a
    failed creation is retried after a short wait (design.md §6).
    """
    last: Exception | None = None
    for attempt in range(retries):
        try:
            exp = mlflow_client.get_experiment_by_name(name)
            if exp is not None:
                if exp.lifecycle_stage == "deleted":
                    mlflow_client.restore_experiment(exp.experiment_id)
                return str(exp.experiment_id)
            return str(mlflow_client.create_experiment(name, artifact_location=artifact_location))
        except Exception as err:
            if _is_unreachable(err):
                raise ConnectionError(
                    f"MLflow tracking server at {mlflow_client.tracking_uri} is unreachable "
                    f"({type(err).__name__}); expected a running server — start it (graphssl-ui) "
                    f"or unset MLFLOW_TRACKING_URI to use the local SQLite store"
                ) from err
            last = err
            time.sleep(0.5 * (attempt + 1))
    raise RuntimeError(f"could not create MLflow experiment {name!r}: {last}") from last


def _is_unreachable(err: Exception) -> bool:
    text = f"{type(err).__name__}: {err}"
    return any(
        s in text
        for s in (
            "Connection refused",
            "Max retries exceeded",
            "Failed to establish",
            "ConnectionError",
        )
    )


def flatten(cfg: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Flatten a nested mapping into ``{"a.b.c": value}``; lists become their string form."""
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, Mapping):
            out.update(flatten(v, key))
        else:
            out[key] = v
    return out


def safe_params(params: Mapping[str, Any]) -> dict[str, str]:
    """Stringify params, mask values under secret-looking keys and cut overlong values."""
    out: dict[str, str] = {}
    for k, v in params.items():
        last = k.rsplit(".", 1)[-1]
        text = "***" if SECRET_KEY.search(last) and v not in (None, "") else str(v)
        out[k] = text[: MAX_PARAM_CHARS - 3] + "..." if len(text) > MAX_PARAM_CHARS else text
    return out


def log_params(mlflow_client: MlflowClient, run_id: str, params: Mapping[str, Any]) -> None:
    """Log params in batches of 100 (MLflow's limit per call)."""
    from mlflow.entities import Param

    items = [Param(k, v) for k, v in safe_params(params).items()]
    for i in range(0, len(items), 100):
        mlflow_client.log_batch(run_id, params=items[i : i + 100])


def log_metrics(
    mlflow_client: MlflowClient,
    run_id: str,
    points: Iterable[tuple[str, float, int]],
) -> None:
    """Log ``(key, value, step)`` points with ``log_batch`` (1000 per call)."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    batch = [Metric(k, float(v), now, int(s)) for k, v, s in points]
    for i in range(0, len(batch), 1000):
        mlflow_client.log_batch(run_id, metrics=batch[i : i + 1000])
