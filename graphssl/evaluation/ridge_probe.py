"""Ridge-regression probe on frozen embeddings, for node- or graph-level regression targets.

Closed form from one SVD of the centred training features: no optimiser
and no random initialisation, and the whole L2 grid costs one SVD. float32 embeddings stay
float32: only the training rows, and chunks of the scored rows, are cast to float64.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor

from graphssl.evaluation._checks import as_float_matrix
from graphssl.evaluation._deprecated import old_names
from graphssl.evaluation.probe import Probe, Task
from graphssl.evaluation.probe_inputs import (
    ArrayLike,
    float64_chunks,
    prepare_inputs,
    standardization,
    weight_decay_grid,
)

__all__ = ["DEFAULT_RIDGE_WEIGHT_DECAYS", "RidgeProbe"]

#: L2 strengths tried by :class:`RidgeProbe`, strongest first.
DEFAULT_RIDGE_WEIGHT_DECAYS: tuple[float, ...] = (1e2, 1e1, 1.0, 1e-1, 1e-2, 1e-3, 0.0)


def _as_columns(targets: Tensor) -> Tensor:
    """``[N]`` targets as ``[N, 1]``; ``[N, T]`` unchanged."""
    return targets[:, None] if targets.ndim == 1 else targets


def _errors(pred: Tensor, target: Tensor) -> tuple[float, float]:
    """MAE over all (row, target) entries and RMSE averaged over the targets."""
    diff = pred - target
    mae = float(diff.abs().mean())
    rmse = float(diff.pow(2).mean(dim=0).sqrt().mean())
    return mae, rmse


class RidgeProbe(Probe):
    """Ridge regression on frozen embeddings, for node- or graph-level regression targets.

    Fits mean squared error + ``weight_decay * ||W||²`` (bias not regularised) on the training
    rows in closed form: with the centred training features ``X_c = U Σ Vᵀ``,
    ``W(λ) = V diag(σ / (σ² + n λ)) Uᵀ (Y - ȳ)`` and ``b = ȳ`` (in the centred feature space);
    ``λ = 0`` gives the minimum-norm least-squares solution (singular values below
    ``max(n, D) · eps · σ_1`` treated as zero, like ``numpy.linalg.lstsq``). When several
    ``weight_decay`` values are given, the one with the lowest validation MAE is used (the
    strongest on ties) and the test error is reported for it.

    Args:
        weight_decay: L2 strength, or the values to select among on the validation split
            (default: :data:`DEFAULT_RIDGE_WEIGHT_DECAYS`).
        standardize: Rescale every feature to zero mean and unit variance, with the statistics
            of the training rows only (default: ``True``). Features are centred either way.

    Attributes (after :meth:`fit`):
        coef_: ``[D, T]`` weights applied to ``(x - mean_) / scale_``.
        intercept_: ``[T]`` biases (the training mean of the targets).
        weight_decay_: the selected L2 strength.
        val_metrics_per_weight_decay_: validation MAE for every L2 strength.
    """

    def __init__(
        self,
        *,
        weight_decay: float | Sequence[float] = DEFAULT_RIDGE_WEIGHT_DECAYS,
        standardize: bool = True,
    ) -> None:
        self.weight_decays: tuple[float, ...] = weight_decay_grid(weight_decay)
        self.weight_decay: float | Sequence[float] = weight_decay
        self.standardize: bool = standardize

    #: The embeddings stay float32 when given so; rows are cast to float64 where used.
    input_dtype = None

    def fit(
        self,
        embeddings: ArrayLike,
        labels: ArrayLike | None,
        train_mask: ArrayLike,
        val_mask: ArrayLike,
    ) -> RidgeProbe:
        """Solve every L2 strength on the training rows and keep the best on validation.

        Args:
            embeddings: ``[N, D]`` floating embeddings.
            labels: ``[N]`` or ``[N, T]`` real targets (finite on the evaluated rows).
            train_mask, val_mask: boolean masks ``[N]`` or index tensors.
        """
        x, y, idx = prepare_inputs(
            embeddings, labels, {"train_mask": train_mask, "val_mask": val_mask}, dtype=None
        )
        rows = {"train": idx["train_mask"], "val": idx["val_mask"]}
        self._fit(x, self.targets(y, torch.cat(list(rows.values()))), rows)
        return self

    def predict(self, embeddings: ArrayLike) -> Tensor:
        """Predictions ``[M, T]`` (``[M]`` when fitted on 1-D targets), float64."""
        if not hasattr(self, "coef_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit() or evaluate()")
        x = as_float_matrix(embeddings, dtype=None)
        if x.shape[1] != self.coef_.shape[0]:
            raise ValueError(
                f"embeddings have {x.shape[1]} features but the probe was fitted on "
                f"{self.coef_.shape[0]}"
            )
        pred = self._predict_rows(x, None)
        return pred[:, 0] if self._one_dimensional else pred

    tasks: ClassVar[tuple[Task, ...]] = ("regression",)

    @property
    def task(self) -> Task:
        """Always ``"regression"``."""
        return "regression"

    # ---------------------------------------------------------------- internals
    def _evaluate(self, x: Tensor, targets: Tensor, rows: dict[str, Tensor]) -> dict[str, Any]:
        """Fit on ``train``, select on ``val``, report on every split.

        Returns:
            ``train_mae``, ``val_mae``, ``test_mae``, ``train_rmse``, ``val_rmse``,
            ``test_rmse`` (errors averaged over the targets) and the selected ``weight_decay``.
        """
        self._fit(x, targets, rows)
        targets = _as_columns(targets)
        out: dict[str, Any] = {}
        errors = {
            split: _errors(self._predict_rows(x, split_rows), targets[split_rows])
            for split, split_rows in rows.items()
        }
        for split, (mae, _) in errors.items():
            out[f"{split}_mae"] = mae
        for split, (_, rmse) in errors.items():
            out[f"{split}_rmse"] = rmse
        out["weight_decay"] = self.weight_decay_
        return out

    def _predict(self, x64: Tensor) -> Tensor:
        return ((x64 - self.mean_) / self.scale_) @ self.coef_ + self.intercept_

    def _predict_rows(self, x: Tensor, rows: Tensor | None) -> Tensor:
        """Predictions for ``x[rows]`` (all rows when None), computed in float64 chunks."""
        return torch.cat([self._predict(chunk) for chunk in float64_chunks(x, rows)])

    def _fit(self, x: Tensor, targets: Tensor, rows: Mapping[str, Tensor]) -> None:
        """``targets``: ``[N]`` or ``[N, T]`` float64 from :meth:`targets`."""
        train, val = rows["train"], rows["val"]
        self._one_dimensional = targets.ndim == 1
        targets = _as_columns(targets)
        x_train, y_train = x[train].to(torch.float64), targets[train]
        n, d = x_train.shape
        mean, scale = standardization(x_train, self.standardize)
        if not self.standardize:
            mean = x_train.mean(dim=0)  # still centre, for the unregularised intercept
        self.mean_, self.scale_ = mean, scale
        y_mean = y_train.mean(dim=0)
        u, s, vh = torch.linalg.svd((x_train - mean) / scale, full_matrices=False)
        tol = max(n, d) * torch.finfo(s.dtype).eps * (float(s[0]) if s.numel() else 0.0)
        keep = s > tol
        uty = u.T @ (y_train - y_mean)  # [r, T]
        y_val = targets[val]
        self.intercept_ = y_mean
        self.val_metrics_per_weight_decay_: dict[float, float] = {}
        best: tuple[float, float, Tensor] | None = None
        for lam in self.weight_decays:  # strongest first
            shrink = torch.where(keep, s / (s * s + n * lam), torch.zeros_like(s))
            coef = vh.T @ (shrink.unsqueeze(1) * uty)
            self.coef_ = coef
            mae, _ = _errors(self._predict_rows(x, val), y_val)
            self.val_metrics_per_weight_decay_[lam] = mae
            if best is None or mae < best[0]:  # strict: ties keep the stronger λ
                best = (mae, lam, coef)
        assert best is not None  # the grid is never empty (checked in __init__)
        _, self.weight_decay_, self.coef_ = best
        self.n_features_in_ = d

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(weight_decay={self.weight_decays}, "
            f"standardize={self.standardize})"
        )


#: class names before the rename, answered for one release with a DeprecationWarning
__getattr__ = old_names(__name__, {"RidgeEvaluator": "RidgeProbe"})
