"""Embedding diagnostics during training, on a fixed seeded subset of rows, with a collapse alarm.

The pure logic behind :class:`graphssl.tracking.monitor.DiagnosticsCallback`: which epochs are
measured, which rows (drawn once with a seeded ``torch.Generator``), what
:func:`~graphssl.evaluation.diagnostics.embedding_diagnostics` says about them, and whether the
embeddings look collapsed. RankMe (Garrido et al., ICML 2023, https://arxiv.org/abs/2210.02885)
normalised by ``min(n, d)`` near 0, or a stable rank near 1, means the embeddings occupy (almost)
one direction. Nothing here logs to MLflow or imports :mod:`graphssl.methods`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from graphssl.evaluation.diagnostics import embedding_diagnostics

__all__ = [
    "CollapseThresholds",
    "DiagnosticsMonitor",
    "MonitorResult",
    "collapse_message",
    "select_subset",
]

#: ``embed(model) -> (N, D)``: the embeddings to measure (eval mode, no gradients).
EmbedFn = Callable[[nn.Module], Tensor]


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
        raise ValueError(f"eval.diag_subset must be >= 1 or null, got {size}")
    if size is None or size >= num_rows:
        return torch.arange(num_rows)
    gen = torch.Generator().manual_seed(int(seed))
    return torch.randperm(num_rows, generator=gen)[:size].sort().values


@dataclass(frozen=True)
class CollapseThresholds:
    """Alarm when ``rankme_normalized`` or ``stable_rank`` falls below these values.

    Args:
        rankme_normalized: RankMe / min(n, d) below this is collapse (default: ``0.01``).
        stable_rank: ``‖X‖_F² / σ₁²`` below this is collapse (default: ``1.5``).
    """

    rankme_normalized: float | None = 0.01
    stable_rank: float | None = 1.5


def collapse_message(
    diag: dict[str, float], epoch: int, thresholds: CollapseThresholds
) -> str | None:
    """``"epoch N: rankme*=…, stable_rank=…"`` when a threshold is crossed, else ``None``.

    Non-finite values (e.g. all-zero embeddings give NaN) count as collapse.
    """
    rm = float(diag["rankme_normalized"])
    sr = float(diag["stable_rank"])
    low_rm = thresholds.rankme_normalized is not None and not rm >= thresholds.rankme_normalized
    low_sr = thresholds.stable_rank is not None and not sr >= thresholds.stable_rank
    if not (low_rm or low_sr):
        return None
    return f"epoch {epoch}: rankme*={rm:.4g}, stable_rank={sr:.4g}"


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
            ``torch.no_grad()`` (e.g. :func:`~graphssl.evaluation.extraction.extract_embeddings`).
        every: measure at epochs ``0, every, 2·every, …``; ``None`` never (default: ``None``).
        subset: rows measured, drawn once from ``seed``; ``None`` all rows (default: ``2048``).
        seed: seed of the subset (default: ``0``).
        thresholds: collapse thresholds (default: :class:`CollapseThresholds`).
        reference: the S0 authors' reference formulas (metrics-spec §9) (default: ``False``).
    """

    def __init__(
        self,
        embed: EmbedFn,
        every: int | None = None,
        subset: int | None = 2048,
        seed: int = 0,
        thresholds: CollapseThresholds | None = None,
        reference: bool = False,
    ) -> None:
        if every is not None and every < 1:
            raise ValueError(f"eval.diag_every must be >= 1 or null, got {every}")
        if subset is not None and subset < 1:
            raise ValueError(f"eval.diag_subset must be >= 1 or null, got {subset}")
        self.embed = embed
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
        """Diagnostics of ``embed(model)`` on the subset, and the collapse check."""
        with torch.no_grad():
            z = self.embed(model).detach()
        if z.ndim != 2:
            raise ValueError(
                f"embed(model) must return an (N, D) matrix, got shape {tuple(z.shape)}"
            )
        z = z.cpu()[self.rows(z.shape[0])]
        finite = torch.isfinite(z).all(dim=1)
        if bool(finite.any()):
            diag = embedding_diagnostics(z[finite], reference=self.reference)
        else:  # nothing measurable: report NaN, which the collapse check treats as collapse
            diag = {"rankme_normalized": math.nan, "stable_rank": math.nan}
        if not bool(finite.all()):  # only then, so reports do not see a constant column
            diag["nonfinite_rows"] = float((~finite).sum())
        return MonitorResult(epoch, diag, collapse_message(diag, epoch, self.thresholds))

    def step(self, model: nn.Module, epoch: int) -> MonitorResult | None:
        """:meth:`measure` when ``epoch`` is due, else ``None``."""
        return self.measure(model, epoch) if self.due(epoch) else None
