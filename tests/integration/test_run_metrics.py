"""A mini-batch CLI run logs the data's size, the sampler's throughput and the peak memory."""

from __future__ import annotations

import subprocess

import pytest
from mlflow.tracking import MlflowClient

pytestmark = pytest.mark.integration


def test_mini_batch_run_logs_throughput_and_memory(graphssl_cmd, cli_env, outputs_dir) -> None:
    res = subprocess.run(
        [
            *graphssl_cmd,
            "dataset=sbm",
            "trainer.mini_batch=true",
            "trainer.batch_size=128",
            "trainer.epochs=2",
            "eval.figures=false",
            "logger.log_embeddings=false",
        ],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    client = MlflowClient(tracking_uri=f"sqlite:///{outputs_dir / 'mlflow.db'}")
    exp = client.get_experiment_by_name("graphssl")
    assert exp is not None
    (run,) = client.search_runs([exp.experiment_id])
    m = run.data.metrics
    assert m["data/num_nodes"] > 0 and m["data/num_edges"] > 0
    assert m["time/batches_per_second"] > 0
    assert 0 < m["time/sample_seconds"] < m["time/train_seconds"]
    assert m["time/compute_seconds"] > 0
    assert m["time/figures_seconds"] >= 0
    # the interpreter, torch and the graph alone take more than 50 MiB; a unit slip (bytes or
    # KiB read as GiB) would give an absurd figure either way
    assert 0.05 < m["mem/peak_rss_gb"] < 64
