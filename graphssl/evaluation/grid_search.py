"""The inner cross-validation that the papers' scikit-learn probes share (``SVCProbe``,
``CVLogRegProbe``): argument checks and a stratified, seeded grid search."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from graphssl.evaluation.probe_inputs import encode_classes


def positive_grid(values: Sequence[float], name: str = "C") -> list[float]:
    """``values`` as floats; a non-empty list of finite positive numbers or a ValueError."""
    grid = [float(v) for v in values]
    if not grid or any(not (v > 0 and np.isfinite(v)) for v in grid):
        raise ValueError(
            f"{name} must be a non-empty list of positive numbers, got {list(values)!r}"
        )
    return grid


def check_inner_folds(inner_folds: object) -> int:
    """``inner_folds`` when it is an integer >= 2, else a ValueError naming it."""
    if isinstance(inner_folds, bool) or not isinstance(inner_folds, int) or inner_folds < 2:
        raise ValueError(f"inner_folds must be an integer >= 2, got {inner_folds!r}")
    return inner_folds


def stratified_grid_search(
    estimator: Any,
    param_grid: dict[str, list[float]],
    x: np.ndarray,
    y: torch.Tensor,
    *,
    inner_folds: int,
    seed: int,
    probe: str,
) -> Any:
    """Fit a ``GridSearchCV`` scored by accuracy over stratified, shuffled folds seeded by
    ``seed``: ``inner_folds`` of them, fewer when the rarest class of ``y`` has fewer rows.

    Raises:
        ValueError: a class of ``y`` has a single row (no two folds can hold it).
    """
    from sklearn.model_selection import GridSearchCV, StratifiedKFold

    _, encoded = encode_classes(y)
    smallest = int(torch.bincount(encoded).min())
    folds = min(inner_folds, smallest)
    if folds < 2:
        raise ValueError(
            f"{probe} needs at least 2 training rows of every class for its inner "
            f"cross-validation; the rarest class has {smallest}"
        )
    search = GridSearchCV(
        estimator,
        param_grid,
        cv=StratifiedKFold(folds, shuffle=True, random_state=seed),
        scoring="accuracy",
        n_jobs=1,
    )
    return search.fit(x, y.cpu().numpy())
