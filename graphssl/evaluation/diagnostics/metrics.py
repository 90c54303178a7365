"""The diagnostics, one function per metric, each returning a Python float.

Every metric takes embeddings ``X`` (rows = items) as a tensor or array. The definitions follow
the original papers, with the typos of the survey that collects them fixed:

* RankMe / effective rank -- Roy & Vetterli, EUSIPCO 2007; Garrido et al., ICML 2023,
  https://arxiv.org/abs/2210.02885 (``exp`` of the entropy of the normalized singular values).
* alpha-ReQ -- Agrawal et al., NeurIPS 2022,
  https://proceedings.neurips.cc/paper_files/paper/2022/hash/70596d70542c51c8d9b4e423f4bf2736-Abstract-Conference.html
  (power-law decay of the covariance eigenvalues, fitted as in the authors' ``reptrix``).
* NESum -- He & Ozay, ICML 2022, https://arxiv.org/abs/2207.06367 (sum of covariance eigenvalues
  over the largest one).
* Stable rank, pseudo-condition number, coherence and SelfCluster -- Tsitsulin, Munkhoeva &
  Perozzi, *Unsupervised Embedding Quality Evaluation*, 2023, https://arxiv.org/abs/2305.16562.
* Mean cosine and mean norm -- directional collapse: rows that all point nearly the same way
  while their centered spectrum still looks healthy.

``reference=True`` applies the survey authors' formulas instead
(:mod:`~graphssl.evaluation.diagnostics.reference`); the keyword options that code has no
counterpart for are then ignored. The ``*_from`` helpers turn one
:class:`~graphssl.evaluation.diagnostics.spectral.Spectrum` into a metric, so that the suite
computes every metric from one decomposition.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from graphssl.evaluation._checks import NanPolicy
from graphssl.evaluation.diagnostics.reference import (
    as_numpy64,
    ref_alpha,
    ref_coherence,
    ref_condition,
    ref_nesum,
    ref_rankme,
    ref_self_cluster,
    ref_stable_rank,
    ref_svd,
)
from graphssl.evaluation.diagnostics.spectral import (
    DEFAULT_CHUNK_SIZE,
    Analysis,
    RowDirections,
    Spectrum,
    analyze,
    check_chunk_size,
    row_directions,
    validate,
    warn_zero_rows,
)

__all__ = [
    "alpha_from",
    "alpha_req",
    "coherence",
    "coherence_from",
    "condition_from",
    "condition_number",
    "effective_rank",
    "mean_cosine",
    "mean_cosine_from",
    "mean_norm",
    "mean_norm_from",
    "nesum",
    "nesum_from",
    "rankme",
    "rankme_from",
    "rankme_normalized",
    "self_cluster",
    "stable_rank",
    "stable_rank_from",
]


# --------------------------------------------------------------------------------------------
# Metrics from one analysis
# --------------------------------------------------------------------------------------------


def rankme_from(spec: Spectrum, eps: float) -> float:
    total = float(spec.sigma.sum())
    if total <= 0.0:
        return 0.0
    p = spec.sigma / total + eps
    return math.exp(float(torch.special.entr(p).sum()))


def alpha_from(spec: Spectrum, fit_range: tuple[int, int], weighted: bool) -> float:
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


def stable_rank_from(frob2: float, spec: Spectrum) -> float:
    s1 = spec.sigma1
    return 0.0 if s1 == 0.0 else frob2 / (s1 * s1)


def nesum_from(spec: Spectrum) -> float:
    s1 = spec.sigma1
    return 0.0 if s1 == 0.0 else float(spec.sigma.square().sum()) / (s1 * s1)


def condition_from(spec: Spectrum, reciprocal: bool, sigma_min: str) -> float:
    s1 = spec.sigma1
    if s1 == 0.0:
        return math.nan
    s_min = float(spec.sigma[-1]) if sigma_min == "last" else float(spec.sigma[spec.rank - 1])
    if reciprocal:
        return s_min / s1
    return math.inf if s_min == 0.0 else s1 / s_min


def coherence_from(a: Analysis, side: str) -> float:
    if side == "U":
        return a.mu_u
    if side == "V":
        return a.mu_v
    return max(a.mu_u, a.mu_v) if not math.isnan(a.mu_u) else math.nan


def mean_cosine_from(rows: RowDirections) -> float:
    """``(‖Σ_i u_i‖² − m) / (m(m − 1))`` over the ``m`` kept unit rows; NaN for ``m < 2``.

    Clipped to its attainable range ``[−1/(m − 1), 1]``, which only removes round-off.
    """
    m = rows.kept
    if m < 2:
        return math.nan
    s2 = float(rows.unit_sum.square().sum())
    value = (s2 - m) / (m * (m - 1))
    return min(max(value, -1.0 / (m - 1)), 1.0)


def mean_norm_from(rows: RowDirections) -> float:
    """``Σ_i ‖x_i‖ / N`` over every row (all-zero rows included)."""
    return rows.norm_sum / rows.n


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
    return _rankme(validate(embeddings, nan_policy), center, eps, reference)


def _rankme(x: Tensor, center: bool, eps: float, reference: bool) -> float:
    if reference:
        xn = as_numpy64(x)
        if center:
            xn = xn - xn.mean(axis=0)
        return ref_rankme(ref_svd(xn, compute_uv=False)[1])
    a = analyze(x, plain=not center, centered=center)
    spec = a.centered if center else a.plain
    assert spec is not None
    return rankme_from(spec, eps)


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
    x = validate(embeddings, nan_policy)
    if reference:
        xn = as_numpy64(x)
        return ref_rankme(ref_svd(xn - xn.mean(axis=0), compute_uv=False)[1])
    spec = analyze(x, centered=True).centered
    assert spec is not None
    if float(spec.sigma.sum()) <= eps:
        return 0.0
    return rankme_from(spec, 0.0)


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
    x = validate(embeddings, nan_policy)
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
    x = validate(embeddings, nan_policy)
    if reference:
        return ref_alpha(ref_svd(as_numpy64(x), compute_uv=False)[1])
    a = analyze(x, plain=not center, centered=center)
    spec = a.centered if center else a.plain
    assert spec is not None
    return alpha_from(spec, lo_hi, weighted)


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
    x = validate(embeddings, nan_policy)
    if reference:
        return ref_nesum(as_numpy64(x))
    spec = analyze(x, centered=True).centered
    assert spec is not None
    return nesum_from(spec)


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
    x = validate(embeddings, nan_policy)
    if reference:
        xn = as_numpy64(x)
        return ref_stable_rank(xn, ref_svd(xn, compute_uv=False)[1])
    a = analyze(x, plain=True)
    assert a.plain is not None
    return stable_rank_from(a.frob2, a.plain)


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
    x = validate(embeddings, nan_policy)
    if reference:
        return ref_condition(ref_svd(as_numpy64(x), compute_uv=False)[1])
    a = analyze(x, plain=True)
    assert a.plain is not None
    return condition_from(a.plain, reciprocal, sigma_min)


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
    x = validate(embeddings, nan_policy)
    if reference:
        u, _ = ref_svd(as_numpy64(x), compute_uv=True)
        assert u is not None
        return ref_coherence(u)
    return coherence_from(analyze(x, leverage=True), side)


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
    x = validate(embeddings, nan_policy)
    if reference:
        return ref_self_cluster(as_numpy64(x))
    a = analyze(x, self_cluster=True, sc_center=center)
    warn_zero_rows(a.sc_zero_rows, a.n)
    return a.sc_value


def mean_cosine(
    embeddings: Tensor | np.ndarray,
    *,
    nan_policy: NanPolicy = "raise",
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> float:
    """Mean cosine similarity of the rows over ordered pairs ``i ≠ j``: directional collapse.

    With ``u_i = x_i / ‖x_i‖`` (all-zero rows dropped, with a warning), ``m`` rows left,
    ``Σ_{i≠j} u_iᵀu_j = ‖Σ_i u_i‖² − Σ_i ‖u_i‖²``, so

        ``mean_cosine = (‖Σ_i u_i‖² − m) / (m(m − 1))``

    exactly, in ``O(N·D)`` time and ``O(D)`` extra memory: no ``N × N`` matrix. 1 when every row
    points the same way, about 0 for isotropic rows, at least ``−1/(m − 1)``. Embeddings can
    collapse towards one direction (mean cosine near 1) while their centered rank stays high,
    which the spectral metrics do not see. NaN when fewer than 2 non-zero rows remain. Raw
    embeddings, no centering.

    Args:
        embeddings: ``[N, D]`` float tensor or array.
        nan_policy: ``"raise"`` or ``"drop_rows"`` for rows with NaN/Inf. (default: ``"raise"``)
        chunk_size: rows per float64 chunk. (default: ``8192``)

    Returns:
        The mean cosine as a Python float.
    """
    check_chunk_size(chunk_size)
    rows = row_directions(validate(embeddings, nan_policy), chunk_size)
    warn_zero_rows(rows.n - rows.kept, rows.n, "mean_cosine")
    return mean_cosine_from(rows)


def mean_norm(
    embeddings: Tensor | np.ndarray,
    *,
    nan_policy: NanPolicy = "raise",
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> float:
    """Mean L2 norm of the rows, ``Σ_i ‖x_i‖ / N`` (raw embeddings, float64 accumulation).

    The scale the other diagnostics are blind to: a probe trained for a fixed number of steps
    on raw embeddings (not standardised) sees tiny norms as almost constant inputs.

    Args:
        embeddings: ``[N, D]`` float tensor or array.
        nan_policy: ``"raise"`` or ``"drop_rows"`` for rows with NaN/Inf. (default: ``"raise"``)
        chunk_size: rows per float64 chunk. (default: ``8192``)

    Returns:
        The mean norm as a Python float.
    """
    check_chunk_size(chunk_size)
    return mean_norm_from(row_directions(validate(embeddings, nan_policy), chunk_size))
