"""Model selection on a probe's validation score, measured during training
(``callbacks.selection``).

Self-supervised objectives do not say when a representation is best: BGRL's CiteSeer embeddings
peak after ~25 epochs and then degrade, while GRACE on Cora keeps improving past its paper's 200
epochs. :class:`ProbeSelection` measures a probe's *validation* score every
``every`` epochs (and at the last epoch), keeps a copy of the weights of the best measurement,
optionally stops after ``patience`` measurements without improvement, and hands the best
weights back at the end, so that an epoch count no longer has to be tuned per dataset. The test
split is never looked at. :class:`SelectionCallback` runs it in :meth:`Trainer.fit`, logs each
measurement as ``select/<metric>`` (step = epoch) through a metrics sink, asks the trainer to
stop when the patience runs out, keeps its state in checkpoints and loads the best weights at
the end; :func:`probe_selection` builds both from ``conf/callbacks/``. The probe is any object
with the probes' ``evaluate(z, y, train, val, test)``, passed in by the train task.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from graphssl.training.callbacks.base import MetricSink
from graphssl.training.trainer import Callback, EpochResult, FitResult, Trainer
from graphssl.utils import ProbeLike, SplitLike, capture_rng, restore_rng

__all__ = [
    "CHECKPOINT_KEY",
    "ProbeSelection",
    "SelectionCallback",
    "SelectionStep",
    "probe_selection",
    "shares_test_rows",
]

log = logging.getLogger(__name__)

#: ``embed(model) -> (N, D)``: the embeddings to probe (eval mode, no gradients).
EmbedFn = Callable[[nn.Module], Tensor]

#: Key of the selection's state in a checkpoint.
CHECKPOINT_KEY = "selection"


def shares_test_rows(splits: Sequence[SplitLike]) -> bool:
    """Whether a row that one split tests on is fitted or validated on by another (k folds)."""
    for i, s in enumerate(splits):
        for j, other in enumerate(splits):
            if i != j and bool(torch.isin(s.test, torch.cat([other.train, other.val])).any()):
                return True
    return False


@dataclass(frozen=True)
class SelectionStep:
    """One measurement: the epoch (0-based), the validation score, and whether it is the best
    so far."""

    epoch: int
    score: float
    improved: bool


class ProbeSelection:
    """Keeps the weights whose embeddings score best on the validation split.

    The score is ``<metric>`` of ``probe`` on the splits (their mean when there are several,
    e.g. k folds), as the run's final probes report it. With k folds
    one epoch is chosen for all of them, and a fold's test rows are the other folds' train and
    validation rows, so the choice is not independent of the test labels (a warning says so);
    an unbiased k-fold estimate needs a fixed epoch count. Measuring runs
    with the global random generators saved and restored, so a run with selection trains
    exactly the weights the same run without it trains.

    Args:
        embed: ``embed(model) -> (N, D)`` embeddings of the rows the splits index.
        probe: anything with the probes' ``evaluate(z, y, train, val, test)`` (e.g.
            :class:`~graphssl.evaluation.logreg_probe.LogRegProbe`).
        labels: ``(N,)`` labels of the rows.
        splits: train/val/test index splits; the probe fits on ``train`` and is scored on
            ``val``.
        every: measure after epochs ``every-1, 2·every-1, …`` (1-based: every ``every``-th)
            and after the last epoch.
        metric: the probe's output key to select on (default: ``"val_acc"``).
        mode: ``"max"`` or ``"min"`` (e.g. ``val_mae``) (default: ``"max"``).
        patience: stop after this many measurements without improvement; ``None`` trains all
            epochs (default: ``None``).
        min_delta: an improvement must exceed the best score by more than this
            (default: ``0.0``).

    Raises:
        ValueError: for ``every < 1``, ``patience < 1``, a negative ``min_delta`` or an unknown
            ``mode``.
    """

    def __init__(
        self,
        embed: EmbedFn,
        probe: ProbeLike,
        labels: Tensor,
        splits: Sequence[SplitLike],
        *,
        every: int,
        metric: str = "val_acc",
        mode: str = "max",
        patience: int | None = None,
        min_delta: float = 0.0,
    ) -> None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(
                f"callbacks.selection.every must be a positive integer or null, got {every!r}"
            )
        if patience is not None and (isinstance(patience, bool) or patience < 1):
            raise ValueError(f"callbacks.selection.patience must be >= 1 or null, got {patience!r}")
        if mode not in ("max", "min"):
            raise ValueError(f"callbacks.selection.mode must be 'max' or 'min', got {mode!r}")
        if not min_delta >= 0:
            raise ValueError(f"callbacks.selection.min_delta must be >= 0, got {min_delta!r}")
        if not metric.startswith("val_"):
            raise ValueError(
                f"callbacks.selection.metric must be a validation metric of the probe (val_*), got "
                f"{metric!r}: selecting on anything else leaks the test split or the training fit"
            )
        self.embed = embed
        self.probe = probe
        self.labels = labels
        self.splits = list(splits)
        if len(self.splits) > 1 and shares_test_rows(self.splits):
            log.warning(
                "callbacks.selection on %d splits whose test rows are other splits' train/val "
                "rows (k folds): the epoch chosen for all of them depends on every label, so the "
                "k-fold test accuracy is optimistic; use a fixed trainer.epochs for an unbiased "
                "estimate",
                len(self.splits),
            )
        self.every = every
        self.metric = metric
        self.mode = mode
        self.patience = patience
        self.min_delta = float(min_delta)
        self.best_score = -math.inf if mode == "max" else math.inf
        self.best_epoch = -1
        self.best_state: dict[str, Tensor] | None = None
        self.bad_measurements = 0
        self.history: list[tuple[int, float]] = []
        #: seconds spent measuring (extraction and probe)
        self.seconds = 0.0

    def due(self, epoch: int, last_epoch: int) -> bool:
        """Whether ``epoch`` (0-based) is measured in a run whose last epoch is ``last_epoch``."""
        return (epoch + 1) % self.every == 0 or epoch == last_epoch

    def measure(self, model: nn.Module) -> float:
        """The validation score of ``embed(model)``; leaves the global generators untouched."""
        t0 = time.perf_counter()
        rng = capture_rng()
        try:
            with torch.no_grad():
                z = self.embed(model).detach().cpu()
            results = [
                self.probe.evaluate(z, self.labels, s.train, s.val, s.test) for s in self.splits
            ]
        finally:
            restore_rng(rng)
            self.seconds += time.perf_counter() - t0
        if any(self.metric not in r for r in results):
            got = sorted(k for k, v in results[0].items() if isinstance(v, (int, float, bool)))
            raise ValueError(
                f"callbacks.selection.metric={self.metric!r} is not among the probe's outputs {got}"
            )
        return float(np.mean([float(r[self.metric]) for r in results]))

    def _better(self, score: float) -> bool:
        if not math.isfinite(score):
            return False
        if self.mode == "max":
            return score > self.best_score + self.min_delta
        return score < self.best_score - self.min_delta

    def step(self, model: nn.Module, epoch: int, last_epoch: int) -> SelectionStep | None:
        """Measure when ``epoch`` is due; remember the weights when they are the best so far."""
        if not self.due(epoch, last_epoch):
            return None
        score = self.measure(model)
        self.history.append((epoch, score))
        improved = self._better(score)
        if improved:
            self.best_score, self.best_epoch, self.bad_measurements = score, epoch, 0
            self.best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        else:
            self.bad_measurements += 1
        return SelectionStep(epoch, score, improved)

    @property
    def should_stop(self) -> bool:
        """Whether ``patience`` measurements in a row did not improve."""
        return self.patience is not None and self.bad_measurements >= self.patience

    def restore_best(self, model: nn.Module) -> bool:
        """Load the best weights into ``model``; ``False`` when nothing was measured."""
        if self.best_state is None:
            return False
        model.load_state_dict(self.best_state)
        return True

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps so that a resumed run selects as an uninterrupted one."""
        return {
            "best_score": self.best_score,
            "best_epoch": self.best_epoch,
            "best_state": self.best_state,
            "bad_measurements": self.bad_measurements,
            "history": [[e, s] for e, s in self.history],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.best_score = float(state["best_score"])
        self.best_epoch = int(state["best_epoch"])
        self.best_state = state["best_state"]
        self.bad_measurements = int(state["bad_measurements"])
        self.history = [(int(e), float(s)) for e, s in state["history"]]


class SelectionCallback(Callback):
    """Runs :class:`ProbeSelection` during :meth:`Trainer.fit` and restores its best weights.

    Args:
        selection: what to measure, when, and the patience.
        sink: where ``select/<metric>`` goes; ``None`` logs nothing (e.g. in scripts).
    """

    def __init__(self, selection: ProbeSelection, sink: MetricSink | None = None) -> None:
        self.selection = selection
        self.sink = sink

    def on_epoch_end(self, trainer: Trainer, method: Any, result: EpochResult) -> None:
        sel = self.selection
        step = sel.step(method, result.epoch, trainer.epochs - 1)
        if step is None:
            return
        if self.sink is not None:
            self.sink.log_metrics({f"select/{sel.metric}": step.score}, step=step.epoch)
        log.info(  # epochs counted from 1, as the trainer's "Epoch 010" lines
            "epoch %d: %s %.4f (best %.4f at epoch %d)",
            step.epoch + 1,
            sel.metric,
            step.score,
            sel.best_score,
            sel.best_epoch + 1,
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
            "selected the weights of epoch %d (%s %.4f)",
            sel.best_epoch + 1,
            sel.metric,
            sel.best_score,
        )

    def summary(self) -> dict[str, float]:
        """The selected epoch (counted from 1, as the trainer's epoch lines) and its score
        (empty when nothing was measured)."""
        sel = self.selection
        if sel.best_state is None:
            return {}
        return {
            "select/best_epoch": float(sel.best_epoch + 1),
            f"select/best_{sel.metric}": sel.best_score,
            "select/measurements": float(len(sel.history)),
            "time/select_seconds": sel.seconds,
        }


def probe_selection(
    *,
    embed: EmbedFn,
    probe: ProbeLike,
    labels: Tensor,
    splits: Sequence[SplitLike],
    every: int,
    metric: str = "val_acc",
    mode: str = "max",
    patience: int | None = None,
    min_delta: float = 0.0,
    sink: MetricSink | None = None,
) -> SelectionCallback:
    """The ``selection`` entry of ``conf/callbacks/``: a :class:`SelectionCallback` on a new
    :class:`ProbeSelection` (arguments as there)."""
    selection = ProbeSelection(
        embed,
        probe,
        labels,
        splits,
        every=every,
        metric=metric,
        mode=mode,
        patience=patience,
        min_delta=float(min_delta),
    )
    return SelectionCallback(selection, sink)
