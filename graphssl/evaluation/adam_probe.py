"""The papers' own linear evaluation: a linear layer trained with Adam, early-stopped on validation.

The reference code of DGI, CCA-SSG and GraphMAE evaluates node embeddings this way
(e.g. ``graphmae/evaluation.py`` of THUDM/GraphMAE): a ``Linear(D, C)`` on the raw (not
standardised) embeddings, full-batch cross-entropy on the training rows, Adam with L2 weight
decay for a fixed number of epochs, and the test accuracy of the epoch with the best validation
accuracy (ties go to the later epoch). graphssl's default probe is
:class:`~graphssl.evaluation.linear_probe.LogRegEvaluator` (deterministic L-BFGS, L2 strength
selected on validation); this one exists to tell protocol differences from method differences
when comparing with published numbers (``benchmarks/quality.py``). GRACE's code evaluates
differently: :class:`~graphssl.evaluation.cv_logreg_probe.CVLogRegEvaluator`.

Because it trains on the raw embeddings for a fixed number of steps, this protocol is not
invariant to the embeddings' scale: on embeddings with row norms of a few hundredths (GraphDINO
and AFGRL on Cora_ML, BENCHMARKS.md) 300 Adam steps fit little more than the bias and the probe
predicts the majority class. ``standardize=True`` rescales the features first, as
:class:`~graphssl.evaluation.linear_probe.LogRegEvaluator` does.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from graphssl.evaluation.linear_probe import (
    ArrayLike,
    _class_labels,
    _encode_classes,
    _prepare_inputs,
    _standardization,
)

__all__ = ["AdamLinearEvaluator"]


class AdamLinearEvaluator:
    """Linear classifier trained with Adam; test accuracy at the best validation epoch.

    Args:
        lr: Adam learning rate (default: ``0.01``, as GraphMAE's ``lr_f`` and CCA-SSG's
            ``lr2`` on Cora).
        weight_decay: Adam's L2 weight decay (default: ``1e-4``).
        epochs: full-batch training epochs (default: ``300``).
        seed: seed of the layer's initialisation (default: ``0``).
        standardize: rescale every feature to zero mean and unit variance with the training
            rows' statistics before training; the papers do not (default: ``False``).
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

    def evaluate(
        self,
        embeddings: ArrayLike,
        labels: ArrayLike | None,
        train_mask: ArrayLike,
        val_mask: ArrayLike,
        test_mask: ArrayLike,
    ) -> dict[str, Any]:
        """Train on ``train_mask``; report the epoch with the best ``val_mask`` accuracy.

        Returns:
            ``train_acc``, ``val_acc``, ``test_acc`` of that epoch and ``best_epoch``
            (0-based).
        """
        x, y, idx = _prepare_inputs(
            embeddings,
            labels,
            {"train_mask": train_mask, "val_mask": val_mask, "test_mask": test_mask},
        )
        y = _class_labels(y, torch.cat(list(idx.values())))
        classes, _ = _encode_classes(y[idx["train_mask"]])
        # every evaluated label as an index into the training classes (-1: unseen in training)
        target = torch.searchsorted(classes, y).clamp(max=classes.numel() - 1)
        target = torch.where(classes[target] == y, target, torch.full_like(target, -1))
        x = x.float()
        train = idx["train_mask"]
        mean, scale = _standardization(x[train], self.standardize)
        x = (x - mean) / scale
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            layer = torch.nn.Linear(x.shape[1], classes.numel()).to(x.device)
        optimizer = torch.optim.Adam(layer.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        best: dict[str, Any] = {"val_acc": -1.0}
        for epoch in range(self.epochs):
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(layer(x[train]), target[train]).backward()
            optimizer.step()
            with torch.no_grad():
                pred = layer(x).argmax(dim=1)
            accs = {
                f"{split}_acc": _accuracy(pred, target, idx[f"{split}_mask"])
                for split in ("train", "val", "test")
            }
            if accs["val_acc"] >= best["val_acc"]:
                best = {**accs, "best_epoch": epoch}
        return best

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(lr={self.lr}, weight_decay={self.weight_decay}, "
            f"epochs={self.epochs}, seed={self.seed}, standardize={self.standardize})"
        )


def _accuracy(pred: Tensor, target: Tensor, rows: Tensor) -> float:
    return float((pred[rows] == target[rows]).float().mean())
