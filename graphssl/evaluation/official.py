"""A benchmark's own scorer beside graphssl's probes: OGB's ``Evaluator`` on the probes'
test predictions.

OGB datasets score submissions with their own ``Evaluator`` (accuracy for ogbn-arxiv and
ogbn-products, ROC-AUC for ogbg-molhiv). :func:`official_metrics` fits each classification probe
on the training rows of every split (and selects on the validation rows, as the probe does),
predicts the test rows and hands ``(y_true, y_pred)`` to that scorer, so a run reports OGB's
number computed by OGB's code next to graphssl's: ``ogb_test_<metric>`` per probe (the mean
over splits when there are several).

Accuracy uses the predicted class ids (``probe.predict``); ROC-AUC needs scores: the
probabilities of ``predict_proba`` or, for linear probes, the logits of ``decision_function``
(softmax over the classes; the positive class's column for binary labels, every task's
column for multilabel). A probe that offers neither (kNN) is skipped with a log line.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from graphssl.utils import SplitLike

__all__ = ["OFFICIAL_METRICS", "official_metrics"]

log = logging.getLogger(__name__)

#: the scorers :func:`official_metrics` knows how to feed
OFFICIAL_METRICS = ("acc", "rocauc")


def _fit(probe: Any, z: Tensor, y: Tensor, split: SplitLike) -> None:
    params = inspect.signature(probe.fit).parameters
    if "val_mask" in params:
        probe.fit(z, y, split.train, split.val)
    else:
        probe.fit(z, y, split.train)


def _scores(probe: Any, z: Tensor) -> Tensor | None:
    """Positive-class (or per-task) scores of the rows ``z``, or ``None`` when the probe
    gives no scores."""
    proba = getattr(probe, "predict_proba", None)
    if callable(proba):
        p = torch.as_tensor(proba(z))
    else:
        decision = getattr(probe, "decision_function", None)
        if not callable(decision):
            return None
        logits = torch.as_tensor(decision(z))
        if getattr(probe, "multilabel", False):
            return torch.sigmoid(logits)
        p = torch.softmax(logits, dim=1)
    if getattr(probe, "multilabel", False) or p.ndim == 1:
        return p
    classes = getattr(probe, "classes_", None)
    ids = classes.tolist() if classes is not None else list(range(p.shape[1]))
    if sorted(ids) != [0, 1]:
        return None  # ROC-AUC of a single-label task needs two classes {0, 1}
    return p[:, ids.index(1)]


def official_metrics(
    embeddings: Tensor,
    labels: Tensor,
    splits: Sequence[SplitLike],
    probes: Mapping[str, Any],
    evaluator: Callable[[Any, Any], float],
    metric: str,
) -> dict[str, float]:
    """``probe/<name>/ogb_test_<metric>`` of every probe that can feed ``evaluator``.

    Args:
        embeddings: ``[N, D]`` embeddings.
        labels: the dataset's labels ``[N]`` (or ``[N, T]``).
        splits: the train/val/test splits (several: the mean over them).
        probes: unfitted probes by name, each with ``fit`` and ``predict`` (fitted here).
        evaluator: ``(y_true, y_pred) -> score`` on the test rows.
        metric: what ``evaluator`` computes, one of :data:`OFFICIAL_METRICS`.

    Raises:
        ValueError: ``metric`` is not one of :data:`OFFICIAL_METRICS`.
    """
    if metric not in OFFICIAL_METRICS:
        raise ValueError(
            f"the dataset's official metric is {metric!r}; graphssl feeds only "
            f"{OFFICIAL_METRICS} from its probes"
        )
    out: dict[str, float] = {}
    for name, probe in probes.items():
        if not (
            callable(getattr(probe, "fit", None)) and callable(getattr(probe, "predict", None))
        ):
            log.info("probe %r has no fit/predict: no OGB %s for it", name, metric)
            continue
        values: list[float] = []
        for split in splits:
            _fit(probe, embeddings, labels, split)
            z_test, y_test = embeddings[split.test], labels[split.test]
            pred = probe.predict(z_test) if metric == "acc" else _scores(probe, z_test)
            if pred is None:
                break
            values.append(float(evaluator(y_test, pred)))
        if not values:
            log.info(
                "probe %r gives no class scores (no predict_proba or decision_function): "
                "no OGB %s for it",
                name,
                metric,
            )
            continue
        out[f"probe/{name}/ogb_test_{metric}"] = sum(values) / len(values)
    return out
