"""A sweep's parent run summarises its children: the best one, children.csv and a figure;
each child is named by its swept values; an Optuna sweep's best parameters reach the parent.

The sweeps run the ``graphssl -m`` command in this process (the ``commands`` fixture): the basic
launcher runs the jobs one after the other in the launching process, so what is tested (the
parent run's summary in the store) is the same as from a ``graphssl`` process."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FAST = (
    "dataset=sbm",
    "eval.figures=false",
    "logger.log_embeddings=false",
    "logger.log_model=false",
)


def sweep(commands, *args: str) -> None:
    res = commands.run("graphssl", "-m", *FAST, *args)
    assert res.returncode == 0, res.stderr[-3000:]


def parent_and_children(outputs: Path) -> tuple[MlflowClient, object, list]:
    client = MlflowClient(tracking_uri=f"sqlite:///{outputs / 'mlflow.db'}")
    exp = client.get_experiment_by_name("graphssl")
    assert exp is not None
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    (parent,) = [r for r in runs if r.data.tags.get("graphssl.role") == "sweep"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    return client, parent, children


def children_csv(client: MlflowClient, run_id: str, dest: Path) -> list[dict[str, str]]:
    path = client.download_artifacts(run_id, "children.csv", str(dest))
    return list(csv.DictReader(io.StringIO(Path(path).read_text())))


def test_basic_two_by_two_sweep_summary(commands, outputs_dir, tmp_path) -> None:
    sweep(commands, "model=dgi,grace", "trainer.epochs=2,3")
    client, parent, children = parent_and_children(outputs_dir)
    assert len(children) == 4 and parent.info.status == "FINISHED"
    names = sorted(c.info.run_name for c in children)
    assert names == [
        "dgi-SBM[model=dgi,trainer.epochs=2]",
        "dgi-SBM[model=dgi,trainer.epochs=3]",
        "grace-SBM[model=grace,trainer.epochs=2]",
        "grace-SBM[model=grace,trainer.epochs=3]",
    ]
    metric = "probe/logreg/val_acc"
    best_value = max(c.data.metrics[metric] for c in children)
    best = client.get_run(parent.data.tags["best_child_run_id"])
    assert best.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert best.data.metrics[metric] == best_value
    assert parent.data.metrics[f"best/{metric}"] == best_value

    rows = children_csv(client, parent.info.run_id, tmp_path)
    assert {(r["model"], r["trainer.epochs"]) for r in rows} == {
        ("dgi", "2"),
        ("dgi", "3"),
        ("grace", "2"),
        ("grace", "3"),
    }
    for key in (
        "run_id",
        "status",
        metric,
        "probe/logreg/test_acc",
        "probe/knn/test_acc",
        "diag/rankme",
    ):
        assert key in rows[0], key
    by_id = {c.info.run_id: c for c in children}
    for r in rows:
        assert r["status"] == "FINISHED"
        assert (
            float(r["probe/logreg/test_acc"])
            == by_id[r["run_id"]].data.metrics["probe/logreg/test_acc"]
        )
    figures = {a.path for a in client.list_artifacts(parent.info.run_id, "figures")}
    assert "figures/children.png" in figures


def test_optuna_best_params_on_parent(commands, outputs_dir, tmp_path) -> None:
    pytest.importorskip(
        "hydra_plugins.hydra_optuna_sweeper",
        reason="hydra-optuna-sweeper not installed (pip install -e '.[optuna]')",
    )
    sweep(commands, "experiment=optuna_search", "trainer.epochs=2", "hydra.sweeper.n_trials=3")
    client, parent, children = parent_and_children(outputs_dir)
    assert len(children) == 3
    params = parent.data.params
    assert params["best_params.encoder.hidden_channels"] in {"64", "128", "256", "512"}
    assert "best_params.model.optimizer.lr" in params
    best_value = max(c.data.metrics["probe/logreg/val_acc"] for c in children)
    assert parent.data.metrics["best/optuna_value"] == best_value
    arts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"optimization_results.yaml", "children.csv"} <= arts
    for child in children:
        assert "encoder.hidden_channels=" in child.info.run_name
    rows = children_csv(client, parent.info.run_id, tmp_path)
    assert all(r["encoder.hidden_channels"] for r in rows)
