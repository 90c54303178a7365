"""InfoGraph, and the all-layer graph readout it shares with GraphCL."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.nn import global_add_pool, global_mean_pool

from graphssl.methods.base import OptimizerFactory, SchedulerFactory, SSLMethod
from graphssl.methods.collective import gather_rows_and_own, global_mean, world_size

__all__ = [
    "FeedForward",
    "InfoGraph",
    "graph_index",
    "layer_outputs",
    "local_global_jsd",
    "local_global_jsd_terms",
    "multi_layer_readout",
    "readout_dim",
]


def graph_index(batch: Data) -> tuple[Tensor, int]:
    """The graph id of every node (``batch.batch``; zeros for a single graph) and the number
    of graphs."""
    index = getattr(batch, "batch", None)
    if index is None:
        return torch.zeros(int(batch.num_nodes), dtype=torch.long, device=batch.x.device), 1
    num_graphs = getattr(batch, "num_graphs", None)
    return index, int(num_graphs) if num_graphs is not None else int(index.max()) + 1


def _layers(encoder: nn.Module) -> nn.ModuleList | None:
    """The per-layer modules of a PyG basic GNN (``convs``) or MLP (``lins``), if any."""
    gnn = getattr(encoder, "gnn", None)
    for attr in ("convs", "lins"):
        layers = getattr(gnn, attr, None)
        if isinstance(layers, nn.ModuleList) and len(layers) > 0:
            return layers
    return None


def readout_dim(encoder: nn.Module, concat_layers: bool = True) -> int:
    """Width of :func:`multi_layer_readout`: ``out_channels`` times the layer count (or once
    when ``concat_layers`` is off or the encoder exposes no layers)."""
    dim = int(encoder.out_channels)  # type: ignore[arg-type]
    layers = _layers(encoder)
    return dim * len(layers) if concat_layers and layers is not None else dim


@contextmanager
def _capture_inputs(layers: nn.ModuleList) -> Iterator[list[Tensor]]:
    """Record the first positional input of every layer after the first while active."""
    seen: list[Tensor] = []

    def hook(module: nn.Module, args: tuple[Any, ...]) -> None:
        seen.append(args[0])

    handles = [layer.register_forward_pre_hook(hook) for layer in list(layers)[1:]]
    try:
        yield seen
    finally:
        for h in handles:
            h.remove()


def layer_outputs(encoder: nn.Module, batch: Data) -> list[Tensor]:
    """Node embeddings ``[N, D]`` after every layer of ``encoder`` (the last one is exactly
    ``encoder(x, edge_index)``).

    For PyG basic GNNs (GIN, GCN, GraphSAGE, GAT) and MLPs, the output of layer ``i`` (after its
    normalisation, activation and dropout) is what layer ``i + 1`` receives, so it is read from
    a forward pre-hook and the encoder runs once, unchanged. Other encoders give their output
    only.
    """
    call = (batch.x, batch.edge_index, getattr(batch, "edge_weight", None))
    layers = _layers(encoder)
    if layers is None:
        return [encoder(*call)]
    with _capture_inputs(layers) as hidden:
        out = encoder(*call)
    return [*hidden, out]


def multi_layer_readout(
    encoder: nn.Module, batch: Data, pool: str = "sum", concat_layers: bool = True
) -> tuple[Tensor, Tensor]:
    """InfoGraph's readout: node features of all layers concatenated, and their graph pooling.

    Args:
        encoder: a GNN encoder (see :func:`layer_outputs`).
        batch: a PyG ``Batch`` of graphs (or a single ``Data``).
        pool: ``"sum"`` (InfoGraph, GraphCL) or ``"mean"`` (default: ``"sum"``).
        concat_layers: concatenate every layer; ``False`` keeps the last (default: ``True``).

    Returns:
        ``(local [N, L*D], global [G, L*D])`` (``D`` instead of ``L*D`` without concatenation).
    """
    if pool not in ("sum", "mean"):
        raise ValueError(f"pool must be 'sum' or 'mean', got {pool!r}")
    outs = (
        layer_outputs(encoder, batch)
        if concat_layers
        else [encoder(batch.x, batch.edge_index, getattr(batch, "edge_weight", None))]
    )
    local = torch.cat(outs, dim=-1) if len(outs) > 1 else outs[0]
    index, num_graphs = graph_index(batch)
    pool_fn = global_add_pool if pool == "sum" else global_mean_pool
    return local, pool_fn(local, index, size=num_graphs)


def local_global_jsd(local: Tensor, summary: Tensor, index: Tensor) -> Tensor:
    """InfoGraph's Jensen-Shannon MI estimator between node and graph representations, negated.

    Every (node, graph) pair is scored by a dot product; a node and its own graph form a
    positive pair, a node and any other graph of the batch a negative one. With
    ``sp = softplus``, the loss is ``E_neg[sp(s) - log 2] - E_pos[log 2 - sp(-s)]`` (Nowozin et
    al.'s f-GAN bound as in Deep InfoMax, Hjelm et al., ICLR 2019).

    Args:
        local: ``(N, D)`` node representations (after the local discriminator).
        summary: ``(G, D)`` graph representations (after the global discriminator).
        index: ``(N,)`` graph id of each node.

    Returns:
        A scalar; ``-2 log 2`` is its minimum. With one graph only the positive term remains.
    """
    return local_global_jsd_terms(local, summary, index).mean()


def local_global_jsd_terms(local: Tensor, summary: Tensor, index: Tensor) -> Tensor:
    """The per-node terms of :func:`local_global_jsd`, whose mean is the loss: node ``i``'s
    ``Σ_{g ≠ g_i} (sp(s_ig) - log 2) / (G - 1) - (log 2 - sp(-s_{i g_i}))``.

    On several processes each computes its own nodes' terms against every graph of the global
    batch, so the nodes' rows never travel and the ``(N, G)`` scores are shared out.

    Args:
        local: ``(n, D)`` node representations (after the local discriminator).
        summary: ``(G, D)`` graph representations (after the global discriminator).
        index: ``(n,)`` graph id of each node, a row of ``summary``.

    Returns:
        ``(n,)`` terms.
    """
    num_graphs = summary.size(0)
    scores = local @ summary.t()  # (n, G)
    own = scores.gather(1, index.view(-1, 1)).squeeze(1)
    log2 = math.log(2.0)
    positive = log2 - F.softplus(-own)
    if num_graphs < 2:
        return -positive
    negative = F.softplus(scores).sum(1) - F.softplus(own) - (num_graphs - 1) * log2
    return negative / (num_graphs - 1) - positive


class FeedForward(nn.Module):
    """InfoGraph's discriminator network: three ``Linear → ReLU`` layers plus a linear shortcut.

    Args:
        dim: input and output size.
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.block = nn.Sequential(
            nn.Linear(dim, dim),
            nn.ReLU(),
            nn.Linear(dim, dim),
            nn.ReLU(),
            nn.Linear(dim, dim),
            nn.ReLU(),
        )
        self.shortcut = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.block(x) + self.shortcut(x)


def _require_graph_batches(method: SSLMethod, data: Data) -> None:
    """Fail fast when a graph-level method is given a node-level dataset (the trainer calls
    ``on_train_start`` only for those)."""
    raise ValueError(
        f"{type(method).__name__} is a graph-level method (one embedding per graph) but the "
        f"dataset is a single graph with {int(data.num_nodes)} nodes (node-level); choose a "
        f"graph-level dataset, e.g. dataset=mutag or dataset=synthetic_graphs"
    )


class InfoGraph(SSLMethod):
    """InfoGraph (Sun et al., ICLR 2020, https://arxiv.org/abs/1908.01000).

    Maximises the mutual information between graph-level and node-level ("patch")
    representations with a Jensen-Shannon estimator: a node and the graph it belongs to are a
    positive pair, a node and the other graphs of the mini-batch negatives. Representations are
    the node features of all encoder layers concatenated (``local``) and their sum over each
    graph (``global``); each passes a discriminator MLP before the scores. The embedding of a
    graph is its global representation (before the discriminator).

    Args:
        encoder: GNN mapping ``(x, edge_index)`` to ``(N, D)`` (the paper uses GIN).
        optimizer: partial optimizer constructor (paper: Adam, lr 1e-3).
        pool: graph readout, ``"sum"`` or ``"mean"`` (default: ``"sum"``).
        concat_layers: concatenate the node features of every layer (default: ``True``).
        scheduler: partial learning-rate scheduler constructor, stepped after every optimizer
            step (default: ``None``, a constant learning rate).
    """

    graph_level = True
    supports_mini_batch = False
    supports_distributed = True  # nodes and graphs of the global batch (gather_rows)

    def __init__(
        self,
        encoder: nn.Module,
        optimizer: OptimizerFactory | None = None,
        pool: str = "sum",
        concat_layers: bool = True,
        scheduler: SchedulerFactory | None = None,
    ) -> None:
        super().__init__(optimizer, scheduler)
        if pool not in ("sum", "mean"):
            raise ValueError(f"pool must be 'sum' or 'mean', got {pool!r}")
        self.encoder = encoder
        self.pool = pool
        self.concat_layers = concat_layers
        self.embedding_dim = readout_dim(encoder, concat_layers)
        self.local_discriminator = FeedForward(self.embedding_dim)
        self.global_discriminator = FeedForward(self.embedding_dim)
        for module in (self.local_discriminator, self.global_discriminator):
            for layer in module.modules():
                if isinstance(layer, nn.Linear):
                    nn.init.xavier_uniform_(layer.weight)
                    nn.init.zeros_(layer.bias)

    def encoders(self) -> dict[str, nn.Module]:
        return {"encoder": self.encoder}

    def on_train_start(self, data: Data, max_epochs: int) -> None:
        _require_graph_batches(self, data)

    def forward(self, batch: Data) -> Tensor:
        """``(G, L*D)`` graph embeddings."""
        return multi_layer_readout(self.encoder, batch, self.pool, self.concat_layers)[1]

    def loss(self, batch: Data) -> dict[str, Tensor]:
        local, summary = multi_layer_readout(self.encoder, batch, self.pool, self.concat_layers)
        index, _ = graph_index(batch)
        local, summary = self.local_discriminator(local), self.global_discriminator(summary)
        if world_size() == 1:
            return {"loss": local_global_jsd(local, summary, index)}
        # on several processes: every rank's graphs, so a node's negatives are all the other
        # graphs of the global batch (its graph ids shifted past the earlier ranks'); each rank
        # scores its own nodes, the loss their terms' mean over the global batch
        (summary,), mine = gather_rows_and_own(summary)
        return {"loss": global_mean(local_global_jsd_terms(local, summary, index + mine.start))}
