"""Trainer callback that logs embedding diagnostics during training (``diag/*``, step = epoch).

The measuring is :class:`graphssl.evaluation.monitor.DiagnosticsMonitor`; this module only
logs what it returns and raises the collapse alarm: a warning and the MLflow tag
``graphssl.collapse_alarm`` = ``"epoch N: rankme*=…, stable_rank=…"``, set once per run.
"""

from __future__ import annotations

import logging
from typing import Any

from graphssl.evaluation.monitor import DiagnosticsMonitor
from graphssl.tracking.run import RunTracker
from graphssl.training.trainer import Callback, EpochResult, Trainer

log = logging.getLogger(__name__)

#: MLflow tag holding the first collapse alarm of a run.
COLLAPSE_TAG = "graphssl.collapse_alarm"


class DiagnosticsCallback(Callback):
    """Logs ``diag/<name>`` at the epochs :meth:`DiagnosticsMonitor.due` selects.

    Args:
        monitor: what to measure and when.
        tracker: the run to log into.
    """

    def __init__(self, monitor: DiagnosticsMonitor, tracker: RunTracker) -> None:
        self.monitor = monitor
        self.tracker = tracker
        self.alarm: str | None = None

    def on_epoch_end(self, trainer: Trainer, method: Any, result: EpochResult) -> None:
        res = self.monitor.step(method, result.epoch)
        if res is None:
            return
        self.tracker.log_metrics(
            {f"diag/{k}": v for k, v in res.diagnostics.items()}, step=result.epoch
        )
        if res.alarm is not None and self.alarm is None:
            self.alarm = res.alarm
            log.warning(
                "embedding collapse suspected at %s (thresholds: %s)",
                res.alarm,
                self.monitor.thresholds,
            )
            self.tracker.set_tags({COLLAPSE_TAG: res.alarm})
