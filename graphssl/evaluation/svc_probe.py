"""The graph papers' evaluation: an RBF-kernel SVM with ``C`` chosen by inner cross-validation.

InfoGraph (Sun et al., ICLR 2020) and GraphCL (You et al., NeurIPS 2020) evaluate graph
embeddings with scikit-learn's ``SVC`` (RBF kernel, default ``gamma="scale"``) in a stratified
10-fold cross-validation, choosing ``C`` from ``{1e-3, …, 1e3}`` by a 5-fold grid search on each
training fold (``evaluate_embedding.py`` of fanyun-sun/InfoGraph). graphssl's default probe is
:class:`~graphssl.evaluation.logreg_probe.LogRegProbe`; this one exists to tell protocol
differences from method differences next to published numbers (``benchmarks/quality.py``,
``eval=graph_papers``).

Our folds have a validation part; as in the papers, the grid search runs on the whole training
fold (``train ∪ val``), and the test part is only predicted once, by the refitted best model.
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

__all__ = ["SVCProbe"]

_KERNELS = ("rbf", "linear", "poly", "sigmoid")


class SVCProbe(Probe):
    """Support-vector classifier with ``C`` selected by stratified inner cross-validation.

    Args:
        C: candidate regularisation constants (default: ``1e-3 … 1e3``, the papers' grid).
        kernel: ``"rbf"`` (the papers'), ``"linear"``, ``"poly"`` or ``"sigmoid"``.
        inner_folds: folds of the grid search on the training rows (default: ``5``).
        seed: seed of the inner fold assignment (default: ``0``).

    Attributes (after :meth:`fit`):
        best_estimator_: the scikit-learn ``SVC`` refitted with the selected ``C``.
        C_: the selected ``C``.
        cv_acc_: its mean inner-CV accuracy.
    """

    def __init__(
        self,
        C: Sequence[float] = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0),
        kernel: str = "rbf",
        inner_folds: int = 5,
        seed: int = 0,
    ) -> None:
        if kernel not in _KERNELS:
            raise ValueError(f"kernel must be one of {_KERNELS}, got {kernel!r}")
        self.C = positive_grid(C)
        self.kernel = kernel
        self.inner_folds = check_inner_folds(inner_folds)
        self.seed = seed

    def fit(
        self,
        embeddings: ArrayLike,
        labels: ArrayLike | None,
        train_mask: ArrayLike,
        val_mask: ArrayLike,
    ) -> SVCProbe:
        """Grid-search ``C`` on ``train ∪ val`` and refit the best model on those rows."""
        x, y, idx = prepare_inputs(
            embeddings, labels, {"train_mask": train_mask, "val_mask": val_mask}
        )
        fit_rows = torch.cat([idx["train_mask"], idx["val_mask"]])
        self._fit(x.cpu().numpy(), self.targets(y, fit_rows), fit_rows)
        return self

    def predict(self, embeddings: ArrayLike) -> np.ndarray:
        """Class ids ``[M]`` for the rows of ``embeddings`` ``[M, D]``."""
        if not hasattr(self, "best_estimator_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit() or evaluate()")
        return self.best_estimator_.predict(as_float_matrix(embeddings).cpu().numpy())

    @property
    def per_split_keys(self) -> tuple[str, ...]:
        """``C``: each outer fold's grid search selects its own (``probe/<name>/C_fold<i>``)."""
        return ("C",)

    # ---------------------------------------------------------------- internals
    def _evaluate(self, x: Tensor, targets: Tensor, rows: dict[str, Tensor]) -> dict[str, Any]:
        """Grid-search ``C`` on ``train ∪ val``, refit, and predict ``test``.

        Returns:
            ``train_acc`` (of the refitted model on ``train ∪ val``), ``val_acc`` (the best
            mean inner-CV accuracy), ``test_acc`` and the selected ``C``.
        """
        fit_rows = torch.cat([rows["train"], rows["val"]])
        x_np = x.cpu().numpy()
        y_np = targets.cpu().numpy()
        self._fit(x_np, targets, fit_rows)
        model = self.best_estimator_
        fit_np, test_np = fit_rows.cpu().numpy(), rows["test"].cpu().numpy()
        test_acc = (
            float(np.mean(model.predict(x_np[test_np]) == y_np[test_np])) if test_np.size else 0.0
        )
        return {
            "train_acc": float(np.mean(model.predict(x_np[fit_np]) == y_np[fit_np])),
            "val_acc": self.cv_acc_,
            "test_acc": test_acc,
            "C": self.C_,
        }

    def _fit(self, x_np: np.ndarray, targets: Tensor, fit_rows: Tensor) -> None:
        from sklearn.svm import SVC

        search = stratified_grid_search(
            SVC(kernel=self.kernel),
            {"C": self.C},
            x_np[fit_rows.cpu().numpy()],
            targets[fit_rows],
            inner_folds=self.inner_folds,
            seed=self.seed,
            probe=type(self).__name__,
        )
        self.best_estimator_ = search.best_estimator_
        self.C_ = float(search.best_params_["C"])
        self.cv_acc_ = float(search.best_score_)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(C={self.C}, kernel={self.kernel!r}, "
            f"inner_folds={self.inner_folds}, seed={self.seed})"
        )


#: class names before the rename, answered for one release with a DeprecationWarning
__getattr__ = old_names(__name__, {"SVCEvaluator": "SVCProbe"})
