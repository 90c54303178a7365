"""GRACE: graph contrastive representation learning."""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn
from torch_geometric.data import Data

from graphssl.methods.base import OptimizerFactory, SchedulerFactory, SSLMethod, linear_widths
from graphssl.methods.collective import PendingSum, gather_rows_and_own, global_mean, world_size
from graphssl.methods.losses import info_nce, info_nce_bytes, info_nce_terms
from graphssl.models.augment import GraphAugment, edge_and_feature
from graphssl.models.encode import encode
from graphssl.models.heads import MLPHead


class GRACE(SSLMethod):
    """GRACE (Zhu et al., ICML GRL+ workshop 2020, https://arxiv.org/abs/2006.04131).

    Two views by edge dropping and feature masking; a symmetric InfoNCE loss on projected node
    embeddings with intra- and inter-view negatives.

    In mini-batches the encoder runs on the sampled subgraph and only its ``batch_size`` seed
    rows are projected and compared, so the negatives of a seed are the other seeds of the
    batch (in both views), and the similarity matrices are ``batch_size x batch_size``, as in
    the large-graph versions of GRACE-style methods. Full-batch, the loss compares all ``n``
    nodes: it holds several ``n x n`` matrices up to 4096 nodes and blocks of rows above
    (:func:`~graphssl.methods.losses.info_nce`, :meth:`full_batch_loss_bytes`).

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

    #: one encoder pass per view
    encoder_passes = 2

    forward_encoder = "encoder"  # forward() is encode(self.encoder, batch)
    supports_distributed = True  # negatives gathered from every rank, with gradient

    def encoders(self) -> dict[str, nn.Module]:
        return {"encoder": self.encoder}

    def full_batch_loss_bytes(self, num_nodes: int) -> int:
        return info_nce_bytes(num_nodes, self.itemsize())

    def head_width(self) -> int:
        return sum(linear_widths(self.projector))

    def forward(self, batch: Data) -> Tensor:
        return encode(self.encoder, batch, seeds_only=True)

    def loss(self, batch: Data) -> dict[str, Tensor]:
        h1 = encode(self.encoder, self.augment1(batch), seeds_only=True)
        h2 = encode(self.encoder, self.augment2(batch), seeds_only=True)
        n = int(getattr(batch, "batch_size", h1.size(0)))  # seeds only in mini-batches
        z1, z2 = self.projector(h1[:n]), self.projector(h2[:n])
        if world_size() == 1:
            return {"loss": info_nce(z1, z2, self.tau)}
        # on several processes: every rank's seeds, so the negatives span the global batch;
        # each rank computes its own seeds' terms, the loss their mean over the global batch
        (z1, z2), mine = gather_rows_and_own(z1, z2)
        terms = info_nce_terms(z1, z2, self.tau, anchors=mine, sum_columns=_start_sum)
        return {"loss": global_mean(terms, count=z1.shape[0])}


def _start_sum(local: Tensor) -> Callable[[], Tensor]:
    """The sum of ``local`` over ranks, with gradient, started now; returns its collector."""
    return PendingSum(local).wait
