"""Aggregation of probe results over several splits or seeds (mean and standard deviation)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["mean_std"]


def _as_number(value: Any) -> float | None:
    """A float for numbers, bools (as 0/1), numpy scalars and one-element tensors; else None."""
    if isinstance(value, (bool, numbers.Real)):
        return float(value)
    if hasattr(value, "numel") and hasattr(value, "item") and value.numel() == 1:
        item = value.item()  # torch.Tensor / numpy array with one element
        return float(item) if isinstance(item, (bool, numbers.Real)) else None
    return None


def mean_std(results: Sequence[Mapping[str, Any]], *, ddof: int = 0) -> dict[str, float]:
    """Mean and standard deviation of every numeric key over several probe results.

    Used when a probe runs over several splits or seeds: for each numeric key ``m`` the output
    has ``m`` (the mean) and ``m_std``. Booleans count as 0/1, so ``converged`` becomes the
    fraction of converged runs. Non-numeric values (strings, lists) are skipped; NaN
    propagates.

    Args:
        results: one dict per run, e.g. the outputs of ``LogRegProbe.evaluate``.
        ddof: delta degrees of freedom of the standard deviation (default: ``0``, the
            population std of ``numpy.std``; ``1`` for the sample std).

    Raises:
        ValueError: for no results, a numeric key missing from some runs, or a key ``m_std``
            that would collide with the std of ``m``.

    Example:
        >>> mean_std([{"test_acc": 0.5, "converged": True}, {"test_acc": 1.0, "converged": False}])
        {'test_acc': 0.75, 'test_acc_std': 0.25, 'converged': 0.5, 'converged_std': 0.5}
    """
    if isinstance(results, Mapping) or not len(results):
        raise ValueError(
            f"results must be a non-empty sequence of dicts (one per run), got {results!r}"
        )
    if ddof < 0 or ddof >= len(results):
        raise ValueError(
            f"ddof must be in [0, {len(results) - 1}] for {len(results)} runs, got {ddof}"
        )
    keys: list[str] = []
    for run in results:
        for key, value in run.items():
            if key not in keys and _as_number(value) is not None:
                keys.append(key)
    out: dict[str, float] = {}
    for key in keys:
        missing = [i for i, run in enumerate(results) if key not in run]
        if missing:
            raise ValueError(
                f"key {key!r} is missing from runs {missing} of {len(results)}; expected every "
                f"run to report the same metrics"
            )
        values = [_as_number(run[key]) for run in results]
        if any(v is None for v in values):
            raise ValueError(
                f"key {key!r} is numeric in some runs but not in others: "
                f"{[run[key] for run in results]!r}"
            )
        numbers_ = [float(v) for v in values if v is not None]
        mean = math.fsum(numbers_) / len(numbers_)
        var = math.fsum((v - mean) ** 2 for v in numbers_) / (len(numbers_) - ddof)
        for name, value in ((key, mean), (f"{key}_std", math.sqrt(var))):
            if name in out:
                raise ValueError(f"key {name!r} is both a metric and the std of another")
            out[name] = value
    return out
