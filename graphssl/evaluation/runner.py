"""Run the configured probes and diagnostics on extracted embeddings.

Consumes tensors only (embeddings, labels, splits) and returns flat metric dicts keyed as the
rest of graphssl logs them: ``probe/<probe>/<split>_<metric>`` and ``diag/<name>``. A seeded
row cap (``max_rows``) bounds the probes' cost on large graphs: each split is subsampled
uniformly, every class keeping at least one row.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from graphssl.evaluation._checks import as_index
from graphssl.evaluation.aggregate import mean_std
from graphssl.evaluation.diagnostics import embedding_diagnostics
from graphssl.evaluation.probe import SPLITS
from graphssl.evaluation.subsample import cap_rows, check_max_rows, row_generator
from graphssl.progress import stage
from graphssl.utils import ProbeLike, SplitLike

__all__ = [
    "DEFAULT_FIGURE_MAX_ROWS",
    "cap_splits",
    "evaluation_settings",
    "run_diagnostics",
    "run_probes",
]

#: Rows of the spectrum figure when ``eval.figure_max_rows`` is not set.
DEFAULT_FIGURE_MAX_ROWS = 100_000

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Split:
    """Row indices of one train/val/test split."""

    train: Tensor
    val: Tensor
    test: Tensor


def evaluation_settings(eval_cfg: Mapping[str, Any]) -> dict[str, int | None]:
    """The validated row caps of an ``eval`` config section.

    Returns:
        ``max_rows`` (rows per split for the probes, ``None``: every row; pass it to
        :func:`run_probes`) and ``figure_max_rows`` (rows of the spectrum figure: the smaller
        of ``eval.figure_max_rows``, default :data:`DEFAULT_FIGURE_MAX_ROWS`, and
        ``eval.max_rows``; pass it to :func:`~graphssl.evaluation.plots.spectrum_figure`).
    """
    max_rows = check_max_rows(eval_cfg.get("max_rows"), "eval.max_rows")
    figure = check_max_rows(
        eval_cfg.get("figure_max_rows", DEFAULT_FIGURE_MAX_ROWS), "eval.figure_max_rows"
    )
    if max_rows is not None:
        figure = max_rows if figure is None else min(figure, max_rows)
    return {"max_rows": max_rows, "figure_max_rows": figure}


def cap_splits(
    splits: Sequence[SplitLike],
    n: int,
    labels: Tensor | np.ndarray | None,
    max_rows: int,
    seed: int,
) -> tuple[list[Split], bool]:
    """Every split's train/val/test rows capped at ``max_rows`` by one seeded draw each
    (:func:`~graphssl.evaluation.subsample.cap_rows`, in split order), and whether any was
    capped. Logs a warning naming the rows kept per split when rows were dropped."""
    gen = row_generator(seed)
    y = None if labels is None else torch.as_tensor(labels).cpu()
    out: list[Split] = []
    kept: list[str] = []
    added = 0
    any_capped = False
    for i, split in enumerate(splits):
        parts = {}
        for name in SPLITS:
            idx = as_index(torch.as_tensor(getattr(split, name)), n, name=f"{name} split")
            device = idx.device
            capped = cap_rows(idx.cpu(), max_rows, gen, y)
            parts[name] = capped.rows.to(device)
            any_capped |= capped.capped
            added += capped.added
            if i == 0:
                kept.append(f"{name} {capped.rows.numel()} of {idx.numel()}")
        out.append(Split(**parts))
    if any_capped:
        log.warning(
            "eval.max_rows=%d: the probes use a seeded subsample (seed %d) of %s rows%s%s",
            max_rows,
            seed,
            ", ".join(kept),
            f" (first of {len(out)} splits)" if len(out) > 1 else "",
            f"; {added} rows added so that every class keeps one" if added else "",
        )
    return out, any_capped


def _compact(
    embeddings: Tensor, labels: Tensor | np.ndarray, splits: list[Split]
) -> tuple[Tensor, Tensor, list[Split]]:
    """Only the rows some split uses, with the splits' indices renumbered into them."""
    union = torch.unique(torch.cat([getattr(s, name).cpu() for s in splits for name in SPLITS]))
    x = torch.as_tensor(embeddings)
    y = torch.as_tensor(labels)
    if union.numel() == x.shape[0]:
        return x, y, splits

    def renumber(idx: Tensor) -> Tensor:
        return torch.searchsorted(union, idx.cpu()).to(idx.device)

    return (
        x[union.to(x.device)],
        y[union.to(y.device)],
        [Split(*(renumber(getattr(s, name)) for name in SPLITS)) for s in splits],
    )


def run_probes(
    embeddings: Tensor,
    labels: Tensor | None,
    splits: Sequence[SplitLike],
    probes: Mapping[str, ProbeLike],
    *,
    max_rows: int | None = None,
    seed: int = 0,
) -> dict[str, float]:
    """Evaluate every probe on every split; several splits give ``<metric>`` (mean) and
    ``<metric>_std``, and for the keys a probe lists in ``per_split_keys`` (the
    hyperparameters it selects on each split) also every split's value, ``<key>_fold<i>``.

    Args:
        embeddings: ``[N, D]`` embeddings (float32 is kept as is).
        labels: one label per row, or ``None`` (then ``probes`` must be empty).
        splits: objects with ``train``, ``val`` and ``test`` masks or index tensors.
        probes: ``{name: probe}``, each with ``evaluate(z, y, train, val, test)``.
        max_rows: at most this many rows of each split (train, val and test separately), drawn
            uniformly with a generator seeded by ``seed``; every class of a split keeps at least
            one row. Logged as ``eval/max_rows``, with a warning naming the rows kept; ``None``
            (default) uses every row.
        seed: seed of the row draw (the run's seed).

    Raises:
        ValueError: when there are probes but no labels or no splits, or ``max_rows`` is not a
            positive integer.
    """
    max_rows = check_max_rows(max_rows, "eval.max_rows")
    if not probes:
        return {}
    if labels is None:
        raise ValueError(
            f"probes {sorted(probes)} need labels, but the dataset has none; expected a dataset "
            f"with a 'y' attribute, or set eval.probes={{}} to run diagnostics only"
        )
    if not splits:
        raise ValueError("probes need at least one train/val/test split; the dataset has none")
    out: dict[str, float] = {}
    if max_rows is not None:
        capped, any_capped = cap_splits(splits, int(embeddings.shape[0]), labels, max_rows, seed)
        if any_capped:
            embeddings, labels, splits = _compact(embeddings, labels, capped)
        out["eval/max_rows"] = float(max_rows)
    with stage("probes", total=len(probes) * len(splits)) as progress:
        for name, probe in probes.items():
            results = []
            for s in splits:
                progress.advance(0, what=name)
                results.append(probe.evaluate(embeddings, labels, s.train, s.val, s.test))
                progress.advance()
            out.update(_summary(name, probe, results))
    return out


def _summary(name: str, probe: Any, results: list[Any]) -> dict[str, float]:
    """``probe/<name>/<metric>`` of one probe over its splits (mean and std when several)."""
    summary = (
        mean_std(results)
        if len(results) > 1
        else {k: float(v) for k, v in results[0].items() if isinstance(v, (int, float, bool))}
    )
    if len(results) > 1:
        summary["num_splits"] = float(len(results))
        # what each split selected, where the probe selects per split (Probe.per_split_keys)
        for key in getattr(probe, "per_split_keys", ()):
            for i, result in enumerate(results):
                if isinstance(result.get(key), (int, float)):
                    summary[f"{key}_fold{i}"] = float(result[key])
    return {f"probe/{name}/{k}": v for k, v in summary.items()}


def run_diagnostics(embeddings: Tensor, *, reference: bool = False) -> dict[str, float]:
    """The whole diagnostics suite as ``diag/<name>``."""
    diags = embedding_diagnostics(embeddings, reference=reference)
    return {f"diag/{k}": float(v) for k, v in diags.items()}
