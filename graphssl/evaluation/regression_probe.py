"""Ridge-regression probe on frozen embeddings, for node- or graph-level regression targets.

Closed form from one SVD of the centred training features (metrics-spec §11.2): no optimiser
and no random initialisation, and the whole L2 grid costs one SVD.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from graphssl.evaluation._checks import as_float_matrix
from graphssl.evaluation.linear_probe import (
    ArrayLike,
    _prepare_inputs,
    _standardization,
    _weight_decay_grid,
)

__all__ = ["DEFAULT_RIDGE_WEIGHT_DECAYS", "RidgeEvaluator"]

#: L2 strengths tried by :class:`RidgeEvaluator` (metrics-spec §15), strongest first.
DEFAULT_RIDGE_WEIGHT_DECAYS: tuple[float, ...] = (1e2, 1e1, 1.0, 1e-1, 1e-2, 1e-3, 0.0)


def _regression_targets(y: Tensor, rows: Tensor) -> tuple[Tensor, bool]:
    """Targets as float64 ``[N, T]`` and whether they were 1-D; non-finite values in the
    evaluated ``rows`` rejected."""
    one_dimensional = y.ndim == 1
    if one_dimensional:
        y = y[:, None]
    if y.ndim != 2:
        raise ValueError(f"targets must have shape [N] or [N, T], got {tuple(y.shape)}")
    if y.is_complex():
        raise TypeError(f"targets must be real numbers, got dtype {y.dtype}")
    y = y.to(torch.float64)
    bad = ~torch.isfinite(y[rows])
    if bool(bad.any()):
        raise ValueError(
            f"targets have {int(bad.sum())} NaN or Inf values in the {rows.numel()} evaluated "
            f"rows (train/val/test); expected finite targets (drop the unlabelled rows from the "
            f"split masks)"
        )
    return y, one_dimensional


def _errors(pred: Tensor, target: Tensor) -> tuple[float, float]:
    """MAE over all (row, target) entries and RMSE averaged over the targets."""
    diff = pred - target
    mae = float(diff.abs().mean())
    rmse = float(diff.pow(2).mean(dim=0).sqrt().mean())
    return mae, rmse


class RidgeEvaluator:
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
        self.weight_decays: tuple[float, ...] = _weight_decay_grid(weight_decay)
        self.weight_decay: float | Sequence[float] = weight_decay
        self.standardize: bool = standardize

    def fit(
        self,
        embeddings: ArrayLike,
        labels: ArrayLike | None,
        train_mask: ArrayLike,
        val_mask: ArrayLike,
    ) -> RidgeEvaluator:
        """Solve every L2 strength on the training rows and keep the best on validation.

        Args:
            embeddings: ``[N, D]`` floating embeddings.
            labels: ``[N]`` or ``[N, T]`` real targets (finite on the evaluated rows).
            train_mask, val_mask: boolean masks ``[N]`` or index tensors.
        """
        x, y, idx = _prepare_inputs(
            embeddings, labels, {"train_mask": train_mask, "val_mask": val_mask}
        )
        self._fit(x, *_regression_targets(y, torch.cat(list(idx.values()))), idx)
        return self

    def predict(self, embeddings: ArrayLike) -> Tensor:
        """Predictions ``[M, T]`` (``[M]`` when fitted on 1-D targets), float64."""
        if not hasattr(self, "coef_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit() or evaluate()")
        x = as_float_matrix(embeddings)
        if x.shape[1] != self.coef_.shape[0]:
            raise ValueError(
                f"embeddings have {x.shape[1]} features but the probe was fitted on "
                f"{self.coef_.shape[0]}"
            )
        pred = self._predict(x)
        return pred[:, 0] if self._one_dimensional else pred

    def evaluate(
        self,
        embeddings: ArrayLike,
        labels: ArrayLike | None,
        train_mask: ArrayLike,
        val_mask: ArrayLike,
        test_mask: ArrayLike,
    ) -> dict[str, Any]:
        """Fit on ``train_mask``, select on ``val_mask``, report on every split.

        Returns:
            ``train_mae``, ``val_mae``, ``test_mae``, ``train_rmse``, ``val_rmse``,
            ``test_rmse`` (errors averaged over the targets) and the selected ``weight_decay``.
        """
        x, y, idx = _prepare_inputs(
            embeddings,
            labels,
            {"train_mask": train_mask, "val_mask": val_mask, "test_mask": test_mask},
        )
        targets, one_dimensional = _regression_targets(y, torch.cat(list(idx.values())))
        self._fit(x, targets, one_dimensional, idx)
        out: dict[str, Any] = {}
        errors = {
            split: _errors(self._predict(x[idx[key]]), targets[idx[key]])
            for split, key in (("train", "train_mask"), ("val", "val_mask"), ("test", "test_mask"))
        }
        for split, (mae, _) in errors.items():
            out[f"{split}_mae"] = mae
        for split, (_, rmse) in errors.items():
            out[f"{split}_rmse"] = rmse
        out["weight_decay"] = self.weight_decay_
        return out

    # ---------------------------------------------------------------- internals
    def _predict(self, x: Tensor) -> Tensor:
        return ((x - self.mean_) / self.scale_) @ self.coef_ + self.intercept_

    def _fit(
        self, x: Tensor, targets: Tensor, one_dimensional: bool, idx: Mapping[str, Tensor]
    ) -> None:
        train, val = idx["train_mask"], idx["val_mask"]
        self._one_dimensional = one_dimensional
        x_train, y_train = x[train], targets[train]
        n, d = x_train.shape
        mean, scale = _standardization(x_train, self.standardize)
        if not self.standardize:
            mean = x_train.mean(dim=0)  # still centre, for the unregularised intercept
        self.mean_, self.scale_ = mean, scale
        y_mean = y_train.mean(dim=0)
        u, s, vh = torch.linalg.svd((x_train - mean) / scale, full_matrices=False)
        tol = max(n, d) * torch.finfo(s.dtype).eps * (float(s[0]) if s.numel() else 0.0)
        keep = s > tol
        uty = u.T @ (y_train - y_mean)  # [r, T]
        x_val, y_val = x[val], targets[val]
        self.intercept_ = y_mean
        self.val_metrics_per_weight_decay_: dict[float, float] = {}
        best: tuple[float, float, Tensor] | None = None
        for lam in self.weight_decays:  # strongest first
            shrink = torch.where(keep, s / (s * s + n * lam), torch.zeros_like(s))
            coef = vh.T @ (shrink.unsqueeze(1) * uty)
            self.coef_ = coef
            mae, _ = _errors(self._predict(x_val), y_val)
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
