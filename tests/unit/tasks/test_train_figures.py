"""The train task's figures: logged as ``figures/*.png`` artifacts, and a figure that fails
fails the run after its metrics reached the store."""

from __future__ import annotations

from typing import Any

import pytest

from graphssl.evaluation import plots

FAST = (
    "dataset=sbm",
    "encoder.hidden_channels=16",
    "encoder.num_layers=1",
    "trainer.epochs=2",
    "eval.probes.knn=null",
    "eval.baseline=false",
)


def test_a_run_logs_both_figures_and_their_time(tasks) -> None:
    metrics = tasks.train(*FAST, "logger.log_embeddings=false")
    (run,) = tasks.runs()
    client = tasks.client()
    names = {a.path for a in client.list_artifacts(run.info.run_id, "figures")}
    assert names == {"figures/spectrum.png", "figures/projection.png"}
    assert metrics["time/figures_seconds"] > 0
    assert run.data.metrics["time/artifacts_seconds"] >= 0


def test_a_failing_figure_fails_the_run_after_its_metrics(tasks, monkeypatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the projection cannot be drawn")

    monkeypatch.setattr(plots, "draw_projection", broken)
    with pytest.raises(RuntimeError, match="cannot be drawn"):
        tasks.train(*FAST)
    (run,) = tasks.runs()
    assert run.info.status == "FAILED"
    assert run.data.tags["error"] == "RuntimeError: the projection cannot be drawn"
    assert "probe/logreg/test_acc" in run.data.metrics  # logged before the figures
    artifacts = {a.path for a in tasks.client().list_artifacts(run.info.run_id)}
    assert "figures" not in artifacts and "embeddings.pt" not in artifacts


def test_figures_off_draw_nothing(tasks, monkeypatch) -> None:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a figure was drawn with eval.figures=false")

    monkeypatch.setattr(plots, "BackgroundFigures", refused)
    metrics = tasks.train(*FAST, "eval.figures=false")
    (run,) = tasks.runs()
    assert run.info.status == "FINISHED"
    assert metrics["time/figures_seconds"] == 0.0
    assert "figures" not in {a.path for a in tasks.client().list_artifacts(run.info.run_id)}
