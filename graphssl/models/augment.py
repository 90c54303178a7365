"""Graph augmentations for contrastive and bootstrapped methods.

Each augmentation is a named, picklable callable ``Data -> Data`` drawing its
randomness from torch's global generator (of the input's device), which the pipeline seeds once
per run: the same seed gives the same views. Every augmentation keeps the node count and order,
so node-level losses can compare row ``i`` of two views. The ``conf/augment`` group holds one YAML
per augmentation.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.utils import dropout_edge, mask_feature, subgraph

from graphssl.models.sparse_input import derive_masked_columns, derive_scaled_rows


def _check_prob(name: str, p: float) -> float:
    if not 0.0 <= p < 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1), got {p}")
    return float(p)


class GraphAugment:
    """Base class: ``augment(data)`` returns a new ``Data`` and never modifies its input."""

    def __call__(self, data: Data) -> Data:
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class DropEdge(GraphAugment):
    """Remove each edge independently with probability ``p`` (GRACE, BGRL)."""

    def __init__(self, p: float = 0.2) -> None:
        self.p = _check_prob("edge drop probability p", p)

    def __call__(self, data: Data) -> Data:
        out = copy.copy(data)
        out.edge_index, keep = dropout_edge(data.edge_index, p=self.p, training=self.p > 0)
        if getattr(data, "edge_weight", None) is not None:
            out.edge_weight = data.edge_weight[keep]
        _recount_hop_edges(out, data, keep)
        return out


class MaskFeatures(GraphAugment):
    """Zero each feature column with probability ``p`` (the same columns for every node)."""

    def __init__(self, p: float = 0.2) -> None:
        self.p = _check_prob("feature mask probability p", p)

    def __call__(self, data: Data) -> Data:
        out = copy.copy(data)
        out.x, keep = mask_feature(data.x, p=self.p, mode="col", training=self.p > 0)
        if out.x is not data.x:  # sparse features stay sparse: the masked CSR values
            derive_masked_columns(out.x, data.x, keep.view(-1))
        return out


class DropNodes(GraphAugment):
    """Drop each node with probability ``p`` by zeroing its features and removing its edges
    (node count and order are kept, so node-level losses stay aligned)."""

    def __init__(self, p: float = 0.1) -> None:
        self.p = _check_prob("node drop probability p", p)

    def __call__(self, data: Data) -> Data:
        keep = torch.rand(data.num_nodes, device=data.x.device) >= self.p
        return _keep_nodes(data, keep)


def _keep_nodes(data: Data, keep: Tensor) -> Data:
    """Zero the features of the nodes outside ``keep`` ``(N,)`` bool and remove their edges."""
    out = copy.copy(data)
    out.x = data.x * keep.unsqueeze(-1).to(data.x.dtype)
    derive_scaled_rows(out.x, data.x, keep)  # sparse features stay sparse
    edge_weight = getattr(data, "edge_weight", None)
    out.edge_index, edge_weight, edge_mask = subgraph(
        keep,
        data.edge_index,
        edge_attr=edge_weight,
        num_nodes=data.num_nodes,
        return_edge_mask=True,
    )
    if edge_weight is not None:
        out.edge_weight = edge_weight
    _recount_hop_edges(out, data, edge_mask)
    return out


def _recount_hop_edges(out: Data, data: Data, keep: Tensor) -> None:
    """Keep a ``NeighborLoader`` batch's per-hop edge counts (``num_sampled_edges``) true in
    ``out`` after the edges of ``data`` outside ``keep`` ``(E,)`` bool were removed in order, so
    encoders can still skip the hops a layer does not need."""
    counts = getattr(data, "num_sampled_edges", None)
    if counts is None:
        return
    counts = [int(c) for c in counts]
    if sum(counts) != keep.numel():
        return  # the counts no longer describe these edges; encoders will not use them
    bounds = torch.tensor(counts, device=keep.device).cumsum(0)
    kept = torch.cat([keep.new_zeros(1, dtype=torch.long), keep.long().cumsum(0)])[bounds]
    out.num_sampled_edges = kept.diff(prepend=kept.new_zeros(1)).tolist()


class Subgraph(GraphAugment):
    """Keep a BFS-grown node subset and isolate the rest (GraphCL's subgraph view, You et al.,
    NeurIPS 2020, https://arxiv.org/abs/2010.13902), keeping the node count and order.

    Starting from a uniformly drawn node, whole BFS layers (all nodes adjacent to the kept set)
    are added while they fit; the layer that would overshoot contributes a uniform random subset,
    so exactly ``round(keep * N)`` nodes (at least one) are kept. When the kept set has no
    outside neighbour left (its connected components are exhausted) the search restarts from a
    uniformly drawn node not yet kept. Nodes outside the subset get zero features and lose all
    their edges, as in :class:`DropNodes`.

    Args:
        keep: fraction of nodes kept, in ``(0, 1]`` (default: ``0.8``).
    """

    def __init__(self, keep: float = 0.8) -> None:
        if not 0.0 < keep <= 1.0:
            raise ValueError(f"subgraph keep fraction must be in (0, 1], got {keep}")
        self.keep = float(keep)

    def sample_nodes(self, edge_index: Tensor, num_nodes: int) -> Tensor:
        """The kept nodes as a ``(N,)`` bool mask, on ``edge_index``'s device."""
        device = edge_index.device
        selected = torch.zeros(num_nodes, dtype=torch.bool, device=device)
        target = min(num_nodes, max(1, round(self.keep * num_nodes)))
        if num_nodes == 0:
            return selected
        row, col = edge_index[0], edge_index[1]
        frontier = torch.randint(num_nodes, (1,), device=device)
        count = 0
        while True:
            need = target - count
            if frontier.numel() > need:
                frontier = frontier[torch.randperm(frontier.numel(), device=device)[:need]]
            selected[frontier] = True
            count += frontier.numel()
            if count >= target:
                return selected
            # the next BFS layer: every node outside the kept set adjacent to it
            leaving = selected[row] & ~selected[col]
            frontier = torch.unique(col[leaving])
            if frontier.numel() == 0:  # components exhausted: restart from a fresh node
                rest = (~selected).nonzero().view(-1)
                frontier = rest[torch.randint(rest.numel(), (1,), device=device)]

    def __call__(self, data: Data) -> Data:
        if self.keep == 1.0:
            return copy.copy(data)
        return _keep_nodes(data, self.sample_nodes(data.edge_index, int(data.num_nodes)))


class Compose(GraphAugment):
    """Apply several augmentations in order."""

    def __init__(self, augments: Sequence[GraphAugment]) -> None:
        self.augments = list(augments)

    def __call__(self, data: Data) -> Data:
        for aug in self.augments:
            data = aug(data)
        return data


def edge_and_feature(edge_p: float = 0.2, feature_p: float = 0.2) -> Compose:
    """The usual GRACE/BGRL view: :class:`DropEdge` then :class:`MaskFeatures`."""
    return Compose([DropEdge(edge_p), MaskFeatures(feature_p)])
