"""Supervised training of a backbone: the reference point of the model zoo (paper §4.1)."""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from graphssl.methods.base import OptimizerFactory, SchedulerFactory
from graphssl.methods.collective import gather_rows
from graphssl.methods.image import ImageSSLMethod, views_of


class Supervised(ImageSSLMethod):
    """A backbone + linear classifier trained with cross-entropy on the training labels.

    The supervised counterpart of the self-supervised methods, for studying embedding
    diagnostics on supervised networks (Tsitsulin et al., *Unsupervised Embedding Quality
    Evaluation*, 2023, §4.1, https://arxiv.org/abs/2305.16562, which computed them for timm's
    model zoo).
    ``forward`` returns the penultimate (pooled backbone) features, so the probes and
    diagnostics measure the same embeddings as for the other methods;
    :meth:`classifier_logits` gives the classifier's own predictions.

    Args:
        encoder: backbone mapping images to ``[B, D]``.
        optimizer: partial optimizer constructor.
        num_classes: classes of the dataset; ``-1`` (the config default) is filled in by
            the pipeline from the dataset. A model built with ``-1`` has no classifier and
            cannot train (default: ``-1``).
        label_smoothing: cross-entropy label smoothing (default: ``0.0``).
        scheduler: partial learning-rate scheduler constructor, stepped after every optimizer
            step (default: ``None``, a constant learning rate).
    """

    has_untrained_baseline = False  # the supervised reference, not a self-supervised encoder
    supports_distributed = True  # cross-entropy over the global batch (gather_rows)

    def __init__(
        self,
        encoder: nn.Module,
        optimizer: OptimizerFactory | None = None,
        num_classes: int = -1,
        label_smoothing: float = 0.0,
        scheduler: SchedulerFactory | None = None,
    ) -> None:
        super().__init__(optimizer, scheduler)
        if num_classes == 0 or num_classes < -1:
            raise ValueError(
                f"num_classes must be >= 1 (or -1: from the dataset), got {num_classes}"
            )
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
        self.backbone = encoder
        self.num_classes = int(num_classes)
        dim = int(encoder.out_channels)  # type: ignore[arg-type]
        self.classifier: nn.Module | None = nn.Linear(dim, num_classes) if num_classes > 0 else None
        self.label_smoothing = label_smoothing

    def encoders(self) -> dict[str, nn.Module]:
        return {"encoder": self.backbone}

    def _classifier(self) -> nn.Module:
        if self.classifier is None:
            raise ValueError(
                "Supervised was built with num_classes=-1 and has no classifier; "
                "pass the dataset's class count (graphssl's pipeline fills it in)"
            )
        return self.classifier

    def loss(self, batch: Any) -> dict[str, Tensor]:
        views, labels = views_of(batch, min_views=1)
        if labels is None:
            raise ValueError("Supervised needs labelled batches (view, ..., y)")
        logits = self._classifier()(self.backbone(views[0]))
        if int(labels.max()) >= logits.shape[1] or int(labels.min()) < 0:
            raise ValueError(
                f"labels range over [{int(labels.min())}, {int(labels.max())}] but "
                f"the classifier has {logits.shape[1]} classes; set "
                f"model.num_classes=-1 to take the dataset's count"
            )
        # over the global batch on several processes: the mean of every process's rows
        logits, labels = gather_rows(logits), gather_rows(labels)
        loss = F.cross_entropy(logits, labels, label_smoothing=self.label_smoothing)
        acc = (logits.detach().argmax(1) == labels).float().mean()
        return {"loss": loss, "acc": acc}

    def classifier_logits(self, embeddings: Tensor) -> Tensor | None:
        """Class logits ``[N, num_classes]`` from the features ``forward`` returns."""
        out: Tensor = self._classifier()(embeddings)
        return out
