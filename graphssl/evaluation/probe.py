"""The base class of every probe: a supervised model fitted on frozen embeddings.

A probe answers one question about embeddings ``[N, D]``: how well do they predict the labels of
a task, when a simple model is trained on the training rows, tuned on the validation rows and
scored on the test rows? :meth:`Probe.evaluate` validates the inputs the same way for every probe
and returns ``{"<split>_<metric>": value, ...}`` plus the hyperparameters the probe selected.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor

from graphssl.evaluation.probe_inputs import (
    ArrayLike,
    class_labels,
    multilabel_targets,
    prepare_inputs,
    regression_targets,
)

__all__ = ["HEADLINE", "SPLITS", "TASKS", "Probe", "Task"]

Task = Literal["classification", "regression", "multilabel"]
#: The tasks a probe can serve: single-label classes, real targets, or {0, 1, NaN} label vectors.
TASKS: tuple[Task, ...] = ("classification", "regression", "multilabel")
#: The splits :meth:`Probe.evaluate` receives, in this order.
SPLITS: tuple[str, ...] = ("train", "val", "test")
#: The headline test metric of a probe, first present wins, and whether higher is better:
#: ``test_acc`` for classification, ``test_ap`` for multilabel, ``test_mae`` for regression.
HEADLINE: tuple[tuple[str, bool], ...] = (
    ("test_acc", True),
    ("test_ap", True),
    ("test_mae", False),
)


class Probe(ABC):
    """A model fitted on frozen embeddings and scored on the train/val/test splits.

    Subclasses follow scikit-learn's estimator contract: ``__init__`` stores (and checks) the
    parameters and does nothing else, ``fit`` returns ``self``, and everything learnt by fitting
    is an attribute whose name ends in ``_``. They implement :meth:`_evaluate`, which receives the
    validated inputs; :meth:`evaluate` does the validation every probe shares.

    Subclasses whose task is not single-label classification override :attr:`task`.
    Subclasses that handle float32 embeddings themselves (casting only the rows they need, or
    chunks of them, to float64) set :attr:`input_dtype` to ``None``, so that a large float32
    matrix is never copied whole to float64.
    """

    #: dtype :meth:`_evaluate` receives the embeddings in; ``None``: float32 or float64 as given
    #: (float16/bfloat16 become float32).
    input_dtype: torch.dtype | None = torch.float64

    #: The dataset tasks this probe serves: an evaluation keeps, for a regression or multilabel
    #: dataset, the configured probes that declare its task (a probe serving ``"multilabel"``
    #: besides single-label classification takes a ``multilabel`` parameter that switches it).
    tasks: ClassVar[tuple[Task, ...]] = ("classification",)

    def get_params(self) -> dict[str, Any]:
        """The constructor's parameters and their values (scikit-learn's contract: each
        ``__init__`` parameter is stored under its own name)."""
        out: dict[str, Any] = {}
        for name, param in inspect.signature(type(self).__init__).parameters.items():
            if name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            if not hasattr(self, name):
                raise AttributeError(
                    f"{type(self).__name__} does not store its parameter {name!r} as an "
                    f"attribute of the same name; expected every __init__ parameter stored "
                    f"unchanged (scikit-learn's estimator contract)"
                )
            out[name] = getattr(self, name)
        return out

    def clone(self, **params: Any) -> Probe:
        """A new, unfitted probe with the same parameters, ``params`` replaced."""
        return type(self)(**{**self.get_params(), **params})

    @property
    def per_split_keys(self) -> tuple[str, ...]:
        """Keys of :meth:`evaluate`'s result that an evaluation over several splits also logs
        split by split (``probe/<name>/<key>_fold<i>``, ``i`` from 0), besides their mean and
        standard deviation: hyperparameters each split selects on its own, whose mean alone
        hides what was chosen (e.g. the L2 strength of each outer fold). None by default."""
        return ()

    @property
    def task(self) -> Task:
        """What the labels are: ``"classification"`` (class ids ``[N]``), ``"regression"``
        (real targets ``[N]`` or ``[N, T]``) or ``"multilabel"`` (``[N, T]`` in
        {0, 1, NaN = missing}); it selects how :meth:`targets` validates them."""
        return "classification"

    def evaluate(
        self,
        embeddings: ArrayLike,
        labels: ArrayLike | None,
        train_mask: ArrayLike,
        val_mask: ArrayLike,
        test_mask: ArrayLike,
    ) -> dict[str, Any]:
        """Fit on ``train_mask``, tune on ``val_mask`` (as the probe defines), score every split.

        Args:
            embeddings: ``[N, D]`` floating embeddings.
            labels: one label per row, as :attr:`task` says.
            train_mask, val_mask, test_mask: boolean masks ``[N]`` or index tensors.

        Returns:
            ``{"<split>_<metric>": value}`` for the splits the probe scores, plus the
            hyperparameters it selected (e.g. ``weight_decay``).
        """
        x, y, idx = prepare_inputs(
            embeddings,
            labels,
            {"train_mask": train_mask, "val_mask": val_mask, "test_mask": test_mask},
            dtype=self.input_dtype,
        )
        rows = {split: idx[f"{split}_mask"] for split in SPLITS}
        return self._evaluate(x, self.targets(y, torch.cat(list(rows.values()))), rows)

    def targets(self, labels: Tensor, rows: Tensor) -> Tensor:
        """``labels`` validated for :attr:`task` on the evaluated ``rows``.

        Returns:
            ``long`` class ids ``[N]`` (classification), float64 ``[N, T]`` (multilabel) or
            float64 targets of the input's shape (regression).
        """
        if self.task == "classification":
            return class_labels(labels, rows)
        if self.task == "multilabel":
            return multilabel_targets(labels, rows)
        if self.task == "regression":
            return regression_targets(labels, rows)
        raise ValueError(f"{type(self).__name__}.task must be one of {TASKS}, got {self.task!r}")

    @abstractmethod
    def _evaluate(self, x: Tensor, targets: Tensor, rows: dict[str, Tensor]) -> dict[str, Any]:
        """Fit and score on validated inputs.

        Args:
            x: ``[N, D]`` embeddings in :attr:`input_dtype` (float64 unless the subclass says
                otherwise).
            targets: labels from :meth:`targets`.
            rows: ``{"train", "val", "test"}`` → ``long`` row indices.
        """
