"""Unsupervised embedding-quality diagnostics: spectral metrics of an ``[N, D]`` embedding matrix.

Every metric takes embeddings ``X`` (rows = items) as a tensor or array and returns a Python
float. The definitions follow the original papers, with the typos of the survey that collects
them fixed as described in ``docs/metrics-spec.md``:

* RankMe / effective rank -- Roy & Vetterli, EUSIPCO 2007; Garrido et al., ICML 2023,
  https://arxiv.org/abs/2210.02885 (``exp`` of the entropy of the normalized singular values).
* alpha-ReQ -- Agrawal et al., NeurIPS 2022,
  https://proceedings.neurips.cc/paper_files/paper/2022/hash/70596d70542c51c8d9b4e423f4bf2736-Abstract-Conference.html
  (power-law decay of the covariance eigenvalues, fitted as in the authors' ``reptrix``).
* NESum -- He & Ozay, ICML 2022, https://arxiv.org/abs/2207.06367 (sum of covariance eigenvalues
  over the largest one).
* Stable rank, pseudo-condition number, coherence and SelfCluster -- Tsitsulin, Munkhoeva &
  Perozzi, *Unsupervised Embedding Quality Evaluation*, 2023, https://arxiv.org/abs/2305.16562.

``reference=True`` reproduces the formulas of the survey authors' code
(``google-research/graph_embedding/metrics/metrics.py``: epsilon 1e-12, raw embeddings, one NumPy
SVD) so that their published numbers can be compared; the keyword options that code has no
counterpart for are then ignored.

Numerics. Everything runs in float64 (float32 input is cast chunk by chunk, never copied whole).
For tall matrices (``N > D``) :func:`embedding_diagnostics` computes the whole suite from one pass
over the rows, in row chunks split between worker threads: the centered Gram matrix
``X_cᵀX_c`` (chunks centered on a sample mean, corrected exactly afterwards, so nothing cancels;
``XᵀX = X_cᵀX_c + N·μμᵀ``), the Gram matrix of the row-normalized embeddings (SelfCluster) and
the row norms; then ``eigvalsh`` on ``D × D`` matrices. A second pass computes the leverage
scores ``x_iᵀ(XᵀX)⁻¹x_i`` for the coherence from a Cholesky factor, in float32 with a rigorous
error bound and the few rows that may hold the maximum recomputed in float64. The Gram route loses
singular values below ``≈1e-8·σ₁``, so wherever it finds ``σ₁/σ_k > 1e6`` the spectrum is
recomputed from a Householder QR of ``[1, X]`` and an SVD of its small triangular factor (which
gives the spectra of ``X`` and of ``X_c`` at once); wide matrices take that route directly. Either
way the results agree with an exact float64 SVD to 1e-4 relative (1e-3 for the condition number,
coherence and alpha-ReQ). Peak memory is ``O(N·D + D²)``; no ``N × N`` matrix is ever formed.

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
    "HIGHER_IS_BETTER",
    "alpha_req",
    "coherence",
    "condition_number",
    "effective_rank",
    "embedding_diagnostics",
    "nesum",
    "rankme",
    "rankme_normalized",
    "self_cluster",
    "stable_rank",
]

#: Whether a larger value means a better embedding, per metric key of
#: :func:`embedding_diagnostics` (``None``: no direction holds in general, the experiment decides;
#: e.g. SelfCluster and coherence correlate positively with accuracy only on some data).
HIGHER_IS_BETTER: dict[str, bool | None] = {
    "rankme": True,
    "rankme_normalized": True,
    "effective_rank": True,
    "alpha_req": None,
    "nesum": True,
    "stable_rank": True,
    "condition_number": None,
    "coherence": None,
    "self_cluster": None,
    "selfcluster_zero_rows": None,
}

Method = Literal["auto", "svd"]

_EPS64 = float(torch.finfo(torch.float64).eps)
#: Largest σ₁/σ_k trusted from the Gram route (its relative error is ≈ eps·κ², 1e-4 here).
_GRAM_KAPPA_MAX = 1e6
#: epsilon of the reference (google-research) formulas.
_REF_EPS = 1e-12
DEFAULT_CHUNK_SIZE = 8192
#: Pass 1 on CPU runs in NumPy (BLAS syrk, worker threads); False forces the torch path.
_NUMPY_PASS = True
#: At most this many pass-1 workers (each holds a few float64 chunks and its own D × D sums).
_MAX_WORKERS = 8


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------


def _validate(embeddings: Tensor | np.ndarray, nan_policy: NanPolicy) -> Tensor:
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


def _check_chunk_size(chunk_size: int) -> None:
    if not isinstance(chunk_size, int) or chunk_size <= 0:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")


def _check_method(method: str) -> None:
    if method not in ("auto", "svd"):
        raise ValueError(f"method must be 'auto' or 'svd', got {method!r}")


# --------------------------------------------------------------------------------------------
# Spectral analysis shared by every metric
# --------------------------------------------------------------------------------------------


def _row_chunks(x: Tensor, chunk_size: int) -> list[Tensor]:
    return list(torch.split(x, chunk_size, dim=0))


@dataclass
class _Spectrum:
    """Singular values of ``X`` or ``X_c``, descending, length ``min(N, D)``, zeros below tol."""

    sigma: Tensor
    rank: int
    exact: bool

    @property
    def sigma1(self) -> float:
        return float(self.sigma[0]) if self.sigma.numel() else 0.0


@dataclass
class _Analysis:
    n: int
    d: int
    frob2: float = 0.0
    plain: _Spectrum | None = None
    centered: _Spectrum | None = None
    mu_u: float = math.nan
    mu_v: float = math.nan
    sc_value: float = math.nan
    sc_zero_rows: int = 0


def _spectrum(sigma: Tensor, k: int, tol: float, exact: bool) -> _Spectrum:
    s = sigma.clamp_min(0.0)[:k]
    if s.numel() < k:
        s = torch.cat([s, s.new_zeros(k - s.numel())])
    s = torch.where(s > tol, s, torch.zeros_like(s))
    return _Spectrum(sigma=s, rank=int((s > 0).sum()), exact=exact)


def _gram_trusted(sigma_desc: Tensor, k: int) -> bool:
    """Whether ``σ₁/σ_k`` from the Gram route is ≤ the trusted bound (``σ₁ = 0`` is exact)."""
    s1 = float(sigma_desc[0])
    if s1 == 0.0:
        return True
    sk = float(sigma_desc[k - 1])
    return sk > 0.0 and s1 / sk <= _GRAM_KAPPA_MAX


def _qr_factors(x: Tensor) -> tuple[Tensor, Tensor]:
    """Triangular factors of ``X`` and ``X_c`` from one Householder QR of ``[1, X]``.

    With ``[1, X] = QR``, ``R[:, 1:]ᵀ R[:, 1:] = XᵀX`` and ``R[1:, 1:]ᵀ R[1:, 1:] = X_cᵀX_c``
    (the first reflector projects out the all-ones direction, i.e. the column means).
    """
    n, d = x.shape
    a = torch.empty(n, d + 1, dtype=torch.float64, device=x.device)
    a[:, 0] = 1.0
    a[:, 1:] = x
    r = torch.linalg.qr(a, mode="r").R
    del a
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


def _analyze(
    x: Tensor,
    *,
    plain: bool = False,
    centered: bool = False,
    leverage: bool = False,
    self_cluster: bool = False,
    sc_center: bool = False,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    method: Method = "auto",
) -> _Analysis:
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
    out = _Analysis(n=n, d=d)
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
        r_x, r_c = _qr_factors(x)
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


# --------------------------------------------------------------------------------------------
# Metrics from a spectrum
# --------------------------------------------------------------------------------------------


def _rankme_from(spec: _Spectrum, eps: float) -> float:
    total = float(spec.sigma.sum())
    if total <= 0.0:
        return 0.0
    p = spec.sigma / total + eps
    return math.exp(float(torch.special.entr(p).sum()))


def _alpha_from(spec: _Spectrum, fit_range: tuple[int, int], weighted: bool) -> float:
    lo, hi = fit_range
    hi = min(hi, spec.rank)
    if hi - lo + 1 < 3:
        return math.nan
    ranks = torch.arange(lo, hi + 1, dtype=torch.float64, device=spec.sigma.device)
    y = 2.0 * spec.sigma[lo - 1 : hi].log()  # log λ_i, λ_i = σ_i² (scale does not matter)
    a = torch.stack([-ranks.log(), torch.ones_like(ranks)], dim=1)
    w = 1.0 / ranks if weighted else torch.ones_like(ranks)
    b = torch.linalg.solve(a.T @ (a * w[:, None]), a.T @ (w * y))
    return float(b[0])


def _stable_rank_from(frob2: float, spec: _Spectrum) -> float:
    s1 = spec.sigma1
    return 0.0 if s1 == 0.0 else frob2 / (s1 * s1)


def _nesum_from(spec: _Spectrum) -> float:
    s1 = spec.sigma1
    return 0.0 if s1 == 0.0 else float(spec.sigma.square().sum()) / (s1 * s1)


def _condition_from(spec: _Spectrum, reciprocal: bool, sigma_min: str) -> float:
    s1 = spec.sigma1
    if s1 == 0.0:
        return math.nan
    s_min = float(spec.sigma[-1]) if sigma_min == "last" else float(spec.sigma[spec.rank - 1])
    if reciprocal:
        return s_min / s1
    return math.inf if s_min == 0.0 else s1 / s_min


def _coherence_from(a: _Analysis, side: str) -> float:
    if side == "U":
        return a.mu_u
    if side == "V":
        return a.mu_v
    return max(a.mu_u, a.mu_v) if not math.isnan(a.mu_u) else math.nan


def _check_option(name: str, value: object, choices: tuple[object, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def _check_fit_range(fit_range: tuple[int, int]) -> tuple[int, int]:
    try:
        lo, hi = (int(v) for v in fit_range)
    except (TypeError, ValueError):
        raise ValueError(
            f"fit_range must be a pair (first, last) of 1-based ranks, got {fit_range!r}"
        ) from None
    if lo < 1 or hi < lo:
        raise ValueError(f"fit_range must satisfy 1 <= first <= last, got {fit_range!r}")
    return lo, hi


def _warn_zero_rows(zero_rows: int, n: int) -> None:
    if zero_rows:
        warnings.warn(
            f"self_cluster: dropped {zero_rows} of {n} all-zero embedding rows before "
            f"normalizing (they have no direction)",
            RuntimeWarning,
            stacklevel=3,
        )


# --------------------------------------------------------------------------------------------
# Reference (google-research) formulas, spec §9
# --------------------------------------------------------------------------------------------


def _np64(x: Tensor) -> np.ndarray:
    return x.detach().to(device="cpu", dtype=torch.float64).numpy()


def _ref_rankme(s: np.ndarray) -> float:
    p = s / np.sum(s + _REF_EPS) + _REF_EPS
    return float(np.exp(-np.sum(p * np.log(p))))


def _ref_coherence(u: np.ndarray) -> float:
    return float(np.linalg.norm(u, axis=1).max() ** 2 * u.shape[0] / u.shape[1])


def _ref_condition(s: np.ndarray) -> float:
    return float(s[-1] / (s[0] + _REF_EPS))


def _ref_alpha(s: np.ndarray) -> float:
    k = s.shape[0]
    feats = np.vstack([np.linspace(1, 0, k), np.ones(k)]).T
    coef = np.linalg.lstsq(feats, np.log(s + _REF_EPS), rcond=None)[0]
    return float(coef[0])


def _ref_stable_rank(x: np.ndarray, s: np.ndarray) -> float:
    return float(np.square(x).sum() / (s[0] * s[0] + _REF_EPS))


def _ref_nesum(x: np.ndarray) -> float:
    if x.shape[0] < 2:
        return math.nan  # np.cov with one row divides by zero
    cov = np.atleast_2d(np.cov(x.T))
    ev = np.linalg.eigvalsh(cov) + _REF_EPS
    return float((ev / ev[-1]).sum())


def _ref_self_cluster(x: np.ndarray) -> float:
    w = x + _REF_EPS
    w = w / np.linalg.norm(w, axis=1)[:, None]
    n, d = w.shape
    expected = n + n * (n - 1) / d
    actual = float(np.square(w.T @ w).sum())  # = Σ (W Wᵀ)², without the N × N matrix
    denominator = n * n - expected  # 0 for N = 1 or D = 1, where GR's NumPy code gives NaN
    return (actual - expected) / denominator if denominator != 0 else math.nan


def _ref_svd(x: np.ndarray, compute_uv: bool) -> tuple[np.ndarray | None, np.ndarray]:
    if compute_uv:
        u, s, _ = np.linalg.svd(x, full_matrices=False)
        return u, s
    return None, np.linalg.svd(x, compute_uv=False)


# --------------------------------------------------------------------------------------------
# Public metrics
# --------------------------------------------------------------------------------------------


def rankme(
    embeddings: Tensor | np.ndarray,
    center: bool = False,
    eps: float = 0.0,
    *,
    nan_policy: NanPolicy = "raise",
    reference: bool = False,
) -> float:
    """RankMe (Garrido et al., ICML 2023, https://arxiv.org/abs/2210.02885).

    ``exp(H(p))`` with ``p_i = σ_i / Σ_j σ_j + eps`` over the ``min(N, D)`` singular values of
    the embeddings; ``1 ≤ RankMe ≤ rank(X)`` and 0 for an all-zero matrix.

    Args:
        embeddings: ``[N, D]`` float tensor or array.
        center: subtract the column means first (RankMe itself does not). (default: ``False``)
        eps: added to every ``p_i``; the published implementations use ``1e-7`` or ``1e-12``,
            which only bias the value upwards. (default: ``0.0``)
        nan_policy: ``"raise"`` or ``"drop_rows"`` for rows with NaN/Inf. (default: ``"raise"``)
        reference: use the google-research formula (``p = σ/Σ(σ+1e-12) + 1e-12``); ``eps`` is
            then ignored. (default: ``False``)

    Returns:
        The RankMe value as a Python float.
    """
    return _rankme(_validate(embeddings, nan_policy), center, eps, reference)


def _rankme(x: Tensor, center: bool, eps: float, reference: bool) -> float:
    if reference:
        xn = _np64(x)
        if center:
            xn = xn - xn.mean(axis=0)
        return _ref_rankme(_ref_svd(xn, compute_uv=False)[1])
    a = _analyze(x, plain=not center, centered=center)
    spec = a.centered if center else a.plain
    assert spec is not None
    return _rankme_from(spec, eps)


def effective_rank(
    embeddings: Tensor | np.ndarray,
    eps: float = 1e-12,
    *,
    nan_policy: NanPolicy = "raise",
    reference: bool = False,
) -> float:
    """Effective rank of an embedding matrix (Roy & Vetterli, 2007): RankMe of the centered matrix.

    ``exp(H(p))``, where ``p`` are the singular values of the column-centered ``embeddings``
    ``[N, D]`` normalized to sum to 1 (computed in float64, ``0·log 0 = 0``). It ranges from 1
    (all variance along a single direction) to ``min(N - 1, D)`` (variance spread evenly over
    as many directions as centered data can have), and is 0 when the embeddings have no
    variance at all. A value far below ``D`` signals dimensional collapse, a common failure
    mode of non-contrastive SSL objectives.

    Args:
        embeddings: ``[N, D]`` float tensor or array.
        eps: the result is 0 when the singular values of the centered matrix sum to at most
            ``eps``. (default: ``1e-12``)
        nan_policy: ``"raise"`` or ``"drop_rows"`` for rows with NaN/Inf. (default: ``"raise"``)
        reference: apply the google-research RankMe formula to the centered matrix.
            (default: ``False``)

    Returns:
        The effective rank as a Python float.
    """
    x = _validate(embeddings, nan_policy)
    if reference:
        xn = _np64(x)
        return _ref_rankme(_ref_svd(xn - xn.mean(axis=0), compute_uv=False)[1])
    spec = _analyze(x, centered=True).centered
    assert spec is not None
    if float(spec.sigma.sum()) <= eps:
        return 0.0
    return _rankme_from(spec, 0.0)


def rankme_normalized(
    embeddings: Tensor | np.ndarray,
    center: bool = False,
    eps: float = 0.0,
    *,
    nan_policy: NanPolicy = "raise",
    reference: bool = False,
) -> float:
    """RankMe* (Tsitsulin et al. 2023, https://arxiv.org/abs/2305.16562): RankMe / min(N, D).

    The relative utilization of the embedding space, in ``(0, 1]`` (0 for an all-zero matrix).
    When centered, the normalizer is ``min(N - 1, D)``, the largest rank centered data can have.

    Args:
        embeddings: ``[N, D]`` float tensor or array.
        center: subtract the column means first. (default: ``False``)
        eps: as in :func:`rankme`. (default: ``0.0``)
        nan_policy: ``"raise"`` or ``"drop_rows"`` for rows with NaN/Inf. (default: ``"raise"``)
        reference: normalize the google-research RankMe instead. (default: ``False``)

    Returns:
        RankMe* as a Python float.
    """
    x = _validate(embeddings, nan_policy)
    n, d = x.shape
    value = _rankme(x, center, eps, reference)
    denom = min(n - 1, d) if center else min(n, d)
    return value / denom if denom > 0 else 0.0


def alpha_req(
    embeddings: Tensor | np.ndarray,
    center: bool = True,
    fit_range: tuple[int, int] = (11, 100),
    weighted: bool = True,
    *,
    nan_policy: NanPolicy = "raise",
    reference: bool = False,
) -> float:
    """alpha-ReQ (Agrawal et al., NeurIPS 2022): power-law decay of the covariance spectrum.

    Fits ``log λ_i = -α log i + c`` to the eigenvalues ``λ_i = σ_i(X_c)²`` of the covariance at
    the 1-based ranks ``fit_range`` (clipped to the numerical rank), by least squares weighted
    with ``1/i`` as in the authors' ``reptrix`` library; ``α > 0`` for a decaying spectrum.
    NaN when fewer than 3 eigenvalues fall in the window (e.g. ``D < 13`` by default).

    Args:
        embeddings: ``[N, D]`` float tensor or array.
        center: fit the covariance (centered) spectrum, as the original. (default: ``True``)
        fit_range: first and last rank (1-based, inclusive) of the fit. (default: ``(11, 100)``)
        weighted: weights ``1/i``; ``False`` for ordinary least squares. (default: ``True``)
        nan_policy: ``"raise"`` or ``"drop_rows"`` for rows with NaN/Inf. (default: ``"raise"``)
        reference: google-research formula instead: slope of ``log(σ_i + 1e-12)`` of the raw
            matrix over all ``min(N, D)`` values on the grid ``linspace(1, 0, k)`` (an
            exponential-decay fit); ``center``, ``fit_range`` and ``weighted`` are ignored.
            (default: ``False``)

    Returns:
        α as a Python float.
    """
    lo_hi = _check_fit_range(fit_range)
    x = _validate(embeddings, nan_policy)
    if reference:
        return _ref_alpha(_ref_svd(_np64(x), compute_uv=False)[1])
    a = _analyze(x, plain=not center, centered=center)
    spec = a.centered if center else a.plain
    assert spec is not None
    return _alpha_from(spec, lo_hi, weighted)


def nesum(
    embeddings: Tensor | np.ndarray,
    *,
    nan_policy: NanPolicy = "raise",
    reference: bool = False,
) -> float:
    """NESum (He & Ozay, ICML 2022, https://arxiv.org/abs/2207.06367).

    ``Σ_i λ_i / λ_1`` over the eigenvalues of the covariance of the embeddings, i.e. the stable
    rank of the centered matrix; in ``[1, min(N - 1, D)]``, 0 for constant embeddings.

    Args:
        embeddings: ``[N, D]`` float tensor or array.
        nan_policy: ``"raise"`` or ``"drop_rows"`` for rows with NaN/Inf. (default: ``"raise"``)
        reference: google-research formula (``eigvalsh(np.cov(X.T)) + 1e-12``, which gives
            ``D`` for constant embeddings). (default: ``False``)

    Returns:
        NESum as a Python float.
    """
    x = _validate(embeddings, nan_policy)
    if reference:
        return _ref_nesum(_np64(x))
    spec = _analyze(x, centered=True).centered
    assert spec is not None
    return _nesum_from(spec)


def stable_rank(
    embeddings: Tensor | np.ndarray,
    *,
    nan_policy: NanPolicy = "raise",
    reference: bool = False,
) -> float:
    """Stable (numerical) rank ``‖X‖_F² / ‖X‖_2²`` (Rudelson & Vershynin 2007).

    In ``[1, rank(X)]``, 0 for an all-zero matrix; no centering.

    Args:
        embeddings: ``[N, D]`` float tensor or array.
        nan_policy: ``"raise"`` or ``"drop_rows"`` for rows with NaN/Inf. (default: ``"raise"``)
        reference: google-research formula (``sum(X²) / (σ₁² + 1e-12)``). (default: ``False``)

    Returns:
        The stable rank as a Python float.
    """
    x = _validate(embeddings, nan_policy)
    if reference:
        xn = _np64(x)
        return _ref_stable_rank(xn, _ref_svd(xn, compute_uv=False)[1])
    a = _analyze(x, plain=True)
    assert a.plain is not None
    return _stable_rank_from(a.frob2, a.plain)


def condition_number(
    embeddings: Tensor | np.ndarray,
    reciprocal: bool = False,
    sigma_min: Literal["last", "nonzero"] = "last",
    *,
    nan_policy: NanPolicy = "raise",
    reference: bool = False,
) -> float:
    """Pseudo-condition number ``σ₁ / σ_k``, ``k = min(N, D)`` (Tsitsulin et al. 2023, Def. 3.2).

    ``+inf`` when ``σ_k`` is numerically zero (rank-deficient embeddings are penalised, as in
    the authors' code); NaN for an all-zero matrix. No centering.

    Args:
        embeddings: ``[N, D]`` float tensor or array.
        reciprocal: return ``σ_k / σ₁ ∈ [0, 1]`` instead (0 when rank-deficient).
            (default: ``False``)
        sigma_min: ``"last"`` divides by ``σ_k``; ``"nonzero"`` by the smallest non-zero
            singular value ``σ_r`` (the generalized condition number ``‖X‖‖X⁺‖``).
            (default: ``"last"``)
        nan_policy: ``"raise"`` or ``"drop_rows"`` for rows with NaN/Inf. (default: ``"raise"``)
        reference: google-research formula ``σ_k / (σ₁ + 1e-12)`` (the reciprocal!);
            ``reciprocal`` and ``sigma_min`` are ignored. (default: ``False``)

    Returns:
        The condition number as a Python float.
    """
    _check_option("sigma_min", sigma_min, ("last", "nonzero"))
    x = _validate(embeddings, nan_policy)
    if reference:
        return _ref_condition(_ref_svd(_np64(x), compute_uv=False)[1])
    a = _analyze(x, plain=True)
    assert a.plain is not None
    return _condition_from(a.plain, reciprocal, sigma_min)


def coherence(
    embeddings: Tensor | np.ndarray,
    side: Literal["both", "U", "V"] = "both",
    *,
    nan_policy: NanPolicy = "raise",
    reference: bool = False,
) -> float:
    """Coherence parameter μ₀ (Candès & Recht 2009; Tsitsulin et al. 2023, Def. 3.1).

    With the thin SVD ``X = U_r Σ_r V_rᵀ`` on the ``r`` numerically non-zero singular values,
    ``μ_U = (N/r)·max_i ‖U_r[i]‖²`` (row leverage), ``μ_V = (D/r)·max_j ‖V_r[j]‖²`` and
    ``μ₀ = max(μ_U, μ_V) ∈ [1, max(N, D)/r]``. Larger = leverage concentrated on few rows;
    that higher is better is an empirical finding of Tsitsulin et al., not a theorem. NaN for
    an all-zero matrix. No centering.

    Args:
        embeddings: ``[N, D]`` float tensor or array.
        side: ``"both"`` (μ₀), ``"U"`` (rows) or ``"V"`` (columns). (default: ``"both"``)
        nan_policy: ``"raise"`` or ``"drop_rows"`` for rows with NaN/Inf. (default: ``"raise"``)
        reference: google-research formula ``(N/k)·max_i ‖U[i]‖²`` over all ``k = min(N, D)``
            left singular vectors, without rank truncation (so arbitrary for rank-deficient
            input); ``side`` is ignored. (default: ``False``)

    Returns:
        The coherence as a Python float.
    """
    _check_option("side", side, ("both", "U", "V"))
    x = _validate(embeddings, nan_policy)
    if reference:
        u, _ = _ref_svd(_np64(x), compute_uv=True)
        assert u is not None
        return _ref_coherence(u)
    return _coherence_from(_analyze(x, leverage=True), side)


def self_cluster(
    embeddings: Tensor | np.ndarray,
    center: bool = False,
    *,
    nan_policy: NanPolicy = "raise",
    reference: bool = False,
) -> float:
    """SelfCluster (Tsitsulin et al. 2023, Def. 3.5): excess clustering of the row directions.

    With ``W`` the row-normalized embeddings (all-zero rows dropped, with a warning) and
    ``Q = ‖WWᵀ‖_F²``, ``(Q − N − N(N−1)/D) / (N² − N − N(N−1)/D)``: 0 in expectation for
    isotropic rows, 1 when all rows lie on one line, at least ``−1/(max(N, D) − 1)``. ``Q`` is
    computed as ``‖WᵀW‖_F²`` in ``O(N·D²)`` time and ``O(D²)`` extra memory. NaN when fewer than
    2 rows remain or ``D < 2``.

    Args:
        embeddings: ``[N, D]`` float tensor or array.
        center: subtract the column means first. (default: ``False``)
        nan_policy: ``"raise"`` or ``"drop_rows"`` for rows with NaN/Inf. (default: ``"raise"``)
        reference: google-research formula (adds ``1e-12`` to every entry before normalizing,
            so zero rows are kept); ``center`` is ignored. (default: ``False``)

    Returns:
        SelfCluster as a Python float.
    """
    x = _validate(embeddings, nan_policy)
    if reference:
        return _ref_self_cluster(_np64(x))
    a = _analyze(x, self_cluster=True, sc_center=center)
    _warn_zero_rows(a.sc_zero_rows, a.n)
    return a.sc_value


def embedding_diagnostics(
    embeddings: Tensor | np.ndarray,
    *,
    reference: bool = False,
    nan_policy: NanPolicy = "raise",
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    method: Method = "auto",
) -> dict[str, float]:
    """Every diagnostic of this module from one decomposition, with default options.

    Equal (to round-off) to calling each metric function. With ``method="auto"``, tall
    matrices (``N > D``) take the Gram route described in the module docstring: float64 Gram
    matrices accumulated over ``chunk_size`` rows, ``eigh`` on ``D × D``, a QR/SVD safety net
    when ``σ₁/σ_k > 1e6``; other shapes take the QR/SVD route directly.
    All-zero rows are dropped for SelfCluster with a ``RuntimeWarning`` naming their count.

    Args:
        embeddings: ``[N, D]`` float tensor or array.
        reference: google-research formulas (one NumPy SVD) instead of the defaults.
            (default: ``False``)
        nan_policy: ``"raise"`` or ``"drop_rows"`` for rows with NaN/Inf. (default: ``"raise"``)
        chunk_size: rows per chunk of the Gram accumulation. (default: ``8192``)
        method: ``"auto"`` (Gram route with safety net when ``N > D``, QR/SVD route otherwise)
            or ``"svd"`` (QR/SVD route always, slower for tall matrices). (default: ``"auto"``)

    Returns:
        ``{"rankme", "rankme_normalized", "effective_rank", "alpha_req", "nesum",
        "stable_rank", "condition_number", "coherence", "self_cluster",
        "selfcluster_zero_rows"}`` as Python floats; ``selfcluster_zero_rows`` counts the
        all-zero rows (dropped for SelfCluster, kept with ``reference=True``).
    """
    _check_chunk_size(chunk_size)
    _check_method(method)
    x = _validate(embeddings, nan_policy)
    n, d = x.shape
    if reference:
        return _reference_suite(x)
    a = _analyze(
        x,
        plain=True,
        centered=True,
        leverage=True,
        self_cluster=True,
        chunk_size=chunk_size,
        method=method,
    )
    _warn_zero_rows(a.sc_zero_rows, n)
    assert a.plain is not None and a.centered is not None
    rm = _rankme_from(a.plain, 0.0)
    return {
        "rankme": rm,
        "rankme_normalized": rm / min(n, d),
        "effective_rank": _rankme_from(a.centered, 0.0),
        "alpha_req": _alpha_from(a.centered, (11, 100), True),
        "nesum": _nesum_from(a.centered),
        "stable_rank": _stable_rank_from(a.frob2, a.plain),
        "condition_number": _condition_from(a.plain, False, "last"),
        "coherence": _coherence_from(a, "both"),
        "self_cluster": a.sc_value,
        "selfcluster_zero_rows": float(a.sc_zero_rows),
    }


def _reference_suite(x: Tensor) -> dict[str, float]:
    xn = _np64(x)
    n, d = xn.shape
    u, s = _ref_svd(xn, compute_uv=True)
    assert u is not None
    rm = _ref_rankme(s)
    s_c = _ref_svd(xn - xn.mean(axis=0), compute_uv=False)[1]
    return {
        "rankme": rm,
        "rankme_normalized": rm / min(n, d),
        "effective_rank": _ref_rankme(s_c),
        "alpha_req": _ref_alpha(s),
        "nesum": _ref_nesum(xn),
        "stable_rank": _ref_stable_rank(xn, s),
        "condition_number": _ref_condition(s),
        "coherence": _ref_coherence(u),
        "self_cluster": _ref_self_cluster(xn),
        "selfcluster_zero_rows": float(int((np.abs(xn).sum(axis=1) == 0).sum())),
    }
