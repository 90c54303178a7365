"""Trainer callback for model selection on a validation probe (``eval.select``).

The measuring and bookkeeping is :class:`graphssl.evaluation.selection.ProbeSelection`; this
callback logs each measurement as ``select/<metric>`` (step = epoch), asks the trainer to stop
when the selection's patience runs out, keeps its state in checkpoints, and at the end of
training loads the best weights; :meth:`SelectionCallback.summary` gives ``select/best_epoch``,
``select/best_<metric>`` and ``select/measurements`` for the run's final metrics.
"""

from __future__ import annotations

import logging
from typing import Any

from graphssl.evaluation.selection import ProbeSelection
from graphssl.tracking.run import RunTracker
from graphssl.training.trainer import Callback, EpochResult, FitResult, Trainer

log = logging.getLogger(__name__)

#: Key of the selection's state in a checkpoint.
CHECKPOINT_KEY = "selection"


class SelectionCallback(Callback):
    """Runs :class:`ProbeSelection` during :meth:`Trainer.fit` and restores its best weights.

    Args:
        selection: what to measure, when, and the patience.
        tracker: the run to log into; ``None`` logs nothing (e.g. in scripts).
    """

    def __init__(self, selection: ProbeSelection, tracker: RunTracker | None = None) -> None:
        self.selection = selection
        self.tracker = tracker

    def on_epoch_end(self, trainer: Trainer, method: Any, result: EpochResult) -> None:
        sel = self.selection
        step = sel.step(method, result.epoch, trainer.epochs - 1)
        if step is None:
            return
        if self.tracker is not None:
            self.tracker.log_metrics({f"select/{sel.metric}": step.score}, step=step.epoch)
        log.info(
            "epoch %d: %s %.4f (best %.4f at epoch %d)",
            step.epoch,
            sel.metric,
            step.score,
            sel.best_score,
            sel.best_epoch,
        )
        if sel.should_stop:
            log.info(
                "no %s improvement in %d measurements; stopping", sel.metric, sel.bad_measurements
            )
            trainer.should_stop = True

    def on_checkpoint(self, trainer: Trainer, method: Any, epoch: int) -> None:
        trainer.checkpoint_extra[CHECKPOINT_KEY] = self.selection.state_dict()

    def on_resume(self, trainer: Trainer, method: Any, state: dict[str, Any]) -> None:
        if CHECKPOINT_KEY in state:
            self.selection.load_state_dict(state[CHECKPOINT_KEY])

    def on_fit_end(self, trainer: Trainer, method: Any, result: FitResult) -> None:
        sel = self.selection
        if not sel.restore_best(method):
            return
        log.info(
            "selected the weights of epoch %d (%s %.4f)", sel.best_epoch, sel.metric, sel.best_score
        )

    def summary(self) -> dict[str, float]:
        """The selected epoch and its score (empty when nothing was measured)."""
        sel = self.selection
        if sel.best_state is None:
            return {}
        return {
            "select/best_epoch": float(sel.best_epoch),
            f"select/best_{sel.metric}": sel.best_score,
            "select/measurements": float(len(sel.history)),
            "time/select_seconds": sel.seconds,
        }
