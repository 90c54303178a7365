"""A row's spread split into the seeds that caused it: a main-effects analysis of variance over
the pretraining seed, the dataset split's seed and the probe's seed."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["VarianceSplit", "variance_split"]


@dataclass(frozen=True)
class VarianceSplit:
    """The spread of ``n`` values split into the seeds that caused it.

    ``total`` is the variance (``ddof=0``) of the values; ``components[factor]`` the variance of
    that factor's level means (each level weighted by its runs: the factor's sum of squares over
    ``n``), ``residual`` what the factors' main effects leave (interactions and anything not
    seeded by them). In a balanced crossed design (every combination of the factors' levels
    equally often) the components and the residual add up to ``total``; ``balanced`` says
    whether the runs form one. Factors whose levels split the runs identically are confounded
    and appear as one component named ``a = b``; a factor the runs do not carry, or that is
    constant over them, is named in ``notes``.
    """

    n: int
    total: float
    components: dict[str, float]
    residual: float
    balanced: bool
    notes: tuple[str, ...] = ()

    def share(self, name: str) -> float:
        """``components[name]`` (or ``"residual"``) as a fraction of ``total``."""
        value = self.residual if name == "residual" else self.components[name]
        return value / self.total if self.total > 0 else math.nan


def _partition(levels: Sequence[Any]) -> tuple[int, ...]:
    """The runs' level indices in order of first appearance (equal partitions compare equal)."""
    first: dict[str, int] = {}
    return tuple(first.setdefault(str(v), len(first)) for v in levels)


def variance_split(values: Sequence[float], factors: Mapping[str, Sequence[Any]]) -> VarianceSplit:
    """Split the variance of ``values`` into the main effects of ``factors``.

    Args:
        values: one value per run.
        factors: ``{name: the level of each run}`` (e.g. ``{"pretraining": [0, 0, 1, 1], ...}``);
            a factor with a ``None`` level is not carried by every run and is left out.

    Returns:
        a :class:`VarianceSplit`.

    Raises:
        ValueError: a factor does not give one level per value.
    """
    y = np.asarray(values, dtype=np.float64)
    n = int(y.size)
    mean = float(y.mean()) if n else math.nan
    total = float(((y - mean) ** 2).mean()) if n else math.nan
    notes: list[str] = []
    used: dict[str, tuple[int, ...]] = {}
    for name, levels in factors.items():
        if len(levels) != n:
            raise ValueError(f"factor {name!r} gives {len(levels)} levels for {n} values")
        if any(v is None for v in levels):
            some = any(v is not None for v in levels)
            notes.append(f"{name}: not carried by {'every run' if some else 'the runs'}")
            continue
        part = _partition(levels)
        if len(set(part)) < 2:
            notes.append(f"{name}: constant over the runs")
            continue
        same = next((k for k, p in used.items() if p == part), None)
        if same is not None:  # confounded: one component for both
            used[f"{same} = {name}"] = used.pop(same)
            continue
        used[name] = part
    notes += [
        f"{', '.join(name.split(' = '))} are confounded (their levels split the runs alike): "
        "one component"
        for name in used
        if " = " in name
    ]
    components: dict[str, float] = {}
    for name, part in used.items():
        idx = np.asarray(part)
        ss = 0.0
        for level in set(part):
            members = y[idx == level]
            ss += members.size * (float(members.mean()) - mean) ** 2
        components[name] = ss / n
    balanced = True
    if used:
        parts = list(used.values())
        cells: dict[tuple[int, ...], int] = {}
        for i in range(n):
            key = tuple(p[i] for p in parts)
            cells[key] = cells.get(key, 0) + 1
        expected = math.prod(len(set(p)) for p in parts)
        balanced = len(cells) == expected and len(set(cells.values())) == 1
        if not balanced:
            notes.append("unbalanced design: the components need not add up to the total")
    residual = total - sum(components.values())
    return VarianceSplit(n, total, components, residual, balanced, tuple(notes))
