"""The diagnostics callback: ``diag/*`` at the scheduled epochs, one collapse tag."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from graphssl.evaluation.diagnostics import embedding_diagnostics
from graphssl.training.callbacks.monitor import (
    COLLAPSE_STATE_TAG,
    COLLAPSE_TAG,
    CollapseThresholds,
    DiagnosticsCallback,
    DiagnosticsMonitor,
)
from graphssl.training.trainer import EpochResult


class Table(nn.Module):
    def __init__(self, z: Tensor) -> None:
        super().__init__()
        self.z = z

    def forward(self) -> Tensor:
        return self.z


def embed(model: nn.Module) -> Tensor:
    return model()


class FakeTracker:
    def __init__(self) -> None:
        self.metrics: list[tuple[dict[str, float], int]] = []
        self.tags: list[dict[str, Any]] = []

    def log_metrics(self, metrics: dict[str, float], step: int = 0) -> None:
        self.metrics.append((dict(metrics), step))

    def set_tags(self, tags: dict[str, Any]) -> None:
        self.tags.append(dict(tags))


def _epochs(cb: DiagnosticsCallback, model: nn.Module, n: int) -> None:
    for e in range(n):
        cb.on_epoch_end(None, model, EpochResult(e, {"loss": 1.0}, 0.0))  # type: ignore[arg-type]


def healthy() -> Tensor:
    return torch.randn(200, 16, generator=torch.Generator().manual_seed(0))


def collapsed() -> Tensor:
    g = torch.Generator().manual_seed(0)
    direction = torch.randn(16, generator=g)
    return torch.ones(200, 16) + 0.1 * torch.randn(200, 1, generator=g) * direction


def test_logs_diag_metrics_every_k_epochs() -> None:
    tracker = FakeTracker()
    cb = DiagnosticsCallback(
        DiagnosticsMonitor(embed, embedding_diagnostics, every=3, subset=64), tracker
    )  # type: ignore[arg-type]
    _epochs(cb, Table(healthy()), 8)
    assert [step for _, step in tracker.metrics] == [0, 3, 6]
    keys = set(tracker.metrics[0][0])
    assert {
        "diag/rankme",
        "diag/rankme_normalized",
        "diag/stable_rank",
        "diag/coherence",
        "diag/self_cluster",
        "diag/mean_cosine",
        "diag/mean_norm",
    } <= keys
    assert tracker.tags == [] and cb.alarm is None


def test_off_when_every_is_none() -> None:
    tracker = FakeTracker()
    cb = DiagnosticsCallback(DiagnosticsMonitor(embed, embedding_diagnostics, every=None), tracker)  # type: ignore[arg-type]
    _epochs(cb, Table(healthy()), 4)
    assert tracker.metrics == []


def test_collapse_alarm_tag_is_set_once() -> None:
    tracker = FakeTracker()
    cb = DiagnosticsCallback(DiagnosticsMonitor(embed, embedding_diagnostics, every=1), tracker)  # type: ignore[arg-type]
    _epochs(cb, Table(collapsed()), 3)
    assert len(tracker.metrics) == 3
    assert len(tracker.tags) == 1
    assert tracker.tags[0][COLLAPSE_TAG].startswith("epoch 0: rankme*=")


def test_alarm_reaches_mlflow(outputs_dir: Path) -> None:
    from graphssl.tracking.run import RunTracker

    uri = f"sqlite:///{outputs_dir / 'mlflow.db'}"
    with RunTracker(uri, "monitor-test", run_name="collapse") as tracker:
        cb = DiagnosticsCallback(DiagnosticsMonitor(embed, embedding_diagnostics, every=2), tracker)
        _epochs(cb, Table(collapsed()), 5)
    run = tracker.client.get_run(tracker.run_id)
    assert run.data.tags[COLLAPSE_TAG].startswith("epoch 0:")
    history = tracker.client.get_metric_history(tracker.run_id, "diag/stable_rank")
    assert sorted(m.step for m in history) == [0, 2, 4]


class Sequence(nn.Module):
    """A "method" whose embeddings at epoch ``e`` are ``frames[e]``."""

    def __init__(self, frames: list[Tensor]) -> None:
        super().__init__()
        self.frames = frames
        self.epoch = 0

    def forward(self) -> Tensor:
        return self.frames[min(self.epoch, len(self.frames) - 1)]


def test_direction_collapse_alarm_names_its_reason_in_the_tag() -> None:
    # rows drift towards one direction: full centered rank, rising mean cosine
    g = torch.Generator().manual_seed(0)
    u = torch.nn.functional.normalize(torch.randn(32, generator=g), dim=0)
    noise = torch.randn(512, 32, generator=g)
    model = Sequence([a * u + noise for a in (0.0, 5.0, 20.0, 40.0, 60.0, 5.0)])
    tracker = FakeTracker()
    mon = DiagnosticsMonitor(
        embed,
        embedding_diagnostics,
        every=1,
        subset=None,
        thresholds=CollapseThresholds(rankme_normalized=0.01, stable_rank=None),
    )
    cb = DiagnosticsCallback(mon, tracker)  # type: ignore[arg-type]
    for e in range(6):
        model.epoch = e
        cb.on_epoch_end(None, model, EpochResult(e, {"loss": 1.0}, 0.0))  # type: ignore[arg-type]
    cosines = [m["diag/mean_cosine"] for m, _ in tracker.metrics]
    assert cosines[2] < 0.97 < cosines[3] < cosines[4] and cosines[5] < 0.97
    assert cosines[:5] == sorted(cosines[:5])
    assert all(m["diag/effective_rank"] > 30 for m, _ in tracker.metrics)  # rank stays high
    # collapsed at epoch 3 (the alarm, once), still at 4 (no new tag), recovered at 5
    assert [t.get(COLLAPSE_STATE_TAG) for t in tracker.tags] == [
        "collapsed at epoch 3",
        "recovered at epoch 5",
    ]
    tag = tracker.tags[0][COLLAPSE_TAG]
    assert tag.startswith("epoch 3: mean_cosine 0.9") and tag.endswith(
        "> 0.97 (direction collapse)"
    )
    assert "rank collapse" not in tag
    assert COLLAPSE_TAG not in tracker.tags[1]
