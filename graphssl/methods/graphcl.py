"""GraphCL: graph contrastive learning with augmentations, and its batched augmentations.

The augmentations are named functions ``(batch, p) -> batch`` on a PyG ``Batch`` of many graphs:
graphs stay separate (every graph keeps at least one node, ``batch``/``ptr`` are rebuilt), and
randomness comes from torch's global generator, which the pipeline seeds once per run. A config
selects them with ``_partial_: true`` (named functions, not lambdas, so configs stay
serialisable).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.utils import subgraph as induced_subgraph

from graphssl.methods.base import OptimizerFactory, SchedulerFactory, SSLMethod
from graphssl.methods.collective import gather_rows_and_own, global_mean, world_size
from graphssl.methods.infograph import (
    _require_graph_batches,
    graph_index,
    multi_layer_readout,
    readout_dim,
)
from graphssl.methods.losses import graphcl_nt_xent, graphcl_nt_xent_terms
from graphssl.models.heads import MLPHead

__all__ = [
    "BatchAugment",
    "GraphCL",
    "drop_nodes",
    "identity",
    "mask_attributes",
    "perturb_edges",
    "random_choice",
    "random_subgraph",
]

BatchAugment = Callable[[Data], Data]


def _check_ratio(p: float) -> float:
    if not 0.0 <= p < 1.0:
        raise ValueError(f"augmentation ratio p must be in [0, 1), got {p}")
    return float(p)


def _node_counts(batch: Data) -> tuple[Tensor, Tensor, Tensor, int]:
    """(graph id per node, nodes per graph, first node of each graph, number of graphs)."""
    index, num_graphs = graph_index(batch)
    counts = torch.bincount(index, minlength=num_graphs)
    starts = torch.cumsum(counts, 0) - counts
    return index, counts, starts, num_graphs


def _keep_nodes(batch: Data, keep: Tensor) -> Data:
    """The sub-batch induced by the node mask ``keep`` (nodes relabelled, graphs kept apart).

    A graph that would lose all of its nodes keeps its first one, so the number of graphs and
    their order never change.
    """
    index, _, starts, num_graphs = _node_counts(batch)
    kept = torch.bincount(index[keep], minlength=num_graphs)
    keep = keep.clone()
    keep[starts[kept == 0]] = True
    out = copy.copy(batch)
    edge_attr = getattr(batch, "edge_attr", None)
    out.edge_index, new_attr = induced_subgraph(
        keep, batch.edge_index, edge_attr, relabel_nodes=True, num_nodes=int(keep.numel())
    )
    if edge_attr is not None:
        out.edge_attr = new_attr
    if getattr(batch, "edge_weight", None) is not None:
        _, out.edge_weight = induced_subgraph(
            keep, batch.edge_index, batch.edge_weight, num_nodes=int(keep.numel())
        )
    out.x = batch.x[keep]
    if getattr(batch, "batch", None) is not None:
        out.batch = index[keep]
        counts = torch.bincount(out.batch, minlength=num_graphs)
        out.ptr = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
    out.num_nodes = int(keep.sum())
    return out


def identity(batch: Data) -> Data:
    """No augmentation (GraphCL's reference code contrasts the original graph with one view)."""
    return batch


def drop_nodes(batch: Data, p: float = 0.2) -> Data:
    """Node dropping: remove each node with probability ``p`` with its edges (GraphCL §3)."""
    p = _check_ratio(p)
    keep = torch.rand(batch.x.size(0), device=batch.x.device) >= p
    return _keep_nodes(batch, keep)


def perturb_edges(batch: Data, p: float = 0.2) -> Data:
    """Edge perturbation: drop each edge with probability ``p`` and add as many random edges,
    each between two random nodes of the graph the dropped edge was in (GraphCL §3).

    Edges are treated as directed entries of ``edge_index``; added edges get zero
    ``edge_attr`` and unit ``edge_weight`` when the batch has them.
    """
    p = _check_ratio(p)
    edge_index = batch.edge_index
    device = edge_index.device
    drop = torch.rand(edge_index.size(1), device=device) < p
    index, counts, starts, _ = _node_counts(batch)
    graph_of_dropped = index[edge_index[0, drop]]
    n = counts[graph_of_dropped]
    new = starts[graph_of_dropped] + (torch.rand(2, n.numel(), device=device) * n).long()
    out = copy.copy(batch)
    out.edge_index = torch.cat([edge_index[:, ~drop], new], dim=1)
    edge_attr = getattr(batch, "edge_attr", None)
    if edge_attr is not None:
        pad = edge_attr.new_zeros((n.numel(), *edge_attr.shape[1:]))
        out.edge_attr = torch.cat([edge_attr[~drop], pad], dim=0)
    edge_weight = getattr(batch, "edge_weight", None)
    if edge_weight is not None:
        out.edge_weight = torch.cat([edge_weight[~drop], edge_weight.new_ones(n.numel())])
    return out


def mask_attributes(batch: Data, p: float = 0.2, mean: float = 0.5, std: float = 0.5) -> Data:
    """Attribute masking: replace the features of each node with probability ``p`` by Gaussian
    noise ``N(mean, std²)`` (the values of GraphCL's reference implementation)."""
    p = _check_ratio(p)
    x = batch.x
    masked = torch.rand(x.size(0), device=x.device) < p
    noise = mean + std * torch.randn(
        int(masked.sum()), *x.shape[1:], device=x.device, dtype=x.dtype
    )
    out = copy.copy(batch)
    out.x = x.clone()
    out.x[masked] = noise
    return out


def random_subgraph(batch: Data, p: float = 0.2) -> Data:
    """Subgraph: keep about ``1 - p`` of each graph's nodes, grown from one random node.

    From a random seed node per graph, nodes are added by random neighbourhood expansion (a
    random subset of the current set's unvisited neighbours each round, until the graph's
    budget ``ceil((1 - p) n)`` is reached or nothing is left to reach), then the induced
    subgraph is kept (GraphCL §3 samples it by random walk).
    """
    p = _check_ratio(p)
    device = batch.x.device
    index, counts, starts, num_graphs = _node_counts(batch)
    budget = torch.ceil((1.0 - p) * counts.double()).long().clamp_min(1)
    seeds = starts + (torch.rand(num_graphs, device=device) * counts).long()
    keep = torch.zeros(batch.x.size(0), dtype=torch.bool, device=device)
    keep[seeds[counts > 0]] = True
    size = (counts > 0).long()
    src, dst = batch.edge_index
    for _ in range(int(counts.max()) if counts.numel() else 0):
        room = budget - size
        frontier = keep[src] & ~keep[dst] & (room[index[dst]] > 0)
        if not bool(frontier.any()):
            break
        cand = torch.unique(dst[frontier])
        order = torch.argsort(torch.rand(cand.numel(), device=device))
        cand = cand[order]
        cand = cand[torch.sort(index[cand], stable=True).indices]  # by graph, random inside
        g = index[cand]
        per_graph = torch.bincount(g, minlength=num_graphs)
        rank = (
            torch.arange(cand.numel(), device=device) - (torch.cumsum(per_graph, 0) - per_graph)[g]
        )
        take = cand[rank < room[g]]
        keep[take] = True
        size = size + torch.bincount(index[take], minlength=num_graphs)
    return _keep_nodes(batch, keep)


def random_choice(batch: Data, augments: Sequence[BatchAugment]) -> Data:
    """Apply one of ``augments``, drawn uniformly per call (GraphCL's ``random2/3/4``)."""
    if not augments:
        raise ValueError("random_choice needs at least one augmentation, got none")
    i = int(torch.randint(len(augments), (1,)))
    return augments[i](batch)


class GraphCL(SSLMethod):
    """GraphCL (You et al., NeurIPS 2020, https://arxiv.org/abs/2010.13902).

    Two augmented views of every graph in the mini-batch (node dropping, edge perturbation,
    attribute masking, subgraph), encoded by a GNN with InfoGraph's all-layer sum readout,
    projected by a two-layer MLP and contrasted with a graph-level NT-Xent loss
    (:func:`~graphssl.methods.losses.graphcl_nt_xent`). The
    embedding of a graph is the readout of the un-augmented graph (before the projection head).

    Args:
        encoder: GNN mapping ``(x, edge_index)`` to ``(N, D)`` (the paper uses GIN).
        optimizer: partial optimizer constructor (reference code: Adam, lr 1e-2).
        augment1: augmentation of the first view (default: :func:`identity`).
        augment2: augmentation of the second view (default: :func:`random_choice` over
            :func:`drop_nodes` and :func:`random_subgraph` with ratio 0.2).
        tau: temperature (default: ``0.2``).
        pool: graph readout, ``"sum"`` or ``"mean"`` (default: ``"sum"``).
        concat_layers: concatenate the node features of every layer (default: ``True``).
        scheduler: partial learning-rate scheduler constructor, stepped after every optimizer
            step (default: ``None``, a constant learning rate).
    """

    supports_distributed = True  # the loss covers the global batch (gather_rows)

    graph_level = True
    supports_mini_batch = False

    def __init__(
        self,
        encoder: nn.Module,
        optimizer: OptimizerFactory | None = None,
        augment1: BatchAugment | None = None,
        augment2: BatchAugment | None = None,
        tau: float = 0.2,
        pool: str = "sum",
        concat_layers: bool = True,
        scheduler: SchedulerFactory | None = None,
    ) -> None:
        super().__init__(optimizer, scheduler)
        if tau <= 0:
            raise ValueError(f"tau must be > 0, got {tau}")
        if pool not in ("sum", "mean"):
            raise ValueError(f"pool must be 'sum' or 'mean', got {pool!r}")
        self.encoder = encoder
        self.augment1: BatchAugment = augment1 if augment1 is not None else identity
        self.augment2: BatchAugment = augment2 if augment2 is not None else _default_augment
        self.tau = tau
        self.pool = pool
        self.concat_layers = concat_layers
        self.embedding_dim = readout_dim(encoder, concat_layers)
        dim = self.embedding_dim
        self.projector = MLPHead(dim, dim, dim, act="relu")
        for layer in self.projector.modules():
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
        z1 = self.projector(self(self.augment1(batch)))
        z2 = self.projector(self(self.augment2(batch)))
        # on several processes: the negatives are the other graphs of the global batch
        if world_size() == 1:
            return {"loss": graphcl_nt_xent(z1, z2, self.tau)}
        # on several processes: each rank's graphs against the global batch's
        (z1, z2), mine = gather_rows_and_own(z1, z2)
        terms = graphcl_nt_xent_terms(z1, z2, self.tau, anchors=mine)
        return {"loss": global_mean(terms, count=z1.shape[0])}


def _default_augment(batch: Data) -> Data:
    """GraphCL's ``random2``: node dropping or subgraph, ratio 0.2."""
    if bool(torch.randint(2, (1,))):
        return random_subgraph(batch, 0.2)
    return drop_nodes(batch, 0.2)
