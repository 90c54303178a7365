"""CCA-SSG: canonical-correlation-analysis-inspired self-supervision on graphs."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.data import Data

from graphssl.methods.base import OptimizerFactory, SchedulerFactory, SSLMethod
from graphssl.methods.collective import gather_rows
from graphssl.models.augment import GraphAugment, edge_and_feature
from graphssl.models.encode import encode


def standardize(h: Tensor, eps: float = 1e-8) -> Tensor:
    """Zero mean, unit (unbiased) standard deviation per column; h: ``(N, D)`` → ``(N, D)``."""
    return (h - h.mean(dim=0)) / (h.std(dim=0) + eps)


def cca_ssg_loss(z1: Tensor, z2: Tensor, lambd: float = 1e-3) -> tuple[Tensor, Tensor, Tensor]:
    """CCA-SSG's objective on standardized embeddings z1, z2: ``(N, D)``.

    ``invariance = -tr(z1ᵀ z2) / N`` pulls the two views of every node together;
    ``decorrelation = ‖I - z1ᵀz1 / N‖²_F + ‖I - z2ᵀz2 / N‖²_F`` whitens each view so the
    dimensions carry different information. Returns ``(invariance + λ·decorrelation,
    invariance, decorrelation)``.
    """
    n, d = z1.shape
    c = z1.t() @ z2 / n
    c1 = z1.t() @ z1 / n
    c2 = z2.t() @ z2 / n
    eye = torch.eye(d, device=z1.device, dtype=z1.dtype)
    invariance = -torch.diagonal(c).sum()
    decorrelation = (eye - c1).pow(2).sum() + (eye - c2).pow(2).sum()
    return invariance + lambd * decorrelation, invariance, decorrelation


class CCASSG(SSLMethod):
    """CCA-SSG (Zhang et al., NeurIPS 2021, https://arxiv.org/abs/2106.12484).

    Two views from the same augmentation distribution go through one shared encoder; the
    embeddings are standardized per dimension and trained with an invariance term plus ``λ``
    times a feature-decorrelation term (:func:`cca_ssg_loss`). No projector, no negatives;
    evaluation uses the encoder's (unstandardized) output.

    Args:
        encoder: GNN mapping ``(x, edge_index)`` to ``(N, D)``.
        optimizer: partial optimizer constructor.
        augment: the view distribution, sampled twice per step (default: drop edges 0.4, mask
            feature columns 0.1, the paper's Cora setting).
        lambd: weight ``λ`` of the decorrelation term (default: ``1e-3``).
        scheduler: partial learning-rate scheduler constructor, stepped after every optimizer
            step (default: ``None``, a constant learning rate).
    """

    def __init__(
        self,
        encoder: nn.Module,
        optimizer: OptimizerFactory | None = None,
        augment: GraphAugment | None = None,
        lambd: float = 1e-3,
        scheduler: SchedulerFactory | None = None,
    ) -> None:
        super().__init__(optimizer, scheduler)
        if lambd < 0:
            raise ValueError(f"lambd must be >= 0, got {lambd}")
        self.encoder = encoder
        self.augment = augment or edge_and_feature(0.4, 0.1)
        self.lambd = lambd

    #: one encoder pass per view
    encoder_passes = 2

    def head_width(self) -> int:
        return int(self.encoder.out_channels)  # type: ignore[arg-type]  # the standardized copy

    forward_encoder = "encoder"  # forward() is encode(self.encoder, batch)
    supports_distributed = True  # statistics over the global batch (gather_rows)

    def encoders(self) -> dict[str, nn.Module]:
        return {"encoder": self.encoder}

    def forward(self, batch: Data) -> Tensor:
        return encode(self.encoder, batch, seeds_only=True)

    def loss(self, batch: Data) -> dict[str, Tensor]:
        n = int(getattr(batch, "batch_size", batch.num_nodes))  # seeds only in mini-batches
        h1 = encode(self.encoder, self.augment(batch), seeds_only=True)[:n]
        h2 = encode(self.encoder, self.augment(batch), seeds_only=True)[:n]
        # on several processes: standardisation and correlations over the global batch
        h1, h2 = gather_rows(h1, h2)
        loss, inv, dec = cca_ssg_loss(standardize(h1), standardize(h2), self.lambd)
        return {"loss": loss, "invariance": inv.detach(), "decorrelation": dec.detach()}
