"""Deep Graph Infomax."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.data import Data

from graphssl.methods.base import OptimizerFactory, SchedulerFactory, SSLMethod
from graphssl.methods.collective import PendingSum, global_mean, world_size
from graphssl.methods.losses import dgi_bce, dgi_bce_terms
from graphssl.models.encode import encode
from graphssl.models.sparse_input import derive_rows

#: a corruption: ``(x, edge_index) → x'`` or ``(x', edge_index')``, as PyG's
#: ``DeepGraphInfomax(corruption=...)`` takes it
Corruption = Callable[..., Any]


#: attributes of a batch that describe its edges (and a ``NeighborLoader`` batch's per-hop
#: counts), dropped from a corrupted copy whose edges are new
EDGE_ALIGNED = ("edge_weight", "edge_attr", "e_id", "num_sampled_edges", "num_sampled_nodes")


def shuffle_nodes(x: Tensor) -> Tensor:
    """DGI's corruption: permute the rows of the feature matrix ``x`` ``(N, F)``."""
    perm = torch.randperm(x.size(0), device=x.device)
    out = x[perm]
    derive_rows(out, x, perm)  # sparse features stay sparse: their CSR rows permuted
    return out


def shuffle_features(x: Tensor, edge_index: Tensor) -> tuple[Tensor, Tensor]:
    """DGI's default corruption: the features of the nodes shuffled (a random permutation of
    the rows of ``x`` ``(N, F)``, drawn with torch's global generator), the edges kept.

    Args:
        x: ``(N, F)`` node features.
        edge_index: ``(2, E)`` edges, returned unchanged.

    Returns:
        ``(x[perm], edge_index)``.
    """
    return shuffle_nodes(x), edge_index


def _corrupted(batch: Data, corruption: Corruption) -> Data:
    """A shallow copy of ``batch`` with the corrupted features (and edges, when the corruption
    returns new ones), after checking what the corruption returned.

    When the edges change, the batch's edge attributes and its ``NeighborLoader`` per-hop
    counts (:data:`EDGE_ALIGNED`) no longer describe them, so the copy drops them: the encoder
    then normalises the new graph itself and runs every hop (the seed rows stay first, as the
    loss needs).
    """
    func = getattr(corruption, "func", corruption)  # the function of a functools.partial
    name = getattr(func, "__name__", None) or type(func).__name__
    out = corruption(batch.x, batch.edge_index)
    x, edge_index = (out, batch.edge_index) if isinstance(out, Tensor) else (None, None)
    if isinstance(out, tuple) and len(out) == 2:
        x, edge_index = out
    if not isinstance(x, Tensor) or not isinstance(edge_index, Tensor):
        raise TypeError(
            f"corruption {name!r} returned {type(out).__name__}; expected the corrupted features "
            f"x (a tensor) or a tuple (x, edge_index) of tensors"
        )
    if x.shape != batch.x.shape:
        raise ValueError(
            f"corruption {name!r} returned features of shape {tuple(x.shape)}, expected "
            f"{tuple(batch.x.shape)} (one row per node of the batch, in the same order)"
        )
    corrupted = copy.copy(batch)
    corrupted.x = x
    if edge_index is batch.edge_index:
        return corrupted
    n = batch.x.size(0)
    if (
        edge_index.dim() != 2
        or edge_index.size(0) != 2
        or edge_index.is_floating_point()
        or (edge_index.numel() > 0 and (edge_index.min() < 0 or edge_index.max() >= n))
    ):
        raise ValueError(
            f"corruption {name!r} returned edge_index of shape {tuple(edge_index.shape)} and "
            f"dtype {edge_index.dtype}; expected integer node ids in [0, {n}) of shape (2, E)"
        )
    corrupted.edge_index = edge_index
    for key in EDGE_ALIGNED:
        if key in corrupted:
            del corrupted[key]
    return corrupted


def sigmoid_mean_readout(h: Tensor) -> Tensor:
    """DGI's summary vector ``sigmoid(mean_i h_i)``; h: ``(N, D)`` → ``(D,)``."""
    return torch.sigmoid(h.mean(dim=0))


class DGI(SSLMethod):
    """Deep Graph Infomax (Veličković et al., ICLR 2019, https://arxiv.org/abs/1809.10341).

    Maximises the mutual information between node embeddings and a graph summary with a
    bilinear discriminator that tells real nodes from nodes of a corrupted graph (by default
    the graph with its feature rows shuffled, :func:`shuffle_features`).

    The corruption is an argument, as in PyG's ``DeepGraphInfomax(corruption=...)``: a named
    function ``corruption(x, edge_index)`` returning the corrupted features ``x'`` (same shape
    as ``x``, one row per node) or a tuple ``(x', edge_index')``; it draws its randomness from
    torch's global generator, so a seeded run stays reproducible. From a config::

        corruption:
          _target_: mypkg.corruptions.drop_half_the_edges
          _partial_: true

    Args:
        encoder: GNN mapping ``(x, edge_index)`` to node embeddings ``(N, D)``.
        optimizer: partial optimizer constructor (default in config: Adam, lr 1e-3).
        scheduler: partial learning-rate scheduler constructor, stepped after every optimizer
            step (default: ``None``, a constant learning rate).
        corruption: returns the corrupted inputs of the negative pass (default:
            :func:`shuffle_features`, DGI's row shuffle of the features).

    Raises:
        TypeError: when ``corruption`` is not callable, or (at the first step) returns
            something other than a tensor or a tuple ``(x, edge_index)``.
        ValueError: (at the first step) when the corrupted features' shape differs from the
            input's, or the corrupted edges are not ``(2, E)`` node ids of the batch.
    """

    def __init__(
        self,
        encoder: nn.Module,
        optimizer: OptimizerFactory | None = None,
        scheduler: SchedulerFactory | None = None,
        corruption: Corruption = shuffle_features,
    ) -> None:
        super().__init__(optimizer, scheduler)
        if not callable(corruption):
            raise TypeError(
                f"corruption must be callable as corruption(x, edge_index), got "
                f"{type(corruption).__name__} {corruption!r}; from a config, point _target_ at "
                f"a function and set _partial_: true"
            )
        self.corruption = corruption
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

    forward_encoder = "encoder"  # forward() is encode(self.encoder, batch)

    def encoders(self) -> dict[str, nn.Module]:
        return {"encoder": self.encoder}

    def forward(self, batch: Data) -> Tensor:
        return encode(self.encoder, batch, seeds_only=True)

    def loss(self, batch: Data) -> dict[str, Tensor]:
        n = int(getattr(batch, "batch_size", batch.num_nodes))  # seeds only in mini-batches
        pos = encode(self.encoder, batch, seeds_only=True)[:n]
        if world_size() == 1:
            neg = encode(self.encoder, _corrupted(batch, self.corruption), seeds_only=True)[:n]
            ws = self.weight @ sigmoid_mean_readout(pos)
            return {"loss": dgi_bce(pos @ ws + self.bias, neg @ ws + self.bias)}
        # on several processes: the summary is the global batch's mean (the row sums and the
        # row count summed over ranks, with gradient; summed while this rank encodes the
        # corrupted graph) and the loss the mean of every node's terms over the global batch,
        # whose count came with the sums; no rank needs another rank's rows, and the loss
        # needs no collective of its own
        pending = PendingSum(torch.cat([pos.sum(dim=0), pos.new_full((1,), float(n))]))
        neg = encode(self.encoder, _corrupted(batch, self.corruption), seeds_only=True)[:n]
        stats = pending.wait()
        count = stats[-1].detach()
        ws = self.weight @ torch.sigmoid(stats[:-1] / count)
        terms = dgi_bce_terms(pos @ ws + self.bias, neg @ ws + self.bias)
        return {"loss": global_mean(terms, count=count)}
