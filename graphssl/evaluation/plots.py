"""Figures of an embedding matrix: singular-value spectrum with the α-ReQ fit, 2-D projection.

Both draw on a seeded subsample of the rows of a large matrix (``max_rows``, ``max_points``)
and never copy the whole matrix to float64: the spectrum comes from the diagnostics' chunked
float64 decomposition, the projection casts only its sampled rows.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from graphssl.evaluation.diagnostics.spectral import analyze
from graphssl.evaluation.subsample import check_max_rows, row_generator

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _figure(width: float = 5.0, height: float = 4.0) -> Figure:
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=110, layout="constrained")


#: Rows the spectrum figure uses by default: a seeded uniform subsample above this.
SPECTRUM_MAX_ROWS = 100_000


def _float_rows(embeddings: Tensor) -> Tensor:
    z = embeddings.detach()
    return z if z.dtype in (torch.float32, torch.float64) else z.float()


def _titled(ax: Any, what: str, title: str | None) -> None:
    """``what`` as the axes title, under ``title`` (e.g. method, dataset and run name)."""
    ax.set_title(f"{title}\n{what}" if title else what, fontsize=9 if title else None)


def spectrum_figure(
    embeddings: Tensor,
    fit_range: tuple[int, int] = (11, 100),
    title: str | None = None,
    *,
    max_rows: int | None = SPECTRUM_MAX_ROWS,
    seed: int = 0,
) -> Figure:
    """Eigenvalues of the covariance (σᵢ² of the centred matrix) on log-log axes, with the
    power-law fit ``λᵢ ∝ i^-α`` over ``fit_range`` (1-based ranks) that α-ReQ reports.

    Args:
        embeddings: ``[N, D]`` float tensor (float32 is not copied whole to float64).
        fit_range: 1-based ranks of the power-law fit (default: ``(11, 100)``).
        max_rows: draw on a seeded uniform subsample of this many rows when ``N`` is larger;
            ``None`` uses every row (default: :data:`SPECTRUM_MAX_ROWS`).
        seed: seed of the subsample (default: ``0``).

    ``title`` (e.g. ``"DGI on Cora · dgi-Cora"``) heads the figure when given.
    """
    max_rows = check_max_rows(max_rows)
    z = _float_rows(embeddings)
    n_all = z.shape[0]
    if max_rows is not None and n_all > max_rows:
        rows = torch.randperm(n_all, generator=row_generator(seed))[:max_rows].sort().values
        z = z[rows.to(z.device)]
    centered = analyze(z, centered=True).centered
    assert centered is not None
    sigma = centered.sigma.cpu().numpy()
    lam = sigma[sigma > 0] ** 2
    fig = _figure()
    ax = fig.add_subplot()
    ranks = np.arange(1, lam.size + 1)
    if lam.size:
        ax.loglog(ranks, lam / lam.sum(), ".", ms=3, label="eigenvalue (normalised)")
    lo, hi = fit_range[0], min(fit_range[1], lam.size)
    if hi - lo + 1 >= 3:
        i = np.arange(lo, hi + 1, dtype=float)
        y = np.log(lam[lo - 1 : hi] / lam.sum())
        w = 1.0 / i
        a = np.stack([-np.log(i), np.ones_like(i)], axis=1)
        coef = np.linalg.solve(a.T @ (w[:, None] * a), a.T @ (w * y))
        ax.loglog(i, np.exp(a @ coef), "-", lw=2, label=f"α-ReQ fit: α = {coef[0]:.3f}")
    ax.set_xlabel("rank i")
    ax.set_ylabel("λᵢ / Σλ")
    sample = f"; {z.shape[0]} sampled rows" if z.shape[0] < n_all else ""
    _titled(ax, f"Embedding spectrum ({n_all}×{z.shape[1]}{sample})", title)
    ax.legend(loc="lower left", fontsize=8)
    return fig


def principal_coordinates(z: Tensor, k: int = 2) -> Tensor:
    """The rows of the centred float64 matrix ``z`` ``[M, D]`` on its first ``k`` principal
    axes, ``[M, k]`` (``k ≤ min(M, D)``): ``z @ V[:, :k]`` of its thin SVD ``z = U S Vᵀ`` up to
    the sign of each column, from a symmetric eigendecomposition of the smaller of ``zᵀz``
    (``D × D``) and ``zzᵀ`` (``M × M``) instead of the whole SVD. Each column's entry of
    largest magnitude is positive, so the signs do not depend on the LAPACK routine."""
    m, d = z.shape
    if d <= m:
        _, vecs = torch.linalg.eigh(z.T @ z)  # eigenvalues ascending
        xy = z @ vecs[:, -k:].flip(1)
    else:  # zzᵀ = U S² Uᵀ and z V = U S
        vals, vecs = torch.linalg.eigh(z @ z.T)
        xy = vecs[:, -k:].flip(1) * vals[-k:].flip(0).clamp_min(0).sqrt()
    top = xy.abs().argmax(0)
    return xy * torch.where(xy[top, torch.arange(k)] < 0, -1.0, 1.0).to(xy.dtype)


def projection_figure(
    embeddings: Tensor,
    labels: Tensor | None,
    max_points: int = 5000,
    seed: int = 0,
    title: str | None = None,
) -> Figure:
    """First two principal components of (a seeded subsample of) the embeddings, by label.

    ``title`` (e.g. ``"DGI on Cora · dgi-Cora"``) heads the figure when given."""
    z = embeddings.detach()
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randperm(z.shape[0], generator=gen)[:max_points]
    z = z[rows.to(z.device)].to(device="cpu", dtype=torch.float64)  # only the sampled rows
    z = z - z.mean(0, keepdim=True)
    if min(z.shape) >= 2:
        xy = principal_coordinates(z, 2).numpy()
    else:
        xy = np.c_[z.numpy()[:, :1], np.zeros(len(z))]
    fig = _figure()
    ax = fig.add_subplot()
    if labels is not None and labels.dim() == 1 and not labels.is_floating_point():
        y = labels[rows].numpy()
        classes = np.unique(y)
        cmap = "tab10" if classes.size <= 10 else "tab20"
        sc = ax.scatter(xy[:, 0], xy[:, 1], c=y, s=4, cmap=cmap, alpha=0.8)
        if classes.size <= 20:
            handles, names = sc.legend_elements(num=None)  # type: ignore[arg-type]
            ax.legend(
                handles,
                names,
                fontsize=6,
                markerscale=0.8,
                loc="best",
                ncols=math.ceil(classes.size / 10),
            )
    else:
        ax.scatter(xy[:, 0], xy[:, 1], s=4, alpha=0.8)
    ax.set_xlabel("PC 1")
    ax.set_ylabel("PC 2")
    _titled(ax, "Embeddings: first two principal components", title)
    return fig
