"""A sweep's parent run, from Hydra's own multirun in this process (the basic sweeper and
launcher and graphssl's sweep callback, as ``graphssl -m`` runs them): the best child per
dataset, the sweep's params and description, and the best child printed at the end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig

CONF = Path(__file__).resolve().parents[2] / "conf"

FAST = (
    "model=dgi",
    "trainer.epochs=1",
    "eval.figures=false",
    "eval.diagnostics.enabled=false",
    "logger.log_embeddings=false",
    "logger.log_model=false",
)


def multirun(tasks: Any, *overrides: str) -> tuple[Any, list[Any]]:
    """Run ``graphssl -m <overrides>`` in this process; returns the parent and its children."""
    from graphssl.tasks.train import train

    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            GlobalHydra.instance().hydra.multirun(  # type: ignore[union-attr]
                config_name="train",
                task_function=train,
                overrides=[*FAST, *overrides, "hydra.mode=MULTIRUN"],
                with_log_configuration=False,
            )
    finally:
        HydraConfig.instance().cfg = None  # type: ignore[assignment]
    runs = tasks.runs()
    (parent,) = [r for r in runs if r.data.tags.get("graphssl.role") == "sweep"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    return parent, children


def test_best_child_per_dataset_params_description_and_terminal(tasks, capsys) -> None:
    metric = "probe/logreg/val_acc"
    parent, children = multirun(tasks, "dataset=sbm,karate", "seed=0,1")
    assert parent.info.status == "FINISHED" and len(children) == 4
    tags, params = parent.data.tags, parent.data.params
    by_dataset: dict[str, list[Any]] = {}
    for child in children:
        by_dataset.setdefault(child.data.params["dataset.name"], []).append(child)
    assert sorted(by_dataset) == ["KarateClub", "SBM"]
    out = capsys.readouterr().out
    for name, members in by_dataset.items():
        best = max(members, key=lambda c: (c.data.metrics[metric], -c.info.start_time))
        assert tags[f"best/{name}/child_run_id"] == best.info.run_id
        assert parent.data.metrics[f"best/{name}/{metric}"] == best.data.metrics[metric]
        assert f"{best.info.run_name} (run {best.info.run_id})" in out
        assert f"{best.info.run_name} (run {best.info.run_id})" in tags["mlflow.note.content"]
    # accuracies on two datasets do not compare: no sweep-wide best child
    assert "best_child_run_id" not in tags and f"best/{metric}" not in parent.data.metrics
    assert f"best child by {metric} (maximize) per dataset.name:" in out
    # the sweep's own params and description
    assert params["dataset"] == "sbm,karate" and params["seed"] == "0,1"
    assert params["trainer.epochs"] == "1" and params["sweep.best_by"] == "dataset.name"
    assert params["sweep.optimized_metric"] == metric
    assert tags["mlflow.note.content"].startswith("Sweep `graphssl -m ")


def test_best_by_nothing_ranks_all_children_together(tasks, capsys) -> None:
    metric = "probe/logreg/val_acc"
    parent, children = multirun(tasks, "dataset=karate", "seed=0,1", "sweep_best_by=[]")
    best = max(children, key=lambda c: (c.data.metrics[metric], -c.info.start_time))
    assert parent.data.tags["best_child_run_id"] == best.info.run_id
    assert parent.data.metrics[f"best/{metric}"] == best.data.metrics[metric]
    assert f"best child by {metric} (maximize):" in capsys.readouterr().out
