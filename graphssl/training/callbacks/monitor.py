"""Embedding diagnostics during training, on a fixed seeded subset of rows, with a collapse alarm.

:class:`DiagnosticsMonitor` decides which epochs are measured, which rows (drawn once with a
seeded ``torch.Generator``), runs the diagnostics function it is given (the train task passes
:func:`graphssl.evaluation.diagnostics.embedding_diagnostics` from ``conf/callbacks/``) and
checks whether the embeddings look collapsed, in either of two ways:

* **rank collapse**: RankMe (Garrido et al., ICML 2023, https://arxiv.org/abs/2210.02885)
  normalised by ``min(n, d)`` near 0, or a stable rank near 1 — the embeddings span (almost)
  one dimension;
* **direction collapse**: a mean pairwise cosine similarity of the rows near 1 — every row
  points (almost) the same way, which a high centered rank does not exclude (the spread around
  the common direction may be isotropic).

:class:`DiagnosticsCallback` logs what it measures as ``diag/<name>`` (step = epoch, the whole
suite: ranks, ``mean_cosine``, ``mean_norm``, ...) through a metrics sink and raises the
collapse alarm: a warning and the tag ``graphssl.collapse_alarm`` with the reason, e.g.
``"epoch 4: rankme*=0.002, stable_rank=1.01 (rank collapse)"`` or
``"epoch 12: mean_cosine 0.99 > 0.97 (direction collapse)"``, set once per run. The tag
``graphssl.collapse_state`` follows the measurements: ``"collapsed at epoch N"`` when a check
fails, ``"recovered at epoch M"`` when a later one passes again. BGRL, for one, passes through a
collapsed phase early in training and leaves it (STUDIES.md §3), so the state at the end is
what says whether the final embeddings are collapsed.

The default thresholds are set from healthy runs: GraphMAE on Cora keeps a stable rank of
1.07–1.31 and a mean cosine up to 0.94 throughout a run that reaches 80 % probe accuracy, while
BGRL's collapsed phase sits at stable rank 1.00–1.03 and mean cosine 0.99–1.00.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from graphssl.training.callbacks.base import MetricSink
from graphssl.training.trainer import Callback, EpochResult, Trainer
from graphssl.utils import capture_rng, restore_rng

__all__ = [
    "COLLAPSE_STATE_TAG",
    "COLLAPSE_TAG",
    "CollapseThresholds",
    "DiagnosticsCallback",
    "DiagnosticsMonitor",
    "MonitorResult",
    "collapse_message",
    "diagnostics_monitor",
    "select_subset",
]

log = logging.getLogger(__name__)

#: ``embed(model) -> (N, D)``: the embeddings to measure (eval mode, no gradients).
EmbedFn = Callable[[nn.Module], Tensor]
#: ``diagnose(z, reference=...) -> {name: value}``: the diagnostics suite.
DiagnoseFn = Callable[..., Mapping[str, float]]

#: Tag holding the first collapse alarm of a run.
COLLAPSE_TAG = "graphssl.collapse_alarm"
#: Tag holding the latest collapse transition: "collapsed at epoch N" / "recovered at epoch M".
COLLAPSE_STATE_TAG = "graphssl.collapse_state"


def select_subset(num_rows: int, size: int | None, seed: int) -> Tensor:
    """Sorted indices of ``min(size, num_rows)`` rows drawn without replacement.

    Args:
        num_rows: rows available ``N``.
        size: rows wanted; ``None`` keeps every row.
        seed: seed of the ``torch.Generator`` that draws them.

    Returns:
        ``(min(size, N),)`` long tensor, ascending.
    """
    if num_rows < 0:
        raise ValueError(f"num_rows must be >= 0, got {num_rows}")
    if size is not None and size < 1:
        raise ValueError(f"callbacks.monitor.subset must be >= 1 or null, got {size}")
    if size is None or size >= num_rows:
        return torch.arange(num_rows)
    gen = torch.Generator().manual_seed(int(seed))
    return torch.randperm(num_rows, generator=gen)[:size].sort().values


@dataclass(frozen=True)
class CollapseThresholds:
    """Alarm when ``rankme_normalized`` or ``stable_rank`` falls below these values (rank
    collapse), or ``mean_cosine`` rises above its value (direction collapse); ``None`` turns a
    check off.

    Args:
        rankme_normalized: RankMe / min(n, d) below this is collapse (default: ``0.01``).
        stable_rank: ``‖X‖_F² / σ₁²`` below this is collapse (default: ``1.03``; of raw,
            uncentred rows, so a large common offset alone keeps it near 1: healthy GraphMAE
            embeddings sit at 1.07–1.31).
        mean_cosine: mean pairwise cosine similarity of the rows above this is collapse
            (default: ``0.97``; healthy runs reach 0.94).
    """

    rankme_normalized: float | None = 0.01
    stable_rank: float | None = 1.03
    mean_cosine: float | None = 0.97


def collapse_message(
    diag: Mapping[str, float], epoch: int, thresholds: CollapseThresholds
) -> str | None:
    """The alarm text when a threshold is crossed, else ``None``.

    ``"epoch N: rankme*=…, stable_rank=… (rank collapse)"``,
    ``"epoch N: mean_cosine 0.99 > 0.97 (direction collapse)"``, or both joined by ``"; "``.
    Non-finite ranks (e.g. all-zero embeddings give NaN) count as rank collapse; the direction
    check needs a finite ``mean_cosine`` in ``diag`` (absent: not checked).
    """
    rm = float(diag["rankme_normalized"])
    sr = float(diag["stable_rank"])
    low_rm = thresholds.rankme_normalized is not None and not rm >= thresholds.rankme_normalized
    low_sr = thresholds.stable_rank is not None and not sr >= thresholds.stable_rank
    reasons = []
    if low_rm or low_sr:
        reasons.append(f"rankme*={rm:.4g}, stable_rank={sr:.4g} (rank collapse)")
    mc = float(diag.get("mean_cosine", math.nan))
    if thresholds.mean_cosine is not None and math.isfinite(mc) and mc > thresholds.mean_cosine:
        reasons.append(f"mean_cosine {mc:.4g} > {thresholds.mean_cosine:g} (direction collapse)")
    if not reasons:
        return None
    return f"epoch {epoch}: " + "; ".join(reasons)


@dataclass
class MonitorResult:
    """One measurement: the diagnostics of the subset and the alarm text (``None`` if healthy)."""

    epoch: int
    diagnostics: dict[str, float]
    alarm: str | None


class DiagnosticsMonitor:
    """Runs the diagnostics every ``every`` epochs on a fixed seeded subset of embedding rows.

    Args:
        embed: ``embed(model) -> (N, D)`` embeddings, computed in eval mode under
            ``torch.no_grad()`` (the train task passes the run's configured extraction).
        diagnose: ``diagnose(z, reference=...) -> {name: value}``, the diagnostics suite
            (:func:`~graphssl.evaluation.diagnostics.embedding_diagnostics`); it must report
            ``rankme_normalized`` and ``stable_rank`` for the rank check, and
            ``mean_cosine`` for the direction check.
        every: measure at epochs ``0, every, 2·every, …``; ``None`` never (default: ``None``).
        subset: rows measured, drawn once from ``seed``; ``None`` all rows (default: ``2048``).
        seed: seed of the subset (default: ``0``).
        thresholds: collapse thresholds (default: :class:`CollapseThresholds`).
        reference: the reference formulas of the metrics' original authors (default: ``False``).
    """

    def __init__(
        self,
        embed: EmbedFn,
        diagnose: DiagnoseFn,
        every: int | None = None,
        subset: int | None = 2048,
        seed: int = 0,
        thresholds: CollapseThresholds | None = None,
        reference: bool = False,
    ) -> None:
        if every is not None and every < 1:
            raise ValueError(f"callbacks.monitor.every must be >= 1 or null, got {every}")
        if subset is not None and subset < 1:
            raise ValueError(f"callbacks.monitor.subset must be >= 1 or null, got {subset}")
        self.embed = embed
        self.diagnose = diagnose
        self.every = every
        self.subset = subset
        self.seed = int(seed)
        self.thresholds = thresholds or CollapseThresholds()
        self.reference = reference
        self._rows: Tensor | None = None

    def due(self, epoch: int) -> bool:
        """Whether ``epoch`` (0-based) is measured."""
        return self.every is not None and epoch % self.every == 0

    def rows(self, num_rows: int) -> Tensor:
        """The measured row ids; drawn on first use and fixed afterwards."""
        if self._rows is None or (self._rows.numel() and int(self._rows.max()) >= num_rows):
            self._rows = select_subset(num_rows, self.subset, self.seed)
        return self._rows

    def measure(self, model: nn.Module, epoch: int) -> MonitorResult:
        """Diagnostics of ``embed(model)`` on the subset, and the collapse check; leaves the
        global generators untouched."""
        rng = capture_rng()  # a sampled extraction must not shift the training's generators
        try:
            with torch.no_grad():
                z = self.embed(model).detach()
        finally:
            restore_rng(rng)
        if z.ndim != 2:
            raise ValueError(
                f"embed(model) must return an (N, D) matrix, got shape {tuple(z.shape)}"
            )
        z = z.cpu()[self.rows(z.shape[0])]
        finite = torch.isfinite(z).all(dim=1)
        if bool(finite.any()):
            diag = dict(self.diagnose(z[finite], reference=self.reference))
        else:  # nothing measurable: report NaN, which the collapse check treats as collapse
            diag = {"rankme_normalized": math.nan, "stable_rank": math.nan}
        if not bool(finite.all()):  # only then, so reports do not see a constant column
            diag["nonfinite_rows"] = float((~finite).sum())
        return MonitorResult(epoch, diag, collapse_message(diag, epoch, self.thresholds))

    def step(self, model: nn.Module, epoch: int) -> MonitorResult | None:
        """:meth:`measure` when ``epoch`` is due, else ``None``."""
        return self.measure(model, epoch) if self.due(epoch) else None


class DiagnosticsCallback(Callback):
    """Logs ``diag/<name>`` at the epochs :meth:`DiagnosticsMonitor.due` selects.

    Args:
        monitor: what to measure and when.
        sink: where the metrics and the alarm tag go.
    """

    def __init__(self, monitor: DiagnosticsMonitor, sink: MetricSink) -> None:
        self.monitor = monitor
        self.sink = sink
        self.alarm: str | None = None
        #: whether the latest measurement failed a check
        self.collapsed = False

    def on_epoch_end(self, trainer: Trainer, method: Any, result: EpochResult) -> None:
        res = self.monitor.step(method, result.epoch)
        if res is None:
            return
        self.sink.log_metrics(
            {f"diag/{k}": v for k, v in res.diagnostics.items()}, step=result.epoch
        )
        if res.alarm is not None and not self.collapsed:
            self.collapsed = True
            tags = {COLLAPSE_STATE_TAG: f"collapsed at epoch {res.epoch}"}
            if self.alarm is None:
                self.alarm = res.alarm
                tags[COLLAPSE_TAG] = res.alarm
            log.warning(
                "embedding collapse suspected at %s (thresholds: %s)",
                res.alarm,
                self.monitor.thresholds,
            )
            self.sink.set_tags(tags)
        elif res.alarm is None and self.collapsed:
            self.collapsed = False
            log.info("embeddings recovered from the collapse at epoch %d", res.epoch)
            self.sink.set_tags({COLLAPSE_STATE_TAG: f"recovered at epoch {res.epoch}"})


def diagnostics_monitor(
    *,
    embed: EmbedFn,
    diagnose: DiagnoseFn,
    sink: MetricSink,
    every: int | None,
    subset: int | None = 2048,
    seed: int = 0,
    thresholds: Mapping[str, float | None] | CollapseThresholds | None = None,
    reference: bool = False,
) -> DiagnosticsCallback:
    """The ``monitor`` entry of ``conf/callbacks/``: a :class:`DiagnosticsCallback` on a new
    :class:`DiagnosticsMonitor` (arguments as there; ``thresholds`` may be a mapping of
    :class:`CollapseThresholds` fields, as ``callbacks.monitor.thresholds``)."""
    if thresholds is not None and not isinstance(thresholds, CollapseThresholds):
        thresholds = CollapseThresholds(**{str(k): v for k, v in dict(thresholds).items()})
    monitor = DiagnosticsMonitor(
        embed,
        diagnose,
        every=every,
        subset=subset,
        seed=int(seed),
        thresholds=thresholds,
        reference=bool(reference),
    )
    return DiagnosticsCallback(monitor, sink)
