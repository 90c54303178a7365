"""graphssl's evaluation layer: extraction, diagnostics, probes and EMIR.

Everything here consumes tensors (embeddings, labels, masks); nothing imports a method.
"""

from graphssl.evaluation._deprecated import old_names
from graphssl.evaluation.aggregate import mean_std
from graphssl.evaluation.diagnostics import (
    HIGHER_IS_BETTER,
    alpha_req,
    coherence,
    condition_number,
    effective_rank,
    embedding_diagnostics,
    mean_cosine,
    mean_norm,
    nesum,
    rankme,
    rankme_normalized,
    self_cluster,
    stable_rank,
)
from graphssl.evaluation.emir import (
    EMIRConfig,
    EMIRResult,
    communities,
    cross_encoder_l2,
    cross_encoder_ranking,
    information_sufficiency,
    informativeness,
    pairwise_information_sufficiency,
    predictiveness_graph,
)
from graphssl.evaluation.evaluator import Evaluation, EvaluationResult
from graphssl.evaluation.extraction import extract_embeddings
from graphssl.evaluation.knn_probe import KNNProbe
from graphssl.evaluation.logreg_probe import (
    DEFAULT_WEIGHT_DECAYS,
    SPEC_WEIGHT_DECAYS,
    LogRegProbe,
)
from graphssl.evaluation.probe import Probe
from graphssl.evaluation.ridge_probe import DEFAULT_RIDGE_WEIGHT_DECAYS, RidgeProbe

__all__ = [
    "DEFAULT_RIDGE_WEIGHT_DECAYS",
    "DEFAULT_WEIGHT_DECAYS",
    "HIGHER_IS_BETTER",
    "SPEC_WEIGHT_DECAYS",
    "EMIRConfig",
    "EMIRResult",
    "Evaluation",
    "EvaluationResult",
    "KNNProbe",
    "LogRegProbe",
    "Probe",
    "RidgeProbe",
    "alpha_req",
    "coherence",
    "communities",
    "condition_number",
    "cross_encoder_l2",
    "cross_encoder_ranking",
    "effective_rank",
    "embedding_diagnostics",
    "extract_embeddings",
    "information_sufficiency",
    "informativeness",
    "mean_cosine",
    "mean_norm",
    "mean_std",
    "nesum",
    "pairwise_information_sufficiency",
    "predictiveness_graph",
    "rankme",
    "rankme_normalized",
    "self_cluster",
    "stable_rank",
]


#: probe class names before the rename, answered for one release with a DeprecationWarning
__getattr__ = old_names(
    __name__,
    {"KNNEvaluator": "KNNProbe", "LogRegEvaluator": "LogRegProbe", "RidgeEvaluator": "RidgeProbe"},
)
