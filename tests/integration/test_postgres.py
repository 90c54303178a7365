"""Team tracking: ``mlflow server`` on a PostgreSQL database, a graphssl sweep logging to it.

The PostgreSQL cluster comes from the ``postgres_uri`` fixture (tests/integration/conftest.py),
which skips with the reason where the server binaries or ``psycopg2`` are missing.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from graphssl.tracking.ui import MlflowServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_sweep_logs_to_server_on_postgres(
    postgres_uri, free_port, graphssl_cmd, cli_env, tmp_path
) -> None:
    port = free_port()
    server = MlflowServer(
        postgres_uri,
        str(tmp_path / "mlartifacts"),
        port=port,
        log_path=tmp_path / "mlflow-server.log",
    )
    with server.start(timeout=240):
        env = dict(cli_env, MLFLOW_TRACKING_URI=server.url)
        res = subprocess.run(
            [
                *graphssl_cmd,
                "-m",
                "dataset=sbm",
                "model=dgi,grace",
                "trainer.epochs=2",
                "eval.figures=false",
                "logger.log_embeddings=false",
            ],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert res.returncode == 0, res.stderr[-3000:]
        client = MlflowClient(tracking_uri=server.url)
        exp = client.get_experiment_by_name("graphssl")
        assert exp is not None
        runs = client.search_runs([exp.experiment_id], max_results=100)
        parents = [r for r in runs if r.data.tags.get("graphssl.role") == "sweep"]
        assert len(parents) == 1
        children = [
            r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id
        ]
        assert sorted(r.data.params["model._target_"].rsplit(".", 1)[-1] for r in children) == [
            "DGI",
            "GRACE",
        ]
        assert {r.info.status for r in children} == {"FINISHED"}
        assert parents[0].info.status == "FINISHED"
        for child in children:
            assert len(client.get_metric_history(child.info.run_id, "train/loss")) == 2
            assert "probe/logreg/val_acc" in child.data.metrics
        # nothing went to a local SQLite store: the runs live in PostgreSQL
        assert not (Path(cli_env["GRAPHSSL_OUTPUTS"]) / "mlartifacts").exists()
    assert not server.healthy()
