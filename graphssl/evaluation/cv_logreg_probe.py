"""GRACE's evaluation: logistic regression on L2-normalised embeddings, ``C`` by inner CV.

GRACE (Zhu et al., 2020) and GCA (Zhu et al., WWW 2021) evaluate node embeddings with
scikit-learn (``eval.py`` of CRIPAC-DIG/GRACE): every row is scaled to unit L2 norm, a
one-vs-rest ``LogisticRegression(solver="liblinear")`` is fitted on the training rows, and ``C``
is chosen from ``2^-10 … 2^9`` by a 5-fold grid search on those rows; the test rows are
predicted once, by the refitted best model. graphssl's default probe is
:class:`~graphssl.evaluation.logreg_probe.LogRegProbe` (standardised features, L2 chosen on
the validation split); this one exists to tell protocol differences from method differences
next to GRACE's published numbers (``benchmarks/quality.py``; the GRACE presets log it as
``probe/grace/*``).

GRACE evaluates on a random split (10 % of the nodes for training, the rest for testing),
``benchmarks/quality.py`` on the public Planetoid split (20 training nodes per class), as the
GraphMAE paper's table does. Two details of the probe differ from the reference, on purpose:
the reference one-hot encodes the labels, so
its grid search scores the *multilabel* predictions (a row counts as right only when exactly
its class clears 0.5), while here every fold is scored by the accuracy of the arg-max class —
what the reference reports on the test rows; and the inner folds are stratified and seeded
(``seed``), where the reference's are unshuffled folds of an already shuffled random split.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from graphssl.evaluation._checks import as_float_matrix
from graphssl.evaluation._deprecated import old_names
from graphssl.evaluation.grid_search import (
    check_inner_folds,
    positive_grid,
    stratified_grid_search,
)
from graphssl.evaluation.probe import Probe
from graphssl.evaluation.probe_inputs import ArrayLike, prepare_inputs

__all__ = ["GRACE_C_GRID", "CVLogRegProbe"]

#: The reference's grid, ``2.0 ** np.arange(-10, 10)``.
GRACE_C_GRID: tuple[float, ...] = tuple(2.0**k for k in range(-10, 10))


class CVLogRegProbe(Probe):
    """One-vs-rest logistic regression with ``C`` selected by stratified inner cross-validation
    on the training rows.

    Args:
        C: candidate inverse regularisation strengths (default: GRACE's ``2^-10 … 2^9``).
        normalize: scale every embedding to unit L2 norm first (default: ``True``, GRACE's).
        inner_folds: folds of the grid search on the training rows (default: ``5``); fewer when
            the rarest training class has fewer rows.
        seed: seed of the inner fold assignment (default: ``0``).

    Attributes (after :meth:`fit`):
        best_estimator_: the scikit-learn one-vs-rest model refitted with the selected ``C``.
        C_: the selected ``C``.
        cv_acc_: its mean inner-CV accuracy.
    """

    def __init__(
        self,
        C: Sequence[float] = GRACE_C_GRID,
        normalize: bool = True,
        inner_folds: int = 5,
        seed: int = 0,
    ) -> None:
        if not isinstance(normalize, bool):
            raise ValueError(f"normalize must be true or false, got {normalize!r}")
        self.C = positive_grid(C)
        self.normalize = normalize
        self.inner_folds = check_inner_folds(inner_folds)
        self.seed = seed

    def fit(
        self, embeddings: ArrayLike, labels: ArrayLike | None, train_mask: ArrayLike
    ) -> CVLogRegProbe:
        """Grid-search ``C`` on the training rows and refit the best model on them."""
        x, y, idx = prepare_inputs(embeddings, labels, {"train_mask": train_mask})
        train = idx["train_mask"]
        self._fit(self._features(x), self.targets(y, train), train)
        return self

    def predict(self, embeddings: ArrayLike) -> np.ndarray:
        """Class ids ``[M]`` for the rows of ``embeddings`` ``[M, D]``."""
        if not hasattr(self, "best_estimator_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit() or evaluate()")
        return self.best_estimator_.predict(self._features(as_float_matrix(embeddings)))

    # ---------------------------------------------------------------- internals
    def _evaluate(self, x: Tensor, targets: Tensor, rows: dict[str, Tensor]) -> dict[str, Any]:
        """Grid-search ``C`` on the training rows, refit on them, predict validation and test.

        Returns:
            ``train_acc``, ``val_acc`` and ``test_acc`` of the refitted model (the validation
            split plays no part in the choice), ``cv_acc`` (the best mean inner-CV accuracy)
            and the selected ``C``.
        """
        x_np, y_np = self._features(x), targets.cpu().numpy()
        self._fit(x_np, targets, rows["train"])
        model = self.best_estimator_
        part = {k: v.cpu().numpy() for k, v in rows.items()}

        def accuracy(split: str) -> float:
            r = part[split]
            return float(np.mean(model.predict(x_np[r]) == y_np[r])) if r.size else 0.0

        return {
            "train_acc": accuracy("train"),
            "val_acc": accuracy("val"),
            "test_acc": accuracy("test"),
            "cv_acc": self.cv_acc_,
            "C": self.C_,
        }

    def _features(self, x: Tensor) -> np.ndarray:
        """``x`` (unit rows when ``normalize``) as a NumPy array."""
        if self.normalize:
            x = torch.nn.functional.normalize(x, dim=1)
        return x.cpu().numpy()

    def _fit(self, x_np: np.ndarray, targets: Tensor, train: Tensor) -> None:
        from sklearn.linear_model import LogisticRegression
        from sklearn.multiclass import OneVsRestClassifier

        search = stratified_grid_search(
            OneVsRestClassifier(LogisticRegression(solver="liblinear")),
            {"estimator__C": self.C},
            x_np[train.cpu().numpy()],
            targets[train],
            inner_folds=self.inner_folds,
            seed=self.seed,
            probe=type(self).__name__,
        )
        self.best_estimator_ = search.best_estimator_
        self.C_ = float(search.best_params_["estimator__C"])
        self.cv_acc_ = float(search.best_score_)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(C={self.C}, normalize={self.normalize}, "
            f"inner_folds={self.inner_folds}, seed={self.seed})"
        )


#: class names before the rename, answered for one release with a DeprecationWarning
__getattr__ = old_names(__name__, {"CVLogRegEvaluator": "CVLogRegProbe"})
