"""SimCLR: contrastive learning of visual representations."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from graphssl.methods.base import OptimizerFactory, SchedulerFactory
from graphssl.methods.collective import gather_rows_and_own, global_mean, world_size
from graphssl.methods.image import ImageSSLMethod, views_of
from graphssl.methods.losses import simclr_nt_xent, simclr_nt_xent_terms
from graphssl.models.heads import MLPHead


class SimCLR(ImageSSLMethod):
    """SimCLR (Chen et al., ICML 2020, https://arxiv.org/abs/2002.05709).

    Two augmented views of each image go through the backbone and an MLP projector; NT-Xent
    pulls the two projections of an image together and pushes the other ``2N - 2`` apart.
    Evaluation uses the backbone features (before the projector).

    Args:
        encoder: backbone mapping images ``[B, C, H, W]`` to ``[B, D]`` (``out_channels = D``),
            e.g. :class:`~graphssl.models.vision.TimmEncoder`.
        optimizer: partial optimizer constructor.
        projection_dim: output size of the projector (default: ``128``).
        projection_hidden: hidden size of the projector (default: ``512``).
        tau: NT-Xent temperature (default: ``0.5``).
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
        tau: float = 0.5,
        scheduler: SchedulerFactory | None = None,
    ) -> None:
        super().__init__(optimizer, scheduler)
        if tau <= 0:
            raise ValueError(f"tau must be > 0, got {tau}")
        self.backbone = encoder
        dim = int(encoder.out_channels)  # type: ignore[arg-type]
        self.projector = MLPHead(
            dim, projection_hidden, projection_dim, batch_norm=True, act="relu"
        )
        self.tau = tau

    def encoders(self) -> dict[str, nn.Module]:
        return {"encoder": self.backbone}

    def loss(self, batch: Any) -> dict[str, Tensor]:
        views, _ = views_of(batch, min_views=2)
        h1, h2 = self._encode_views(self.backbone, views[:2])
        # both views through the projector at once: its BatchNorm sees all 2N rows
        z1, z2 = self.projector(torch.cat([h1, h2])).chunk(2)
        # on several processes: the negatives of a row are every other row of the global batch
        if world_size() == 1:
            return {"loss": simclr_nt_xent(z1, z2, self.tau)}
        # on several processes: each rank's pairs against the global batch's 2N rows
        (z1, z2), mine = gather_rows_and_own(z1, z2)
        terms = simclr_nt_xent_terms(z1, z2, self.tau, anchors=mine)
        return {"loss": global_mean(terms, count=z1.shape[0])}
