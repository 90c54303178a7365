"""GRACE: graph contrastive representation learning."""

from __future__ import annotations

from torch import Tensor, nn
from torch_geometric.data import Data

from graphssl.methods.base import OptimizerFactory, SchedulerFactory, SSLMethod
from graphssl.methods.losses import info_nce
from graphssl.models.augment import GraphAugment, edge_and_feature
from graphssl.models.encode import encode
from graphssl.models.heads import MLPHead


class GRACE(SSLMethod):
    """GRACE (Zhu et al., ICML GRL+ workshop 2020, https://arxiv.org/abs/2006.04131).

    Two views by edge dropping and feature masking; a symmetric InfoNCE loss on projected node
    embeddings with intra- and inter-view negatives.

    Args:
        encoder: GNN mapping ``(x, edge_index)`` to ``(N, D)``.
        optimizer: partial optimizer constructor.
        augment1: augmentation of the first view (default: drop edges 0.2, mask features 0.3).
        augment2: augmentation of the second view (default: drop edges 0.4, mask features 0.4).
        projection_dim: size of the projection head's output (default: ``128``).
        tau: softmax temperature (default: ``0.5``).
        scheduler: partial learning-rate scheduler constructor, stepped after every optimizer
            step (default: ``None``, a constant learning rate).
    """

    def __init__(
        self,
        encoder: nn.Module,
        optimizer: OptimizerFactory | None = None,
        augment1: GraphAugment | None = None,
        augment2: GraphAugment | None = None,
        projection_dim: int = 128,
        tau: float = 0.5,
        scheduler: SchedulerFactory | None = None,
    ) -> None:
        super().__init__(optimizer, scheduler)
        if tau <= 0:
            raise ValueError(f"tau must be > 0, got {tau}")
        self.encoder = encoder
        dim = int(encoder.out_channels)  # type: ignore[arg-type]
        self.projector = MLPHead(dim, projection_dim, dim, act="elu")
        self.augment1 = augment1 or edge_and_feature(0.2, 0.3)
        self.augment2 = augment2 or edge_and_feature(0.4, 0.4)
        self.tau = tau

    def encoders(self) -> dict[str, nn.Module]:
        return {"encoder": self.encoder}

    def forward(self, batch: Data) -> Tensor:
        return encode(self.encoder, batch, seeds_only=True)

    def loss(self, batch: Data) -> dict[str, Tensor]:
        z1 = self.projector(encode(self.encoder, self.augment1(batch), seeds_only=True))
        z2 = self.projector(encode(self.encoder, self.augment2(batch), seeds_only=True))
        n = int(getattr(batch, "batch_size", z1.size(0)))
        return {"loss": info_nce(z1[:n], z2[:n], self.tau)}
