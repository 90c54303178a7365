"""Unsupervised embedding-quality diagnostics of an ``[N, D]`` embedding matrix.

:func:`embedding_diagnostics` computes the whole suite from one decomposition; one function per
metric (:mod:`~graphssl.evaluation.diagnostics.metrics`) computes each alone. The spectral core
(validation, chunked float64 Gram accumulation, singular values with a QR/SVD safety net) is
:mod:`~graphssl.evaluation.diagnostics.spectral`; ``reference=True`` applies the survey authors'
formulas from :mod:`~graphssl.evaluation.diagnostics.reference`.
"""

from graphssl.evaluation.diagnostics.metrics import (
    alpha_req,
    coherence,
    condition_number,
    effective_rank,
    mean_cosine,
    mean_norm,
    nesum,
    rankme,
    rankme_normalized,
    self_cluster,
    stable_rank,
)
from graphssl.evaluation.diagnostics.spectral import DEFAULT_CHUNK_SIZE, Method
from graphssl.evaluation.diagnostics.suite import HIGHER_IS_BETTER, embedding_diagnostics

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "HIGHER_IS_BETTER",
    "Method",
    "alpha_req",
    "coherence",
    "condition_number",
    "effective_rank",
    "embedding_diagnostics",
    "mean_cosine",
    "mean_norm",
    "nesum",
    "rankme",
    "rankme_normalized",
    "self_cluster",
    "stable_rank",
]
