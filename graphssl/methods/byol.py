"""BYOL: bootstrap your own latent."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from graphssl.methods.base import OptimizerFactory, SchedulerFactory
from graphssl.methods.collective import PendingCount, global_mean, world_size
from graphssl.methods.image import ImageSSLMethod, views_of
from graphssl.methods.losses import bootstrap_cosine, bootstrap_cosine_terms
from graphssl.methods.momentum import MomentumMethod
from graphssl.models.heads import MLPHead


class BYOL(MomentumMethod, ImageSSLMethod):
    """Bootstrap Your Own Latent (Grill et al., NeurIPS 2020, https://arxiv.org/abs/2006.07733).

    The online network (backbone + projector + predictor) regresses the target network's
    projection of the other view; the target (backbone + projector) is an exponential moving
    average of the online one, its momentum annealed from ``momentum`` to 1 along a cosine
    (:class:`~graphssl.methods.momentum.MomentumMethod`). Evaluation uses the online backbone;
    ``encoders()`` names ``"online"`` (also ``"encoder"``) and ``"target"``.

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

    target_backbone: nn.Module  # set by add_target
    target_projector: nn.Module
    supports_distributed = True  # the loss is the mean over the global batch (global_mean)

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
        super().__init__(optimizer, scheduler, momentum)
        dim = int(encoder.out_channels)  # type: ignore[arg-type]
        self.backbone = encoder
        self.projector = MLPHead(
            dim, projection_hidden, projection_dim, batch_norm=True, act="relu"
        )
        self.predictor = MLPHead(
            projection_dim, predictor_hidden, projection_dim, batch_norm=True, act="relu"
        )
        self.add_target("target_backbone", follows="backbone")
        self.add_target("target_projector", follows="projector")

    def loss(self, batch: Any) -> dict[str, Tensor]:
        views, _ = views_of(batch, min_views=2)
        rows = PendingCount(views[0].shape[0], views[0].device)  # summed while this rank encodes
        h1, h2 = self._encode_views(self.backbone, views[:2])
        p1, p2 = self.predictor(self.projector(torch.cat([h1, h2]))).chunk(2)
        with torch.no_grad():
            g1, g2 = self._encode_views(self.target_backbone, views[:2])
            t1, t2 = self.target_projector(torch.cat([g1, g2])).chunk(2)
        if world_size() == 1:
            return {"loss": bootstrap_cosine(p1, t2) + bootstrap_cosine(p2, t1)}
        # on several processes: each row's terms need only its own prediction and target, so
        # the loss is their mean over the global batch (the rows counted above) without
        # gathering any rows
        terms = bootstrap_cosine_terms(p1, t2) + bootstrap_cosine_terms(p2, t1)
        return {"loss": global_mean(terms, count=rows.wait())}
