"""Sweeps under Hydra's optional launchers/sweepers: one MLflow parent run, every child FINISHED.

The sweep callback creates the parent run in the launching process and the jobs, which joblib
and submitit run in other processes, find it through ``mlflow_parent_run.json`` in the sweep
folder (graphssl/tracking/sweep.py). Each test skips when its plugin (an optional extra) is absent.
"""

from __future__ import annotations

import pickle
import subprocess
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FAST = ("dataset=sbm", "eval.figures=false", "logger.log_embeddings=false")


def run_sweep(
    cmd: list[str], env: dict[str, str], cwd: Path, *args: str, timeout: int = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*cmd, "-m", *FAST, *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def sweep_runs(outputs: Path) -> tuple[MlflowClient, object, list]:
    """The single sweep parent of the store and its children."""
    client = MlflowClient(tracking_uri=f"sqlite:///{outputs / 'mlflow.db'}")
    exp = client.get_experiment_by_name("graphssl")
    assert exp is not None, "the experiment 'graphssl' was not created"
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("graphssl.role") == "sweep"]
    assert len(parents) == 1, f"expected one sweep parent, got {len(parents)}"
    parent = parents[0]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(children) + 1 == len(runs), "every run must be the parent or one of its children"
    return client, parent, children


def assert_all_finished(parent, children, n: int) -> None:
    assert len(children) == n
    assert [r.info.status for r in children] == ["FINISHED"] * n
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["children_total"] == str(n)
    assert parent.data.tags["children_finished"] == str(n)


def test_joblib_four_jobs_on_two_workers(
    graphssl_cmd, cli_env, commands, outputs_dir, tmp_path
) -> None:
    pytest.importorskip(
        "hydra_plugins.hydra_joblib_launcher",
        reason="hydra-joblib-launcher not installed (pip install -e '.[joblib]')",
    )
    res = run_sweep(
        graphssl_cmd,
        cli_env,
        tmp_path,
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "model=dgi,grace",
        "trainer.epochs=2,3",
    )
    assert res.returncode == 0, res.stderr[-3000:]
    # graphssl's joblib launch: one loky worker per slot (graphssl/tracking/launchers.py)
    assert "joblib launcher (n_jobs=2)" in res.stdout + res.stderr
    _, parent, children = sweep_runs(outputs_dir)
    assert_all_finished(parent, children, 4)
    combos = {
        (r.data.params["model._target_"].rsplit(".", 1)[-1], r.data.params["trainer.epochs"])
        for r in children
    }
    assert combos == {("DGI", "2"), ("DGI", "3"), ("GRACE", "2"), ("GRACE", "3")}
    # every job, joblib workers included, leaves the config pickle Hydra's --experimental-rerun
    # reads (the workers' launcher node is typed by a class pickle cannot find by name)
    assert "PicklingError" not in res.stderr and "SaveJobConfig" not in res.stderr
    sweep_dir = Path(parent.data.tags["graphssl.sweep_dir"])
    pickles = sorted(sweep_dir.glob("[0-9]/.hydra/config.pickle"))
    assert len(pickles) == 4 and all(p.stat().st_size > 0 for p in pickles)
    job0 = pickle.loads(pickles[0].read_bytes())
    assert (job0.model._target_.rsplit(".", 1)[-1], job0.trainer.epochs) == ("DGI", 2)
    rerun = commands.run("graphssl", "--experimental-rerun", str(pickles[0]))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    client = MlflowClient(tracking_uri=f"sqlite:///{outputs_dir / 'mlflow.db'}")
    again = [
        r
        for r in client.search_runs([parent.info.experiment_id], max_results=100)
        if r.info.run_id not in {c.info.run_id for c in children} | {parent.info.run_id}
    ]
    assert [r.info.status for r in again] == ["FINISHED"]
    assert again[0].data.params["trainer.epochs"] == "2"
    assert again[0].data.params["model._target_"] == job0.model._target_


def test_submitit_local_two_jobs(graphssl_cmd, cli_env, outputs_dir, tmp_path) -> None:
    pytest.importorskip(
        "hydra_plugins.hydra_submitit_launcher",
        reason="hydra-submitit-launcher not installed (pip install -e '.[submitit]')",
    )
    res = run_sweep(
        graphssl_cmd,
        cli_env,
        tmp_path,
        "hydra/launcher=submitit_local",
        "model=dgi,grace",
        "trainer.epochs=2",
    )
    assert res.returncode == 0, res.stderr[-3000:]
    _, parent, children = sweep_runs(outputs_dir)
    assert_all_finished(parent, children, 2)
    sweep_dir = Path(parent.data.tags["graphssl.sweep_dir"])
    assert (sweep_dir / ".submitit").is_dir(), "the jobs did not go through submitit"


def test_optuna_search_three_trials(commands, outputs_dir) -> None:
    # the sweeper runs its trials through the basic launcher, one after another in the
    # command's process: the command runs in this one
    pytest.importorskip(
        "hydra_plugins.hydra_optuna_sweeper",
        reason="hydra-optuna-sweeper not installed (pip install -e '.[optuna]')",
    )
    res = commands.run(
        "graphssl",
        "-m",
        *FAST,
        "experiment=optuna_search",
        "trainer.epochs=2",
        "hydra.sweeper.n_trials=3",
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Best value:" in res.stdout + res.stderr
    _, parent, children = sweep_runs(outputs_dir)
    assert_all_finished(parent, children, 3)
    for child in children:
        assert "probe/logreg/val_acc" in child.data.metrics
        assert child.data.params["encoder.hidden_channels"] in {"64", "128", "256", "512"}
        assert 1e-4 <= float(child.data.params["model.optimizer.lr"]) <= 1e-2
    results = Path(parent.data.tags["graphssl.sweep_dir"]) / "optimization_results.yaml"
    assert results.is_file(), "the Optuna sweeper did not write its results"
    best = max(c.data.metrics["probe/logreg/val_acc"] for c in children)
    assert f"best_value: {best}" in results.read_text()
