"""Deep Graph Infomax."""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn
from torch_geometric.data import Data

from graphssl.methods.base import OptimizerFactory, SchedulerFactory, SSLMethod
from graphssl.methods.collective import gather_rows
from graphssl.methods.losses import dgi_bce
from graphssl.models.encode import encode


def shuffle_nodes(x: Tensor) -> Tensor:
    """DGI's corruption: permute the rows of the feature matrix ``x`` ``(N, F)``."""
    return x[torch.randperm(x.size(0), device=x.device)]


def shuffle_batch_nodes(batch: Data) -> Data:
    """A shallow copy of ``batch`` whose node features are permuted (:func:`shuffle_nodes`)."""
    corrupted = copy.copy(batch)
    corrupted.x = shuffle_nodes(batch.x)
    return corrupted


def sigmoid_mean_readout(h: Tensor) -> Tensor:
    """DGI's summary vector ``sigmoid(mean_i h_i)``; h: ``(N, D)`` → ``(D,)``."""
    return torch.sigmoid(h.mean(dim=0))


class DGI(SSLMethod):
    """Deep Graph Infomax (Veličković et al., ICLR 2019, https://arxiv.org/abs/1809.10341).

    Maximises the mutual information between node embeddings and a graph summary with a
    bilinear discriminator that tells real nodes from nodes of a feature-shuffled graph.

    Args:
        encoder: GNN mapping ``(x, edge_index)`` to node embeddings ``(N, D)``.
        optimizer: partial optimizer constructor (default in config: Adam, lr 1e-3).
        scheduler: partial learning-rate scheduler constructor, stepped after every optimizer
            step (default: ``None``, a constant learning rate).
    """

    def __init__(
        self,
        encoder: nn.Module,
        optimizer: OptimizerFactory | None = None,
        scheduler: SchedulerFactory | None = None,
    ) -> None:
        super().__init__(optimizer, scheduler)
        self.encoder = encoder
        dim = int(encoder.out_channels)  # type: ignore[arg-type]
        # bilinear discriminator h^T W s; one summary vector, so W s is computed once per step
        self.weight = nn.Parameter(torch.empty(dim, dim))
        self.bias = nn.Parameter(torch.zeros(1))
        nn.init.xavier_uniform_(self.weight)

    #: the graph and its corruption
    encoder_passes = 2
    #: the summary and the loss cover the global batch; each process shuffles the features of
    #: its own sampled nodes (the corruption's distribution, not the batch, is per process)
    supports_distributed = True
    #: the corruption of a batch (a named function, replaceable on an instance)
    corruption = staticmethod(shuffle_batch_nodes)

    forward_encoder = "encoder"  # forward() is encode(self.encoder, batch)

    def encoders(self) -> dict[str, nn.Module]:
        return {"encoder": self.encoder}

    def forward(self, batch: Data) -> Tensor:
        return encode(self.encoder, batch, seeds_only=True)

    def loss(self, batch: Data) -> dict[str, Tensor]:
        pos = encode(self.encoder, batch, seeds_only=True)
        neg = encode(self.encoder, self.corruption(batch), seeds_only=True)
        n = int(getattr(batch, "batch_size", pos.size(0)))  # seeds only in mini-batches
        # on several processes: the summary and the discriminator's loss over the global batch
        pos, neg = gather_rows(pos[:n]), gather_rows(neg[:n])
        ws = self.weight @ sigmoid_mean_readout(pos)
        pos_logits = pos @ ws + self.bias
        neg_logits = neg @ ws + self.bias
        return {"loss": dgi_bce(pos_logits, neg_logits)}
