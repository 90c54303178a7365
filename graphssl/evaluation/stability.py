"""How many rows does a diagnostic need? Subsampling stability (§4.1.2, Table 1 of the paper).

Tsitsulin, Munkhoeva & Perozzi (2023, https://arxiv.org/abs/2305.16562) measure every
diagnostic on random row subsets ``X_b`` (without replacement) of a large embedding matrix
``X`` and report the approximation ratio ``q = metric(X_b) / metric(X)``. Here, per diagnostic
and batch size ``b``:

* ``q`` for ``repeats`` seeded subsets of every source matrix; ``q̄`` is their mean per source;
* a factor ``f`` (0.5/0.7/0.9/0.95) is *reached* at the smallest ``b`` from which on (for every
  larger ``b`` of the grid too) every source has ``min(q̄, 1/q̄) ≥ f`` — so an over-estimate by
  ``1/f`` counts as far off as an under-estimate by ``f``; ``—`` when no ``b < N`` reaches it;
* *bounded* is the fraction of all ``q ≤ 1`` (✓ = all, ❀ ≥ 90 %, ✗ otherwise).

Batch sizes ``b ≥ N`` are left out (there ``X_b`` is ``X`` up to row order, ``q = 1``).
Everything here takes tensors; loading runs and logging is :mod:`graphssl.tasks.stability`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from graphssl.evaluation.diagnostics import embedding_diagnostics

__all__ = [
    "DEFAULT_BATCH_SIZES",
    "DEFAULT_FACTORS",
    "METRIC_LABELS",
    "StabilityResult",
    "generated_embeddings",
    "markdown_table",
    "stability_study",
]

#: ``2^7 … 2^16`` as in the paper's Table 1.
DEFAULT_BATCH_SIZES: tuple[int, ...] = tuple(2**k for k in range(7, 17))
DEFAULT_FACTORS: tuple[float, ...] = (0.5, 0.7, 0.9, 0.95)
#: Row labels in the paper's order; SelfCluster and the centred RankMe are extra rows.
METRIC_LABELS: dict[str, str] = {
    "alpha_req": "α-ReQ",
    "nesum": "NESum",
    "rankme": "RankMe",
    "stable_rank": "Stable rank",
    "condition_number": "Cond. number",
    "coherence": "Coherence",
    "effective_rank": "Effective rank",
    "self_cluster": "SelfCluster",
}


def generated_embeddings(num_rows: int, dim: int, decay: float = 1.0, seed: int = 0) -> Tensor:
    """A Gaussian ``(num_rows, dim)`` matrix with power-law spectrum ``σ_i ∝ i^(-decay)``.

    Rows are i.i.d. ``N(0, Q diag(s²) Qᵀ)`` with a random rotation ``Q``: a stand-in for real
    embeddings in tests and demos.
    """
    if num_rows < 1 or dim < 1:
        raise ValueError(f"num_rows and dim must be >= 1, got {num_rows} and {dim}")
    g = torch.Generator().manual_seed(int(seed))
    s = torch.arange(1, dim + 1, dtype=torch.float64).pow(-float(decay))
    q, _ = torch.linalg.qr(torch.randn(dim, dim, generator=g, dtype=torch.float64))
    z = torch.randn(num_rows, dim, generator=g, dtype=torch.float64) * s
    return (z @ q.T).float()


@dataclass
class StabilityResult:
    """Ratios of one study.

    Attributes:
        metrics: diagnostic names, in table order.
        batch_sizes: the ``b`` grid actually used (all ``< N`` of the smallest source).
        ratios: ``ratios[metric][b]`` → ``(sources, repeats)`` array of ``q``.
        full: ``full[metric]`` → the value on each full source matrix.
        factors: the factors of the table.
    """

    metrics: list[str]
    batch_sizes: list[int]
    ratios: dict[str, dict[int, np.ndarray]]
    full: dict[str, list[float]]
    factors: tuple[float, ...] = DEFAULT_FACTORS
    sources: list[str] = field(default_factory=list)

    def mean_ratio(self, metric: str, b: int) -> np.ndarray:
        """``q̄`` per source ``(sources,)`` (NaN-ignoring mean over repeats)."""
        with np.errstate(invalid="ignore"):
            return np.nanmean(self.ratios[metric][b], axis=1)

    def bounded_fraction(self, metric: str, tol: float = 1e-9) -> float:
        """Fraction of finite ``q`` that are ``≤ 1`` (NaN when there is none)."""
        q = np.concatenate([a.ravel() for a in self.ratios[metric].values()])
        q = q[np.isfinite(q)]
        return float(np.mean(q <= 1 + tol)) if q.size else math.nan

    def reached_at(self, metric: str, factor: float) -> int | None:
        """Smallest ``b`` from which on ``min(q̄, 1/q̄) ≥ factor`` for every source."""
        best: int | None = None
        for b in reversed(self.batch_sizes):
            qbar = self.mean_ratio(metric, b)
            with np.errstate(divide="ignore", invalid="ignore"):
                quality = np.minimum(qbar, 1.0 / qbar)
            if not (np.all(np.isfinite(quality)) and np.all(quality >= factor)):
                break
            best = b
        return best

    def table_rows(self) -> list[dict[str, object]]:
        """One row per metric: ``metric``, ``bounded`` (fraction) and ``b`` per factor."""
        return [
            {
                "metric": m,
                "bounded": self.bounded_fraction(m),
                **{f"{f:g}": self.reached_at(m, f) for f in self.factors},
            }
            for m in self.metrics
        ]


def stability_study(
    sources: Mapping[str, Tensor] | Sequence[Tensor],
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    repeats: int = 10,
    seed: int = 0,
    metrics: Sequence[str] | None = None,
    reference: bool = False,
    factors: Sequence[float] = DEFAULT_FACTORS,
) -> StabilityResult:
    """Ratios ``q = metric(X_b) / metric(X)`` over random row subsets of each source.

    Args:
        sources: ``(N_i, D_i)`` embedding matrices (a mapping names them).
        batch_sizes: subset sizes; those ``≥ N`` of the smallest source are dropped.
        repeats: subsets per (source, ``b``), drawn with a generator seeded from ``seed``.
        seed: seed of the subsets.
        metrics: keys of :func:`embedding_diagnostics` (default: :data:`METRIC_LABELS`).
        reference: the reference formulas of the metrics' original authors.
        factors: the table's factors.

    Returns:
        A :class:`StabilityResult`.
    """
    named = (
        dict(sources)
        if isinstance(sources, Mapping)
        else {f"source{i}": z for i, z in enumerate(sources)}
    )
    if not named:
        raise ValueError("stability_study needs at least one embedding matrix")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for name, z in named.items():
        if z.ndim != 2 or z.shape[0] < 2:
            raise ValueError(
                f"source {name!r}: expected an (N, D) matrix with N >= 2, got shape "
                f"{tuple(z.shape)}"
            )
    metrics = list(metrics) if metrics is not None else list(METRIC_LABELS)
    n_min = min(int(z.shape[0]) for z in named.values())
    sizes = sorted({int(b) for b in batch_sizes if 1 < int(b) < n_min})
    if not sizes:
        raise ValueError(
            f"no batch size in {list(batch_sizes)} is below the smallest source's "
            f"{n_min} rows; expected some 1 < b < N"
        )
    ratios: dict[str, dict[int, np.ndarray]] = {
        m: {b: np.full((len(named), repeats), math.nan) for b in sizes} for m in metrics
    }
    full: dict[str, list[float]] = {m: [] for m in metrics}
    gen = torch.Generator().manual_seed(int(seed))
    for i, z in enumerate(named.values()):
        ref = embedding_diagnostics(z, reference=reference)
        unknown = [m for m in metrics if m not in ref]
        if unknown:
            raise ValueError(
                f"unknown diagnostics {unknown}; expected keys of "
                f"embedding_diagnostics: {sorted(ref)}"
            )
        for m in metrics:
            full[m].append(float(ref[m]))
        for b in sizes:
            for r in range(repeats):
                rows = torch.randperm(z.shape[0], generator=gen)[:b]
                sub = embedding_diagnostics(z[rows], reference=reference)
                for m in metrics:
                    with np.errstate(divide="ignore", invalid="ignore"):
                        ratios[m][b][i, r] = np.float64(sub[m]) / np.float64(ref[m])
    return StabilityResult(metrics, sizes, ratios, full, tuple(factors), list(named))


def _bounded_mark(frac: float) -> str:
    if math.isnan(frac):
        return "?"
    mark = "✓" if frac >= 1.0 else ("❀" if frac >= 0.9 else "✗")
    return f"{mark} ({100 * frac:.0f} %)"


def markdown_table(result: StabilityResult) -> str:
    """The paper's Table 1 layout: metric | Bounded | smallest ``b`` per factor (``—``: never)."""
    header = ["metric", "Bounded", *(f"{f:g}" for f in result.factors)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in result.table_rows():
        m = str(row["metric"])
        cells = [METRIC_LABELS.get(m, m), _bounded_mark(float(row["bounded"]))]  # type: ignore[arg-type]
        cells += ["—" if row[f"{f:g}"] is None else str(row[f"{f:g}"]) for f in result.factors]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
