"""The inner cross-validation that the probes selecting by it share (``SVCProbe``,
``CVLogRegProbe``, ``LogRegProbe(selection="cv")``): argument checks, the stratified, seeded
inner folds and a grid search over them."""

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


def inner_fold_count(y: torch.Tensor, inner_folds: int, probe: str) -> int:
    """The inner folds a stratified cross-validation of class ids ``y`` can have:
    ``inner_folds``, fewer when the rarest class has fewer rows.

    Raises:
        ValueError: a class of ``y`` has a single row (no two folds can hold it).
    """
    _, encoded = encode_classes(y)
    smallest = int(torch.bincount(encoded).min())
    folds = min(inner_folds, smallest)
    if folds < 2:
        raise ValueError(
            f"{probe} needs at least 2 training rows of every class for its inner "
            f"cross-validation; the rarest class has {smallest}"
        )
    return folds


def stratified_folds(
    y: torch.Tensor, *, inner_folds: int, seed: int, probe: str
) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(train, held_out)`` positions into ``y`` of a stratified, shuffled k-fold split seeded
    by ``seed`` (scikit-learn's ``StratifiedKFold``, the folds :func:`stratified_grid_search`
    uses), with :func:`inner_fold_count` folds."""
    from sklearn.model_selection import StratifiedKFold

    folds = inner_fold_count(y, inner_folds, probe)
    labels = y.cpu().numpy()
    cv = StratifiedKFold(folds, shuffle=True, random_state=seed)
    return list(cv.split(np.zeros((labels.shape[0], 1)), labels))


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

    folds = inner_fold_count(y, inner_folds, probe)
    search = GridSearchCV(
        estimator,
        param_grid,
        cv=StratifiedKFold(folds, shuffle=True, random_state=seed),
        scoring="accuracy",
        n_jobs=1,
    )
    return search.fit(x, y.cpu().numpy())
