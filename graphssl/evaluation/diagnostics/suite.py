"""The whole diagnostics suite from one decomposition: :func:`embedding_diagnostics`."""

from __future__ import annotations

import numpy as np
from torch import Tensor

from graphssl.evaluation._checks import NanPolicy
from graphssl.evaluation.diagnostics.metrics import (
    alpha_from,
    coherence_from,
    condition_from,
    mean_cosine_from,
    mean_norm_from,
    nesum_from,
    rankme_from,
    stable_rank_from,
)
from graphssl.evaluation.diagnostics.reference import reference_suite
from graphssl.evaluation.diagnostics.spectral import (
    DEFAULT_CHUNK_SIZE,
    Method,
    analyze,
    check_chunk_size,
    check_method,
    row_directions,
    validate,
    warn_zero_rows,
)

__all__ = ["HIGHER_IS_BETTER", "embedding_diagnostics"]

#: Whether a larger value means a better embedding, per metric key of
#: :func:`embedding_diagnostics` (``None``: no direction holds in general, the experiment decides;
#: e.g. SelfCluster and coherence correlate positively with accuracy only on some data; a mean
#: cosine near 1 means every row points the same way).
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
    "mean_cosine": False,
    "mean_norm": None,
}


def embedding_diagnostics(
    embeddings: Tensor | np.ndarray,
    *,
    reference: bool = False,
    nan_policy: NanPolicy = "raise",
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    method: Method = "auto",
) -> dict[str, float]:
    """Every diagnostic from one decomposition, with default options.

    Equal (to round-off) to calling each metric function. With ``method="auto"``, tall
    matrices (``N > D``) take the Gram route of
    :func:`~graphssl.evaluation.diagnostics.spectral.analyze`: float64 Gram
    matrices accumulated over ``chunk_size`` rows, ``eigh`` on ``D × D``, a QR/SVD safety net
    when ``σ₁/σ_k > 1e6``; other shapes take the QR/SVD route directly.
    All-zero rows are dropped for SelfCluster and the mean cosine with a ``RuntimeWarning``
    naming their count. The mean cosine and mean norm come from one more ``O(N·D)`` pass.

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
        "selfcluster_zero_rows", "mean_cosine", "mean_norm"}`` as Python floats;
        ``selfcluster_zero_rows`` counts the all-zero rows (dropped for SelfCluster and the mean
        cosine; SelfCluster keeps them with ``reference=True``).
    """
    check_chunk_size(chunk_size)
    check_method(method)
    x = validate(embeddings, nan_policy)
    n, d = x.shape
    rows = row_directions(x, chunk_size)
    directions = {"mean_cosine": mean_cosine_from(rows), "mean_norm": mean_norm_from(rows)}
    if reference:
        warn_zero_rows(n - rows.kept, n, "mean_cosine")
        return reference_suite(x) | directions
    a = analyze(
        x,
        plain=True,
        centered=True,
        leverage=True,
        self_cluster=True,
        chunk_size=chunk_size,
        method=method,
    )
    warn_zero_rows(a.sc_zero_rows, n, "self_cluster and mean_cosine")
    assert a.plain is not None and a.centered is not None
    rm = rankme_from(a.plain, 0.0)
    return {
        "rankme": rm,
        "rankme_normalized": rm / min(n, d),
        "effective_rank": rankme_from(a.centered, 0.0),
        "alpha_req": alpha_from(a.centered, (11, 100), True),
        "nesum": nesum_from(a.centered),
        "stable_rank": stable_rank_from(a.frob2, a.plain),
        "condition_number": condition_from(a.plain, False, "last"),
        "coherence": coherence_from(a, "both"),
        "self_cluster": a.sc_value,
        "selfcluster_zero_rows": float(a.sc_zero_rows),
        **directions,
    }
