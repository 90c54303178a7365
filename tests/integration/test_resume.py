"""Checkpoints and resume: a SIGKILLed run is marked KILLED, and resume=true continues it into
the same MLflow run, ending with the same metrics as an uninterrupted run.

The killed run is a ``graphssl`` process (SIGKILL is the point); the runs after it (the resume,
the uninterrupted reference, the next start) run the train task in-process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ARGS = [
    "dataset=sbm",
    "model=grace",
    "encoder.hidden_channels=32",
    "encoder.num_layers=2",
    "trainer.epochs=200",  # the kill comes at the first checkpoint, epoch 10
    "trainer.patience=null",
    "trainer.checkpoint_every=10",
    "eval.figures=false",
    "logger.log_embeddings=false",
    "eval.probes.knn=null",
]


def runs(outputs: Path):
    client = MlflowClient(tracking_uri=f"sqlite:///{outputs / 'mlflow.db'}")
    exp = client.get_experiment_by_name("graphssl")
    return client, client.search_runs([exp.experiment_id]) if exp else []


def start_and_kill(cmd: list[str], env: dict[str, str], outputs: Path) -> None:
    proc = subprocess.Popen(
        [*cmd, *ARGS], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            if list((outputs / "checkpoints").glob("*/last.pt")):
                break
            if proc.poll() is not None:
                pytest.fail(f"run ended (rc {proc.returncode}) before writing a checkpoint")
            time.sleep(0.05)
        else:
            pytest.fail("no checkpoint written within 300 s")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def test_killed_run_is_marked_killed_then_resumed(
    graphssl_cmd, cli_env, outputs_dir, tasks, tmp_path, _mlflow_template, monkeypatch
) -> None:
    start_and_kill(graphssl_cmd, cli_env, outputs_dir)
    client, before = runs(outputs_dir)
    assert [r.info.status for r in before] == ["RUNNING"]  # the killed process left it open
    killed_id = before[0].info.run_id

    tasks.train(*ARGS, "resume=true")
    client, after = runs(outputs_dir)
    assert [r.info.run_id for r in after] == [killed_id], "resume must continue the same run"
    resumed = after[0]
    assert resumed.info.status == "FINISHED"
    assert resumed.data.tags["graphssl.resumed"] == "true"
    steps = [m.step for m in client.get_metric_history(killed_id, "train/loss")]
    assert steps[-1] == 199 and len(set(steps)) == 200

    # The same configuration, never interrupted, in a fresh store: identical final metrics.
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "mlflow.db").write_bytes(_mlflow_template.read_bytes())
    monkeypatch.setenv("GRAPHSSL_OUTPUTS", str(fresh))
    tasks.train(*ARGS)
    _, (straight,) = runs(fresh)
    for key in (
        "probe/logreg/test_acc",
        "probe/logreg/val_acc",
        "diag/rankme",
        "diag/stable_rank",
        "train/final_loss",
    ):
        assert resumed.data.metrics[key] == straight.data.metrics[key], key


def test_stale_run_marked_killed_on_next_start(graphssl_cmd, cli_env, outputs_dir, tasks) -> None:
    start_and_kill(graphssl_cmd, cli_env, outputs_dir)
    _, (stale,) = runs(outputs_dir)
    tasks.train(*ARGS)
    _, all_runs = runs(outputs_dir)
    status = {r.info.run_id: r.info.status for r in all_runs}
    assert status.pop(stale.info.run_id) == "KILLED"
    assert list(status.values()) == ["FINISHED"]
    killed = next(r for r in all_runs if r.info.run_id == stale.info.run_id)
    assert "marked KILLED" in killed.data.tags["error"]
