"""Shared fixtures: where the real datasets are, and a pre-migrated MLflow store.

Real data comes from ``$GRAPHSSL_DATA_DIR`` or ``../shared/data`` beside the repository; tests
that need it skip with a clear reason when neither exists. A fresh SQLite MLflow store costs
7–9 s of schema migration, so one is migrated per session and copied per test.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# The suite never touches the network: configs (and CLI subprocesses, which inherit the
# environment) see paths.download=false unless a test turns it on against a local server.
os.environ.setdefault("GRAPHSSL_DOWNLOAD", "false")


def shared_data_dir() -> Path | None:
    """The offline dataset folder, or ``None`` when this machine has none."""
    candidates = [
        os.environ.get("GRAPHSSL_DATA_DIR"),
        os.environ.get("GRAPHSSL_SHARED_DATA"),
        str(REPO.parent / "shared" / "data"),
    ]
    for c in candidates:
        if c and (Path(c) / "Planetoid").is_dir():
            return Path(c)
    return None


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The real offline datasets (skips the test when they are absent)."""
    found = shared_data_dir()
    if found is None:
        pytest.skip(
            "real datasets not found: set GRAPHSSL_DATA_DIR to a folder laid out as "
            "../shared/data (Planetoid/, WebKB/, ...)"
        )
    return found


@pytest.fixture(scope="session")
def _mlflow_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    from mlflow.tracking import MlflowClient

    folder = tmp_path_factory.mktemp("mlflow-template")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    MlflowClient(tracking_uri=uri).search_experiments()  # creates and migrates the schema
    return folder / "mlflow.db"


@pytest.fixture
def outputs_dir(tmp_path: Path, _mlflow_template: Path) -> Path:
    """A fresh outputs folder whose ``mlflow.db`` is an already-migrated empty store."""
    out = tmp_path / "outputs"
    out.mkdir()
    shutil.copyfile(_mlflow_template, out / "mlflow.db")
    return out


@pytest.fixture
def cli_env(outputs_dir: Path) -> dict[str, str]:
    """Environment for running the CLI in a subprocess against ``outputs_dir``."""
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["GRAPHSSL_OUTPUTS"] = str(outputs_dir)
    env["MLFLOW_DISABLE_TELEMETRY"] = "true"
    env["PYTHONUNBUFFERED"] = "1"
    found = shared_data_dir()
    if found is not None:
        env["GRAPHSSL_DATA_DIR"] = str(found)
    return env


@pytest.fixture
def graphssl_cmd() -> list[str]:
    return [sys.executable, "-m", "graphssl"]
