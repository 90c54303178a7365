"""The train task's figures: logged as ``figures/*.png`` artifacts, none drawn when they are
off, and a figure that fails fails the run after its metrics reached the store."""

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
    "logger.log_embeddings=false",
)


def _refuse_figures(monkeypatch: pytest.MonkeyPatch, why: str) -> None:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(why)

    monkeypatch.setattr(plots, "spectrum_figure", refused)
    monkeypatch.setattr(plots, "projection_figure", refused)


def test_a_run_logs_both_figures(tasks) -> None:
    metrics = tasks.train(*FAST)
    (run,) = tasks.runs()
    names = {a.path for a in tasks.client().list_artifacts(run.info.run_id, "figures")}
    assert names == {"figures/spectrum.png", "figures/projection.png"}
    assert metrics["time/figures_seconds"] > 0


def test_a_failing_figure_fails_the_run_after_its_metrics(tasks, monkeypatch) -> None:
    _refuse_figures(monkeypatch, "the figure cannot be drawn")
    with pytest.raises(RuntimeError, match="cannot be drawn"):
        tasks.train(*FAST)
    (run,) = tasks.runs()
    assert run.info.status == "FAILED"
    assert run.data.tags["error"] == "RuntimeError: the figure cannot be drawn"
    assert "probe/logreg/test_acc" in run.data.metrics  # logged before the figures
    assert "figures" not in {a.path for a in tasks.client().list_artifacts(run.info.run_id)}


def test_figures_off_draw_nothing(tasks, monkeypatch) -> None:
    _refuse_figures(monkeypatch, "a figure was drawn with eval.figures=false")
    tasks.train(*FAST, "eval.figures=false")
    (run,) = tasks.runs()
    assert run.info.status == "FINISHED"
    assert "figures" not in {a.path for a in tasks.client().list_artifacts(run.info.run_id)}
