"""Reference mode: the formulas of the survey authors' code, to compare with their numbers.

Tsitsulin, Munkhoeva & Perozzi, *Unsupervised Embedding Quality Evaluation*, 2023
(https://arxiv.org/abs/2305.16562), reference code ``google-research/graph_embedding/metrics/
metrics.py``: raw (uncentered) embeddings, one NumPy SVD, and ``1e-12`` added where that code adds
it. These differ from the definitions in :mod:`~graphssl.evaluation.diagnostics.metrics` on
purpose (e.g. the "condition number" is ``σ_k / (σ₁ + 1e-12)``, the reciprocal), and are used only
with ``reference=True``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "REF_EPS",
    "as_numpy64",
    "ref_alpha",
    "ref_coherence",
    "ref_condition",
    "ref_nesum",
    "ref_rankme",
    "ref_self_cluster",
    "ref_stable_rank",
    "ref_svd",
    "reference_suite",
]

#: epsilon of the reference formulas.
REF_EPS = 1e-12


def as_numpy64(x: Tensor) -> np.ndarray:
    return x.detach().to(device="cpu", dtype=torch.float64).numpy()


def ref_rankme(s: np.ndarray) -> float:
    p = s / np.sum(s + REF_EPS) + REF_EPS
    return float(np.exp(-np.sum(p * np.log(p))))


def ref_coherence(u: np.ndarray) -> float:
    return float(np.linalg.norm(u, axis=1).max() ** 2 * u.shape[0] / u.shape[1])


def ref_condition(s: np.ndarray) -> float:
    return float(s[-1] / (s[0] + REF_EPS))


def ref_alpha(s: np.ndarray) -> float:
    k = s.shape[0]
    feats = np.vstack([np.linspace(1, 0, k), np.ones(k)]).T
    coef = np.linalg.lstsq(feats, np.log(s + REF_EPS), rcond=None)[0]
    return float(coef[0])


def ref_stable_rank(x: np.ndarray, s: np.ndarray) -> float:
    return float(np.square(x).sum() / (s[0] * s[0] + REF_EPS))


def ref_nesum(x: np.ndarray) -> float:
    if x.shape[0] < 2:
        return math.nan  # np.cov with one row divides by zero
    cov = np.atleast_2d(np.cov(x.T))
    ev = np.linalg.eigvalsh(cov) + REF_EPS
    return float((ev / ev[-1]).sum())


def ref_self_cluster(x: np.ndarray) -> float:
    w = x + REF_EPS
    w = w / np.linalg.norm(w, axis=1)[:, None]
    n, d = w.shape
    expected = n + n * (n - 1) / d
    actual = float(np.square(w.T @ w).sum())  # = Σ (W Wᵀ)², without the N × N matrix
    denominator = n * n - expected  # 0 for N = 1 or D = 1, where GR's NumPy code gives NaN
    return (actual - expected) / denominator if denominator != 0 else math.nan


def ref_svd(x: np.ndarray, compute_uv: bool) -> tuple[np.ndarray | None, np.ndarray]:
    if compute_uv:
        u, s, _ = np.linalg.svd(x, full_matrices=False)
        return u, s
    return None, np.linalg.svd(x, compute_uv=False)


def reference_suite(x: Tensor) -> dict[str, float]:
    """The spectral metrics of the suite from the reference formulas (one SVD of ``X``, one of
    ``X_c``)."""
    xn = as_numpy64(x)
    n, d = xn.shape
    u, s = ref_svd(xn, compute_uv=True)
    assert u is not None
    rm = ref_rankme(s)
    s_c = ref_svd(xn - xn.mean(axis=0), compute_uv=False)[1]
    return {
        "rankme": rm,
        "rankme_normalized": rm / min(n, d),
        "effective_rank": ref_rankme(s_c),
        "alpha_req": ref_alpha(s),
        "nesum": ref_nesum(xn),
        "stable_rank": ref_stable_rank(xn, s),
        "condition_number": ref_condition(s),
        "coherence": ref_coherence(u),
        "self_cluster": ref_self_cluster(xn),
        "selfcluster_zero_rows": float(int((np.abs(xn).sum(axis=1) == 0).sum())),
    }
