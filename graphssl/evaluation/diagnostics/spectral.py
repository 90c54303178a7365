"""The spectral core of the diagnostics: validation, one pass over the rows, singular values.

Everything runs in float64 (float32 input is cast chunk by chunk, never copied whole). For tall
matrices (``N > D``) :func:`analyze` computes what every metric needs from one pass over the
rows, in row chunks split between worker threads: the centered Gram matrix ``X_cᵀX_c`` (chunks
centered on a sample mean, corrected exactly afterwards, so nothing cancels;
``XᵀX = X_cᵀX_c + N·μμᵀ``), the Gram matrix of the row-normalized embeddings (SelfCluster) and
the row norms; then ``eigvalsh`` on ``D × D`` matrices. A second pass computes the leverage
scores ``x_iᵀ(XᵀX)⁻¹x_i`` for the coherence from a Cholesky factor, in float32 with a rigorous
error bound and the few rows that may hold the maximum recomputed in float64. The Gram route loses
singular values below ``≈1e-8·σ₁``, so wherever it finds ``σ₁/σ_k > 1e6`` the spectrum is
recomputed from a Householder QR of ``[1, X]`` and an SVD of its small triangular factor (which
gives the spectra of ``X`` and of ``X_c`` at once); wide matrices take that route directly. That QR
runs over row chunks as well, so float32 input is never copied whole to float64. Either
way the results agree with an exact float64 SVD to 1e-4 relative (1e-3 for the condition number,
coherence and alpha-ReQ). Memory beyond the input is ``O(chunk·D + D²)``; no ``N × N`` matrix
is ever formed.

A singular value counts as zero below ``max(N, D) · eps(float64) · σ₁(X)`` (NumPy's
``matrix_rank`` convention); for the centered matrix the scale is ``σ₁(X_c) + √N·‖μ‖``, which
covers the round-off of the centering itself, so constant embeddings have no variance.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np
import torch
from torch import Tensor

from graphssl.evaluation._checks import NanPolicy, as_float_matrix

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "Analysis",
    "Method",
    "RowDirections",
    "Spectrum",
    "analyze",
    "check_chunk_size",
    "check_method",
    "row_directions",
    "validate",
    "warn_zero_rows",
]

Method = Literal["auto", "svd"]

_EPS64 = float(torch.finfo(torch.float64).eps)
#: Largest σ₁/σ_k trusted from the Gram route (its relative error is ≈ eps·κ², 1e-4 here).
_GRAM_KAPPA_MAX = 1e6
#: Rows per chunk of the passes over the embeddings.
DEFAULT_CHUNK_SIZE = 8192
#: Pass 1 on CPU runs in NumPy (BLAS syrk, worker threads); False forces the torch path.
_NUMPY_PASS = True
#: At most this many pass-1 workers (each holds a few float64 chunks and its own D × D sums).
_MAX_WORKERS = 8


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------


def validate(embeddings: Tensor | np.ndarray, nan_policy: NanPolicy) -> Tensor:
    """Return a finite float32/float64 ``[N, D]`` tensor (float64 only if the input is).

    Keeping float32 input as is avoids an ``N × D`` float64 copy; the chunks are cast to float64
    where they are used.
    """
    if nan_policy not in ("raise", "drop_rows"):
        raise ValueError(f"nan_policy must be 'raise' or 'drop_rows', got {nan_policy!r}")
    if isinstance(embeddings, np.ndarray):
        is_f64 = embeddings.dtype == np.float64
    else:
        is_f64 = isinstance(embeddings, Tensor) and embeddings.dtype == torch.float64
    n_in = embeddings.shape[0] if isinstance(embeddings, (np.ndarray, Tensor)) else 0
    x = as_float_matrix(
        embeddings,
        nan_policy=nan_policy,
        dtype=torch.float64 if is_f64 else torch.float32,
    )
    dropped = n_in - x.shape[0]
    if dropped:
        warnings.warn(
            f"dropped {dropped} of {n_in} embedding rows with NaN or Inf values "
            f"(nan_policy='drop_rows')",
            RuntimeWarning,
            stacklevel=3,
        )
    return x


def check_chunk_size(chunk_size: int) -> None:
    if not isinstance(chunk_size, int) or chunk_size <= 0:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")


def check_method(method: str) -> None:
    if method not in ("auto", "svd"):
        raise ValueError(f"method must be 'auto' or 'svd', got {method!r}")


# --------------------------------------------------------------------------------------------
# Spectral analysis shared by every metric
# --------------------------------------------------------------------------------------------


def _row_chunks(x: Tensor, chunk_size: int) -> list[Tensor]:
    return list(torch.split(x, chunk_size, dim=0))


@dataclass
class Spectrum:
    """Singular values of ``X`` or ``X_c``, descending, length ``min(N, D)``, zeros below tol."""

    sigma: Tensor
    rank: int
    exact: bool

    @property
    def sigma1(self) -> float:
        return float(self.sigma[0]) if self.sigma.numel() else 0.0


@dataclass
class Analysis:
    n: int
    d: int
    frob2: float = 0.0
    plain: Spectrum | None = None
    centered: Spectrum | None = None
    mu_u: float = math.nan
    mu_v: float = math.nan
    sc_value: float = math.nan
    sc_zero_rows: int = 0


def _spectrum(sigma: Tensor, k: int, tol: float, exact: bool) -> Spectrum:
    s = sigma.clamp_min(0.0)[:k]
    if s.numel() < k:
        s = torch.cat([s, s.new_zeros(k - s.numel())])
    s = torch.where(s > tol, s, torch.zeros_like(s))
    return Spectrum(sigma=s, rank=int((s > 0).sum()), exact=exact)


def _gram_trusted(sigma_desc: Tensor, k: int) -> bool:
    """Whether ``σ₁/σ_k`` from the Gram route is ≤ the trusted bound (``σ₁ = 0`` is exact)."""
    s1 = float(sigma_desc[0])
    if s1 == 0.0:
        return True
    sk = float(sigma_desc[k - 1])
    return sk > 0.0 and s1 / sk <= _GRAM_KAPPA_MAX


def _qr_factors(x: Tensor, chunk_size: int) -> tuple[Tensor, Tensor]:
    """Triangular factors of ``X`` and ``X_c`` from one Householder QR of ``[1, X]``.

    With ``[1, X] = QR``, ``R[:, 1:]ᵀ R[:, 1:] = XᵀX`` and ``R[1:, 1:]ᵀ R[1:, 1:] = X_cᵀX_c``
    (the first reflector projects out the all-ones direction, i.e. the column means); this
    holds for any triangular ``R`` with ``RᵀR = [1, X]ᵀ[1, X]``. Tall matrices with more than
    ``chunk_size + D + 1`` rows are factored a chunk at a time (``R ← qr([R; [1, X_chunk]])``,
    a TSQR, as backward-stable as one QR), so that no float64 copy of the whole ``X`` is made;
    smaller ones in one QR.
    """
    n, d = x.shape

    def with_ones(rows: Tensor) -> Tensor:
        a = torch.empty(rows.shape[0], d + 1, dtype=torch.float64, device=x.device)
        a[:, 0] = 1.0
        a[:, 1:] = rows
        return a

    if n <= chunk_size + d + 1:
        r = torch.linalg.qr(with_ones(x), mode="r").R
    else:
        r = x.new_zeros(0, d + 1, dtype=torch.float64)
        for chunk in _row_chunks(x, chunk_size):
            r = torch.linalg.qr(torch.cat([r, with_ones(chunk)]), mode="r").R
    return r[:, 1:], r[1:, 1:]


_U32 = 2.0**-24  # unit round-off of float32


def _fast_float32_ok(x: Tensor) -> bool:
    """Whether float32 products of ``x`` are IEEE float32 (no TF32/bf16 shortcuts)."""
    return (
        x.dtype == torch.float32
        and x.device.type == "cpu"
        and torch.get_float32_matmul_precision() == "highest"
    )


def _leverage_max(x: Tensor, m: Tensor, chunk_size: int, row_norms: Tensor | None = None) -> float:
    """``max_i ‖x_i M‖²`` over row chunks, equal to the float64 computation.

    When ``row_norms`` (``‖x_i‖`` in float64) are given and ``x`` is float32, the products run
    in float32, which is twice as fast, and the result is then made exact: for every row,
    ``‖ỹ_i − y_i‖ ≤ e_i = c·‖x_i‖·‖M‖_F`` with ``c = u + γ_D(1 + u)`` (rounding of ``M`` plus
    the worst-case error of a float32 dot product of length ``D``, whatever the summation
    order), and the float32 norm of ``ỹ_i`` is within a relative ``γ_{D+2}`` of ``‖ỹ_i‖``. Only
    the rows whose upper bound on ``‖y_i‖`` reaches the largest lower bound can hold the
    maximum; they are recomputed in float64 (all rows, if that is more than an eighth of them).
    """
    n, d = x.shape
    m_fro = float(torch.linalg.matrix_norm(m))
    # float32 keeps the relative error bound only away from overflow and underflow
    in_range = m_fro > 1e-30 and float(m.abs().max()) < 1e30
    if row_norms is not None and in_range and _fast_float32_ok(x):
        m32 = m.to(torch.float32)
        gamma = d * _U32 / (1.0 - d * _U32)
        c_abs = (_U32 + gamma * (1.0 + _U32)) * m_fro * 1.001
        c_rel = (d + 2) * _U32 / (1.0 - (d + 2) * _U32) * 1.001
        approx = torch.empty(n, dtype=torch.float64, device=x.device)
        start = 0
        for chunk in _row_chunks(x, chunk_size):
            stop = start + chunk.shape[0]
            approx[start:stop] = torch.linalg.vector_norm(chunk @ m32, dim=1)
            start = stop
        err = c_abs * row_norms + c_rel * approx
        candidates = (approx + err >= (approx - err).max()).nonzero().view(-1)
        if candidates.numel() <= max(n // 8, 1):
            y = x[candidates].to(torch.float64) @ m
            return float(y.square().sum(dim=1).max())
    best = 0.0
    for chunk in _row_chunks(x, chunk_size):
        y = chunk.to(torch.float64) @ m
        best = max(best, float(y.square().sum(dim=1).max()))
    return best


@dataclass
class _Pass1:
    gram_s: Tensor | None  # (X − 1sᵀ)ᵀ(X − 1sᵀ) for the shift s
    col_sum: Tensor | None  # Σ_i (x_i − s)
    gram_w: Tensor | None  # WᵀW, W = normalized non-zero rows (of X − 1sᵀ if sc_center)
    kept: int  # rows of W
    row_norms: Tensor | None  # ‖x_i‖, float64


class _Partial(NamedTuple):
    """One pass-1 worker's sums (NumPy)."""

    gram_s: np.ndarray | None
    col_sum: np.ndarray | None
    gram_w: np.ndarray | None
    kept: int


def _blas_one_thread() -> contextlib.AbstractContextManager[object]:
    """Limit NumPy's BLAS to one thread (each worker runs its own); no-op without threadpoolctl."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def _pass1_numpy(
    x: Tensor,
    shift: Tensor,
    *,
    shifted_gram: bool,
    normalized_gram: bool,
    sc_center: bool,
    keep_norms: bool,
    chunk_size: int,
) -> _Pass1:
    """Pass 1 on CPU: float64 chunks in NumPy, whose ``cᵀ @ c`` is a BLAS ``syrk`` (half the
    flops of a matmul). The rows are split between ``torch.get_num_threads()`` workers, each
    with single-threaded BLAS: the Gram updates are too small for multi-threaded BLAS to scale,
    and it degrades badly on oversubscribed machines. NumPy releases the GIL in these calls.
    """
    xn = x.numpy()
    n, d = xn.shape
    sn = shift.numpy()
    row_norms = np.empty(n, dtype=np.float64) if keep_norms else None
    need_shifted = shifted_gram or sc_center

    def work(lo: int, hi: int) -> _Partial:
        gs = np.zeros((d, d)) if shifted_gram else None
        col_sum = np.zeros(d) if shifted_gram else None
        gw = np.zeros((d, d)) if normalized_gram else None
        kept = 0
        rows_max = min(chunk_size, hi - lo)
        buf = np.empty((rows_max, d))  # scratch, reused: no allocation per chunk
        buf_s = np.empty((rows_max, d)) if need_shifted else None
        for s in range(lo, hi, chunk_size):
            e = min(s + chunk_size, hi)
            c64 = buf[: e - s]
            np.copyto(c64, xn[s:e])  # the cast to float64
            xs = None
            if buf_s is not None:
                xs = buf_s[: e - s]
                np.subtract(c64, sn, out=xs)
            if gs is not None and col_sum is not None and xs is not None:
                gs += xs.T @ xs
                col_sum += xs.sum(axis=0)
            norms = None
            if row_norms is not None or (gw is not None and not sc_center):
                norms = np.sqrt(np.einsum("ij,ij->i", c64, c64))
                if row_norms is not None:
                    row_norms[s:e] = norms
            if gw is not None:
                rows = xs if sc_center else c64
                assert rows is not None
                if sc_center or norms is None:
                    norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
                nonzero = norms > 0
                if not nonzero.all():
                    rows, norms = rows[nonzero], norms[nonzero]
                rows *= (1.0 / norms)[:, None]
                kept += rows.shape[0]
                gw += rows.T @ rows
        return _Partial(gs, col_sum, gw, kept)

    n_workers = max(1, min(torch.get_num_threads(), _MAX_WORKERS, -(-n // chunk_size)))
    step = -(-n // n_workers)
    bounds = [(lo, min(lo + step, n)) for lo in range(0, n, step)]
    with _blas_one_thread():
        if len(bounds) == 1:
            parts = [work(*bounds[0])]
        else:
            with ThreadPoolExecutor(max_workers=len(bounds)) as pool:
                parts = list(pool.map(lambda b: work(*b), bounds))

    def total(arrays: list[np.ndarray | None]) -> Tensor | None:
        present = [a for a in arrays if a is not None]
        return torch.from_numpy(np.sum(present, axis=0)) if present else None

    return _Pass1(
        gram_s=total([p.gram_s for p in parts]),
        col_sum=total([p.col_sum for p in parts]),
        gram_w=total([p.gram_w for p in parts]),
        kept=sum(p.kept for p in parts),
        row_norms=torch.from_numpy(row_norms) if row_norms is not None else None,
    )


def _pass1_torch(
    x: Tensor,
    shift: Tensor,
    *,
    shifted_gram: bool,
    normalized_gram: bool,
    sc_center: bool,
    keep_norms: bool,
    chunk_size: int,
) -> _Pass1:
    """Pass 1 with torch ops on the device of ``x`` (GPU, or CPU without NumPy interop)."""
    n, d = x.shape
    f64, dev = torch.float64, x.device
    gs = torch.zeros(d, d, dtype=f64, device=dev) if shifted_gram else None
    col_sum = torch.zeros(d, dtype=f64, device=dev) if shifted_gram else None
    gw = torch.zeros(d, d, dtype=f64, device=dev) if normalized_gram else None
    row_norms = torch.empty(n, dtype=f64, device=dev) if keep_norms else None
    kept = 0
    start = 0
    for c in _row_chunks(x, chunk_size):
        stop = start + c.shape[0]
        c64 = c.to(torch.float64, copy=True)
        xs = c64 - shift if (shifted_gram or sc_center) else None
        if gs is not None and col_sum is not None and xs is not None:
            gs.addmm_(xs.T, xs)
            col_sum += xs.sum(dim=0)
        norms = None
        if row_norms is not None or (gw is not None and not sc_center):
            norms = torch.linalg.vector_norm(c64, dim=1)
            if row_norms is not None:
                row_norms[start:stop] = norms
        if gw is not None:
            rows = xs if sc_center else c64
            assert rows is not None
            if sc_center or norms is None:
                norms = torch.linalg.vector_norm(rows, dim=1)
            nonzero = norms > 0
            if not bool(nonzero.all()):
                rows, norms = rows[nonzero], norms[nonzero]
            rows.mul_(norms.reciprocal()[:, None])
            kept += rows.shape[0]
            gw.addmm_(rows.T, rows)
        start = stop
    return _Pass1(
        gram_s=_symmetrized(gs),
        col_sum=col_sum,
        gram_w=_symmetrized(gw),
        kept=kept,
        row_norms=row_norms,
    )


def _symmetrized(g: Tensor | None) -> Tensor | None:
    return None if g is None else (g + g.T) / 2


def _eigvalsh_desc(g: Tensor) -> Tensor:
    """Eigenvalues of a symmetric ``D × D`` matrix, descending.

    On CPU through NumPy's LAPACK on one thread: for ``D`` in the hundreds that is as fast as
    threaded LAPACK on an idle machine and an order of magnitude faster on a busy one.
    """
    if g.device.type == "cpu":
        with _blas_one_thread():
            return torch.from_numpy(np.linalg.eigvalsh(g.numpy())[::-1].copy())
    return torch.linalg.eigvalsh(g).flip(0)


def analyze(
    x: Tensor,
    *,
    plain: bool = False,
    centered: bool = False,
    leverage: bool = False,
    self_cluster: bool = False,
    sc_center: bool = False,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    method: Method = "auto",
) -> Analysis:
    """Spectra of ``X`` (``plain``) and ``X_c`` (``centered``), coherence (``leverage``) and
    SelfCluster, in one or two passes over the rows.

    Gram route (``N > D``, ``method="auto"``): pass 1 accumulates ``X_cᵀX_c`` (chunks centered
    in float64, so no cancellation), the Gram matrix of the normalized rows and the row norms;
    ``XᵀX = X_cᵀX_c + N·μμᵀ``; singular values from ``eigvalsh``. If ``σ₁/σ_k ≤ 1e6`` for the
    requested spectra, they are kept; for the coherence ``X`` then has full column rank, so
    ``V`` is orthogonal (``μ_V = 1``) and the leverage ``ℓ_i = x_iᵀ(XᵀX)⁻¹x_i = ‖L⁻¹x_i‖²``
    comes from the Cholesky factor ``L`` (pass 2). Otherwise, and for ``N ≤ D``, the QR/SVD
    route replaces the spectra.

    Singular values at most ``max(N, D)·eps·σ₁(X)`` count as zero; for ``X_c`` the scale is
    ``σ₁(X_c) + √N·‖μ‖ ≥ σ₁(X)``, which covers the round-off of the centering itself (so that
    constant embeddings have an exactly zero centered spectrum).
    """
    plain = plain or leverage
    n, d = x.shape
    k = min(n, d)
    out = Analysis(n=n, d=d)
    use_gram = (plain or centered) and method == "auto" and n > d
    if sc_center or not use_gram:
        shift = x.sum(dim=0, dtype=torch.float64) / n  # the exact mean
    else:
        # The Gram pass centers on the mean of a row sample and corrects afterwards
        # (X_cᵀX_c = X_sᵀX_s − N·δδᵀ, δ = μ − s small): no separate pass for the mean, and no
        # cancellation as in XᵀX − N·μμᵀ.
        sample = x[:: max(1, n // 4096)]
        shift = sample.sum(dim=0, dtype=torch.float64) / sample.shape[0]

    # ---- pass 1 -------------------------------------------------------------------------
    p1: _Pass1 | None = None
    if use_gram or self_cluster:
        keep_norms = use_gram and leverage and _fast_float32_ok(x)
        run = _pass1_numpy if (x.device.type == "cpu" and _NUMPY_PASS) else _pass1_torch
        p1 = run(
            x,
            shift,
            shifted_gram=use_gram,
            normalized_gram=self_cluster,
            sc_center=sc_center,
            keep_norms=keep_norms,
            chunk_size=chunk_size,
        )
    mu = shift
    g_c: Tensor | None = None
    if p1 is not None and p1.gram_s is not None and p1.col_sum is not None:
        delta = p1.col_sum / n
        mu = shift + delta
        g_c = p1.gram_s - n * torch.outer(delta, delta)
    mean_scale = math.sqrt(n) * float(torch.linalg.vector_norm(mu))
    if p1 is not None and p1.gram_w is not None:
        out.sc_zero_rows = n - p1.kept
        out.sc_value = _self_cluster_from_gram(p1.gram_w, p1.kept, d)
    if not (plain or centered):
        return out

    def tol_of(s1: float) -> float:
        return max(n, d) * _EPS64 * s1

    # ---- spectra: Gram route with a safety net ---------------------------------------------
    sig_p: Tensor | None = None
    sig_c: Tensor | None = None
    chol_inv_t: Tensor | None = None
    # each spectrum independently: from the Gram matrix if trusted, else from QR/SVD
    exact_p, exact_c = plain and not use_gram, centered and not use_gram
    if g_c is not None:
        g = g_c + n * torch.outer(mu, mu)
        if plain:
            out.frob2 = float(torch.trace(g))
            sig_p = _eigvalsh_desc(g).clamp_min(0.0).sqrt()
            exact_p = not _gram_trusted(sig_p, k)
        if centered:
            sig_c = _eigvalsh_desc(g_c).clamp_min(0.0).sqrt()
            # a centered spectrum at the round-off level of X is zero: no safety net needed
            zero = float(sig_c[0]) <= tol_of(float(sig_c[0]) + mean_scale)
            exact_c = not (zero or _gram_trusted(sig_c, k))
        if leverage and not exact_p and sig_p is not None and float(sig_p[0]) > 0.0:
            chol, info = torch.linalg.cholesky_ex(g)
            if int(info) != 0:  # pragma: no cover - cannot happen for σ₁/σ_D ≤ 1e6
                exact_p = True
            else:
                eye = torch.eye(d, dtype=torch.float64, device=g.device)
                chol_inv_t = torch.linalg.solve_triangular(chol, eye, upper=False).T

    vh: Tensor | None = None
    if exact_p or exact_c:
        r_x, r_c = _qr_factors(x, chunk_size)
        if exact_p:
            out.frob2 = float(r_x.square().sum())
            if leverage:
                _, sig_p, vh = torch.linalg.svd(r_x, full_matrices=False)
            else:
                sig_p = torch.linalg.svdvals(r_x)
        if exact_c:
            sig_c = torch.linalg.svdvals(r_c) if r_c.shape[0] > 0 else r_c.new_zeros(0)

    if sig_p is not None:
        out.plain = _spectrum(sig_p, k, tol_of(float(sig_p[0])), exact_p)
    if sig_c is not None:
        s1c = float(sig_c[0]) if sig_c.numel() else 0.0
        out.centered = _spectrum(sig_c, k, tol_of(s1c + mean_scale), exact_c)

    # ---- pass 2: leverage scores for the coherence ------------------------------------------
    if leverage and out.plain is not None and out.plain.rank > 0:
        r = out.plain.rank
        if exact_p:
            assert vh is not None
            v_r = vh[:r].T
            out.mu_u = n / r * _leverage_max(x, v_r / out.plain.sigma[:r], chunk_size)
            out.mu_v = d / r * float(v_r.square().sum(dim=1).max())
        else:
            assert chol_inv_t is not None and p1 is not None
            out.mu_u = n / r * _leverage_max(x, chol_inv_t, chunk_size, p1.row_norms)
            out.mu_v = 1.0  # r = D: V is a D × D orthogonal matrix, every row has norm 1
    return out


def _self_cluster_from_gram(gram_w: Tensor, n: int, d: int) -> float:
    """SelfCluster from ``WᵀW``: ``Q = ‖WWᵀ‖_F² = ‖WᵀW‖_F²`` (cyclic trace)."""
    if n < 2 or d < 2:
        return math.nan
    q = float(gram_w.square().sum())
    return (d * q - n * (d + n - 1)) / (n * (n - 1) * (d - 1))


def warn_zero_rows(zero_rows: int, n: int, what: str = "self_cluster") -> None:
    """Warn that ``zero_rows`` all-zero rows of ``n`` were dropped before normalizing."""
    if zero_rows:
        warnings.warn(
            f"{what}: dropped {zero_rows} of {n} all-zero embedding rows before "
            f"normalizing (they have no direction)",
            RuntimeWarning,
            stacklevel=3,
        )


# --------------------------------------------------------------------------------------------
# Row directions (mean cosine) and norms
# --------------------------------------------------------------------------------------------


@dataclass
class RowDirections:
    """Sums over the rows of ``X`` that the mean cosine and the mean norm need.

    Attributes:
        n: rows of ``X``.
        kept: rows with a non-zero norm (the others have no direction).
        unit_sum: ``Σ_i x_i / ‖x_i‖`` over the kept rows, float64 ``[D]``.
        norm_sum: ``Σ_i ‖x_i‖`` over every row.
    """

    n: int
    kept: int
    unit_sum: Tensor
    norm_sum: float


def row_directions(x: Tensor, chunk_size: int = DEFAULT_CHUNK_SIZE) -> RowDirections:
    """One pass over ``chunk_size``-row float64 chunks of ``x``: ``O(N·D)`` time, ``O(D)`` sums."""
    n, d = x.shape
    unit_sum = torch.zeros(d, dtype=torch.float64, device=x.device)
    norm_sum = torch.zeros((), dtype=torch.float64, device=x.device)
    kept = 0
    for chunk in _row_chunks(x, chunk_size):
        c64 = chunk.to(torch.float64)
        norms = torch.linalg.vector_norm(c64, dim=1)
        norm_sum += norms.sum()
        nonzero = norms > 0
        kept += int(nonzero.sum())
        unit_sum += (c64[nonzero] / norms[nonzero, None]).sum(dim=0)
    return RowDirections(n=n, kept=kept, unit_sum=unit_sum, norm_sum=float(norm_sum))
