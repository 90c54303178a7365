"""EMIR: information sufficiency between embedders and embedder informativeness.

Darrin et al., *When is an Embedding Model More Promising than Another?*, NeurIPS 2024
(https://arxiv.org/abs/2406.07640). For two embedders of the same N inputs, ``U`` ``[N, d_U]``
(source) and ``Z`` ``[N, d_Z]`` (target)::

    I_S(U -> Z) = H(Z) - H(Z | U)          (nats; asymmetric)

estimated with KNIFE Gaussian mixtures (:mod:`~graphssl.evaluation.emir.knife`), for every
ordered pair of embedders (:mod:`~graphssl.evaluation.emir.pairwise`). Pairs are turned into a
model score by :func:`informativeness` (median over reference targets of ``I_S(U -> Z) / d_Z``;
higher is better), and into a predictiveness graph whose Louvain communities group embedders that
carry the same information (:mod:`~graphssl.evaluation.emir.graph`). Every pair is scored both
on the rows its kernels were fitted on (in-sample, the authors' choice) and on held-out rows;
:func:`emir_reliability` says when a comparison is too small for the two to agree.
:func:`cross_encoder_l2` is the reconstruction-error baseline
(:mod:`~graphssl.evaluation.emir.cross_encoder`; lower is better).
"""

from graphssl.evaluation.emir.config import (
    CONDITIONAL_ENTROPY_FLOOR_PER_DIM,
    GAUSSIAN_ENTROPY_PER_DIM,
    EMIRConfig,
    EMIRResult,
)
from graphssl.evaluation.emir.cross_encoder import (
    cross_encoder_l2,
    cross_encoder_ranking,
    pairwise_cross_encoder_l2,
)
from graphssl.evaluation.emir.graph import communities, informativeness, predictiveness_graph
from graphssl.evaluation.emir.inputs import zscore
from graphssl.evaluation.emir.knife import (
    ConditionalKernel,
    MarginalKernel,
    fit_conditional,
    fit_marginal,
    information_sufficiency,
)
from graphssl.evaluation.emir.pairwise import PairwiseEMIR, pairwise_information_sufficiency
from graphssl.evaluation.emir.reliability import (
    MIN_EMBEDDERS,
    MIN_ROWS_PER_TARGET_DIM,
    emir_reliability,
)
from graphssl.evaluation.emir.stacked import StackedConditionalKernel

__all__ = [
    "CONDITIONAL_ENTROPY_FLOOR_PER_DIM",
    "GAUSSIAN_ENTROPY_PER_DIM",
    "MIN_EMBEDDERS",
    "MIN_ROWS_PER_TARGET_DIM",
    "ConditionalKernel",
    "EMIRConfig",
    "EMIRResult",
    "MarginalKernel",
    "PairwiseEMIR",
    "StackedConditionalKernel",
    "communities",
    "cross_encoder_l2",
    "cross_encoder_ranking",
    "emir_reliability",
    "fit_conditional",
    "fit_marginal",
    "information_sufficiency",
    "informativeness",
    "pairwise_cross_encoder_l2",
    "pairwise_information_sufficiency",
    "predictiveness_graph",
    "zscore",
]
