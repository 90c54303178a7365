"""BYOL: bootstrap your own latent."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn

from graphssl.methods.base import OptimizerFactory, SchedulerFactory
from graphssl.methods.collective import gather_rows
from graphssl.methods.image import ImageSSLMethod, views_of
from graphssl.methods.losses import bootstrap_cosine
from graphssl.methods.momentum import cosine_ema_momentum, ema_update
from graphssl.models.heads import MLPHead


class BYOL(ImageSSLMethod):
    """Bootstrap Your Own Latent (Grill et al., NeurIPS 2020, https://arxiv.org/abs/2006.07733).

    The online network (backbone + projector + predictor) regresses the target network's
    projection of the other view; the target (backbone + projector) is an exponential moving
    average of the online one, its momentum annealed from ``momentum`` to 1 along a cosine.
    Evaluation uses the online backbone.

    Args:
        encoder: online backbone mapping images to ``[B, D]``; the target is a copy.
        optimizer: partial optimizer constructor.
        projection_dim: output size of projector and predictor (default: ``128``).
        projection_hidden: hidden size of the projector (default: ``512``).
        predictor_hidden: hidden size of the predictor (default: ``512``).
        momentum: base EMA momentum of the target (default: ``0.99``).
        scheduler: partial learning-rate scheduler constructor, stepped after every optimizer
            step (default: ``None``, a constant learning rate).
    """

    supports_distributed = True  # the loss covers the global batch (gather_rows)

    def __init__(
        self,
        encoder: nn.Module,
        optimizer: OptimizerFactory | None = None,
        projection_dim: int = 128,
        projection_hidden: int = 512,
        predictor_hidden: int = 512,
        momentum: float = 0.99,
        scheduler: SchedulerFactory | None = None,
    ) -> None:
        super().__init__(optimizer, scheduler)
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"momentum must be in [0, 1], got {momentum}")
        dim = int(encoder.out_channels)  # type: ignore[arg-type]
        self.backbone = encoder
        self.projector = MLPHead(
            dim, projection_hidden, projection_dim, batch_norm=True, act="relu"
        )
        self.predictor = MLPHead(
            projection_dim, predictor_hidden, projection_dim, batch_norm=True, act="relu"
        )
        self.target_backbone = copy.deepcopy(encoder).requires_grad_(False)
        self.target_projector = copy.deepcopy(self.projector).requires_grad_(False)
        self.momentum = momentum

    def encoders(self) -> dict[str, nn.Module]:
        return {"online": self.backbone, "target": self.target_backbone, "encoder": self.backbone}

    def trainable_parameters(self) -> Iterator[nn.Parameter]:
        yield from self.backbone.parameters()
        yield from self.projector.parameters()
        yield from self.predictor.parameters()

    def loss(self, batch: Any) -> dict[str, Tensor]:
        views, _ = views_of(batch, min_views=2)
        h1, h2 = self._encode_views(self.backbone, views[:2])
        p1, p2 = self.predictor(self.projector(torch.cat([h1, h2]))).chunk(2)
        with torch.no_grad():
            g1, g2 = self._encode_views(self.target_backbone, views[:2])
            t1, t2 = self.target_projector(torch.cat([g1, g2])).chunk(2)
        p1, p2, t1, t2 = (gather_rows(t) for t in (p1, p2, t1, t2))  # the global batch
        return {"loss": bootstrap_cosine(p1, t2) + bootstrap_cosine(p2, t1)}

    def on_after_optimizer_step(self, step: int, max_steps: int) -> None:
        m = cosine_ema_momentum(step, max_steps, self.momentum)
        ema_update(self.target_backbone, self.backbone, m)
        ema_update(self.target_projector, self.projector, m)
