"""The papers' own linear evaluation: a linear layer trained with Adam, early-stopped on validation.

The reference code of DGI, CCA-SSG and GraphMAE evaluates node embeddings this way
(e.g. ``graphmae/evaluation.py`` of THUDM/GraphMAE): a ``Linear(D, C)`` on the raw (not
standardised) embeddings, full-batch cross-entropy on the training rows, Adam with L2 weight
decay for a fixed number of epochs, and the test accuracy of the epoch with the best validation
accuracy (ties go to the later epoch). graphssl's default probe is
:class:`~graphssl.evaluation.logreg_probe.LogRegProbe` (deterministic L-BFGS, L2 strength
selected on validation); this one exists to tell protocol differences from method differences
when comparing with published numbers (``benchmarks/quality.py``). GRACE's code evaluates
differently: :class:`~graphssl.evaluation.cv_logreg_probe.CVLogRegProbe`.

Because it trains on the raw embeddings for a fixed number of steps, this protocol is not
invariant to the embeddings' scale: on embeddings with row norms of a few hundredths (GraphDINO
and AFGRL on Cora_ML) 300 Adam steps fit little more than the bias and the probe
predicts the majority class. ``standardize=True`` rescales the features first, as
:class:`~graphssl.evaluation.logreg_probe.LogRegProbe` does.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from graphssl.evaluation._checks import as_float_matrix
from graphssl.evaluation._deprecated import old_names
from graphssl.evaluation.probe import Probe
from graphssl.evaluation.probe_inputs import (
    ArrayLike,
    encode_classes,
    prepare_inputs,
    standardization,
)

__all__ = ["AdamLinearProbe"]


class AdamLinearProbe(Probe):
    """Linear classifier trained with Adam; test accuracy at the best validation epoch.

    Args:
        lr: Adam learning rate (default: ``0.01``, as GraphMAE's ``lr_f`` and CCA-SSG's
            ``lr2`` on Cora).
        weight_decay: Adam's L2 weight decay (default: ``1e-4``).
        epochs: full-batch training epochs (default: ``300``).
        seed: seed of the layer's initialisation (default: ``0``).
        standardize: rescale every feature to zero mean and unit variance with the training
            rows' statistics before training; the papers do not (default: ``False``).

    Attributes (after :meth:`fit`):
        layer_: the ``Linear(D, C)`` of the best validation epoch (float32).
        classes_: ``[C]`` class ids seen in the training split.
        mean_, scale_: ``[D]`` standardisation applied before ``layer_``.
        best_epoch_: that epoch (0-based; ties go to the later epoch).
    """

    def __init__(
        self,
        lr: float = 0.01,
        weight_decay: float = 1e-4,
        epochs: int = 300,
        seed: int = 0,
        standardize: bool = False,
    ) -> None:
        if not lr > 0:
            raise ValueError(f"lr must be > 0, got {lr!r}")
        if not weight_decay >= 0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")
        if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
            raise ValueError(f"epochs must be a positive integer, got {epochs!r}")
        self.lr = float(lr)
        self.weight_decay = float(weight_decay)
        self.epochs = epochs
        self.seed = seed
        self.standardize = bool(standardize)

    def fit(
        self,
        embeddings: ArrayLike,
        labels: ArrayLike | None,
        train_mask: ArrayLike,
        val_mask: ArrayLike,
    ) -> AdamLinearProbe:
        """Train on ``train_mask`` and keep the epoch with the best ``val_mask`` accuracy."""
        x, y, idx = prepare_inputs(
            embeddings, labels, {"train_mask": train_mask, "val_mask": val_mask}
        )
        rows = {"train": idx["train_mask"], "val": idx["val_mask"]}
        self._fit(x, self.targets(y, torch.cat(list(rows.values()))), rows)
        return self

    def predict(self, embeddings: ArrayLike) -> Tensor:
        """Class ids ``[M]`` for the rows of ``embeddings`` ``[M, D]``."""
        if not hasattr(self, "layer_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit() or evaluate()")
        x = as_float_matrix(embeddings).float()
        with torch.no_grad():
            return self.classes_[self.layer_((x - self.mean_) / self.scale_).argmax(dim=1)]

    # ---------------------------------------------------------------- internals
    def _evaluate(self, x: Tensor, targets: Tensor, rows: dict[str, Tensor]) -> dict[str, Any]:
        """Train on ``train``; report the epoch with the best ``val`` accuracy.

        Returns:
            ``train_acc``, ``val_acc``, ``test_acc`` of that epoch and ``best_epoch``
            (0-based).
        """
        target, pred = self._fit(x, targets, rows)
        out: dict[str, Any] = {
            f"{split}_acc": _accuracy(pred, target, split_rows)
            for split, split_rows in rows.items()
        }
        out["best_epoch"] = self.best_epoch_
        return out

    def _fit(self, x: Tensor, targets: Tensor, rows: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Train; return every row's label as an index into ``classes_`` (-1: a class unseen in
        training) and the best epoch's predicted indices for every row."""
        train, val = rows["train"], rows["val"]
        classes, _ = encode_classes(targets[train])
        target = torch.searchsorted(classes, targets).clamp(max=classes.numel() - 1)
        target = torch.where(classes[target] == targets, target, torch.full_like(target, -1))
        x = x.float()
        mean, scale = standardization(x[train], self.standardize)
        x = (x - mean) / scale
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            layer = torch.nn.Linear(x.shape[1], classes.numel()).to(x.device)
        optimizer = torch.optim.Adam(layer.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        best_val, best_epoch = -1.0, 0
        best_state: dict[str, Tensor] = {}
        best_pred = target
        for epoch in range(self.epochs):
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(layer(x[train]), target[train]).backward()
            optimizer.step()
            with torch.no_grad():
                pred = layer(x).argmax(dim=1)
            val_acc = _accuracy(pred, target, val)
            if val_acc >= best_val:
                best_val, best_epoch, best_pred = val_acc, epoch, pred
                best_state = {k: v.detach().clone() for k, v in layer.state_dict().items()}
        layer.load_state_dict(best_state)
        layer.requires_grad_(False)
        self.layer_, self.classes_, self.best_epoch_ = layer, classes, best_epoch
        self.mean_, self.scale_ = mean, scale
        return target, best_pred

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(lr={self.lr}, weight_decay={self.weight_decay}, "
            f"epochs={self.epochs}, seed={self.seed}, standardize={self.standardize})"
        )


def _accuracy(pred: Tensor, target: Tensor, rows: Tensor) -> float:
    return float((pred[rows] == target[rows]).float().mean())


#: class names before the rename, answered for one release with a DeprecationWarning
__getattr__ = old_names(__name__, {"AdamLinearEvaluator": "AdamLinearProbe"})
