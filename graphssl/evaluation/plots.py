"""Figures of an embedding matrix: singular-value spectrum with the α-ReQ fit, 2-D projection.

Both draw on a seeded subsample of the rows of a large matrix (``max_rows``, ``max_points``)
and never copy the whole matrix to float64: the spectrum comes from the diagnostics' chunked
float64 decomposition, the projection casts only its sampled rows.

Each figure is two steps: its numbers (:func:`spectrum_data`, :func:`projection_data`: torch
and NumPy on the calling thread, under its thread budget) and its drawing
(:func:`draw_spectrum`, :func:`draw_projection`: Matplotlib's object API on an Agg canvas, no
``pyplot`` state), so :class:`BackgroundFigures` can draw and encode them on a thread of their
own while the caller goes on.
"""

from __future__ import annotations

import io
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from graphssl.evaluation.diagnostics.spectral import analyze
from graphssl.evaluation.subsample import check_max_rows, row_generator

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "SPECTRUM_MAX_ROWS",
    "BackgroundFigures",
    "ProjectionData",
    "SpectrumData",
    "draw_projection",
    "draw_spectrum",
    "png_bytes",
    "principal_coordinates",
    "projection_data",
    "projection_figure",
    "spectrum_data",
    "spectrum_figure",
]


def _figure(width: float = 5.0, height: float = 4.0) -> Figure:
    """A figure on its own Agg canvas: drawn and saved without ``pyplot`` or the global
    backend, so from any one thread."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


#: Rows the spectrum figure uses by default: a seeded uniform subsample above this.
SPECTRUM_MAX_ROWS = 100_000


def _float_rows(embeddings: Tensor) -> Tensor:
    z = embeddings.detach()
    return z if z.dtype in (torch.float32, torch.float64) else z.float()


def _titled(ax: Any, what: str, title: str | None) -> None:
    """``what`` as the axes title, under ``title`` (e.g. method, dataset and run name)."""
    ax.set_title(f"{title}\n{what}" if title else what, fontsize=9 if title else None)


@dataclass(frozen=True)
class SpectrumData:
    """What the spectrum figure draws.

    Attributes:
        eigenvalues: the covariance's positive eigenvalues (σᵢ² of the centred rows),
            largest first.
        rows: rows of the embedding matrix.
        dim: its columns.
        sampled: rows the spectrum was computed on (``rows`` when not subsampled).
    """

    eigenvalues: np.ndarray
    rows: int
    dim: int
    sampled: int


def spectrum_data(
    embeddings: Tensor, *, max_rows: int | None = SPECTRUM_MAX_ROWS, seed: int = 0
) -> SpectrumData:
    """The covariance spectrum of ``embeddings`` (of a seeded subsample of ``max_rows`` rows
    when it has more; ``None``: every row)."""
    max_rows = check_max_rows(max_rows)
    z = _float_rows(embeddings)
    n_all = z.shape[0]
    if max_rows is not None and n_all > max_rows:
        rows = torch.randperm(n_all, generator=row_generator(seed))[:max_rows].sort().values
        z = z[rows.to(z.device)]
    centered = analyze(z, centered=True).centered
    assert centered is not None
    sigma = centered.sigma.cpu().numpy()
    return SpectrumData(sigma[sigma > 0] ** 2, n_all, int(z.shape[1]), int(z.shape[0]))


def draw_spectrum(
    data: SpectrumData, fit_range: tuple[int, int] = (11, 100), title: str | None = None
) -> Figure:
    """:func:`spectrum_figure` of the numbers :func:`spectrum_data` computed."""
    lam = data.eigenvalues
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
    sample = f"; {data.sampled} sampled rows" if data.sampled < data.rows else ""
    _titled(ax, f"Embedding spectrum ({data.rows}×{data.dim}{sample})", title)
    ax.legend(loc="lower left", fontsize=8)
    return fig


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
    return draw_spectrum(spectrum_data(embeddings, max_rows=max_rows, seed=seed), fit_range, title)


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


@dataclass(frozen=True)
class ProjectionData:
    """What the projection figure draws: ``xy`` ``[M, 2]`` coordinates of the sampled rows and
    their class labels (``None`` when unlabelled, multi-label or continuous)."""

    xy: np.ndarray
    labels: np.ndarray | None


def projection_data(
    embeddings: Tensor, labels: Tensor | None, max_points: int = 5000, seed: int = 0
) -> ProjectionData:
    """The first two principal coordinates (:func:`principal_coordinates`) of a seeded
    subsample of ``max_points`` rows, with their labels."""
    z = embeddings.detach()
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randperm(z.shape[0], generator=gen)[:max_points]
    z = z[rows.to(z.device)].to(device="cpu", dtype=torch.float64)  # only the sampled rows
    z = z - z.mean(0, keepdim=True)
    if min(z.shape) >= 2:
        xy = principal_coordinates(z, 2).numpy()
    else:
        xy = np.c_[z.numpy()[:, :1], np.zeros(len(z))]
    y = None
    if labels is not None and labels.dim() == 1 and not labels.is_floating_point():
        y = labels[rows].numpy()
    return ProjectionData(xy, y)


def draw_projection(data: ProjectionData, title: str | None = None) -> Figure:
    """:func:`projection_figure` of the numbers :func:`projection_data` computed."""
    xy = data.xy
    fig = _figure()
    ax = fig.add_subplot()
    if data.labels is not None:
        y = data.labels
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


def projection_figure(
    embeddings: Tensor,
    labels: Tensor | None,
    max_points: int = 5000,
    seed: int = 0,
    title: str | None = None,
) -> Figure:
    """First two principal components of (a seeded subsample of) the embeddings, by label.

    ``title`` (e.g. ``"DGI on Cora · dgi-Cora"``) heads the figure when given."""
    return draw_projection(projection_data(embeddings, labels, max_points, seed), title)


def png_bytes(figure: Figure) -> bytes:
    """``figure`` saved as PNG (what ``figure.savefig("name.png")`` writes)."""
    buf = io.BytesIO()
    figure.savefig(buf, format="png")
    return buf.getvalue()


class BackgroundFigures:
    """Figures drawn and encoded as PNG on a thread of their own.

    Args:
        prepare: called at once on the calling thread: computes the figures' numbers and
            returns ``{artifact file: function drawing its figure}``. The functions are then
            called on a thread started at once (Matplotlib is imported there on first use),
            so they should close over the numbers only.

    :meth:`result` waits for the thread and returns the PNG bytes, or raises the exception
    that ``prepare`` or a drawing raised (the same object): a failing figure is reported where
    its result is asked for, as if the figures were drawn there.
    """

    def __init__(self, prepare: Callable[[], Mapping[str, Callable[[], Figure]]]) -> None:
        self._pngs: dict[str, bytes] = {}
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        t0 = time.perf_counter()
        try:
            draws = dict(prepare())
        except Exception as err:  # reported by result()
            self._error = err
        self._seconds = time.perf_counter() - t0
        if self._error is None:
            self._thread = threading.Thread(
                target=self._run, args=(draws,), name="graphssl-figures", daemon=True
            )
            self._thread.start()

    def _run(self, draws: Mapping[str, Callable[[], Figure]]) -> None:
        t0 = time.perf_counter()
        try:
            self._pngs = {name: png_bytes(draw()) for name, draw in draws.items()}
        except BaseException as err:  # reported by result()
            self._error = err
        finally:
            self._seconds += time.perf_counter() - t0

    def _join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    @property
    def seconds(self) -> float:
        """Seconds spent on the figures: their numbers on the calling thread plus the
        thread's own wall time (waits for the thread)."""
        self._join()
        return self._seconds

    def result(self) -> dict[str, bytes]:
        """``{artifact file: PNG bytes}``; waits for the thread and re-raises its exception."""
        self._join()
        if self._error is not None:
            raise self._error
        return dict(self._pngs)
