"""Graph augmentations for contrastive and bootstrapped methods.

Each augmentation is a named, picklable callable ``Data -> Data`` (style.md rule 8) drawing its
randomness from torch's generator, which the pipeline seeds once per run.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch_geometric.data import Data
from torch_geometric.utils import dropout_edge, mask_feature, subgraph


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
        return out


class MaskFeatures(GraphAugment):
    """Zero each feature column with probability ``p`` (the same columns for every node)."""

    def __init__(self, p: float = 0.2) -> None:
        self.p = _check_prob("feature mask probability p", p)

    def __call__(self, data: Data) -> Data:
        out = copy.copy(data)
        out.x, _ = mask_feature(data.x, p=self.p, mode="col", training=self.p > 0)
        return out


class DropNodes(GraphAugment):
    """Drop each node with probability ``p`` by zeroing its features and removing its edges
    (node count and order are kept, so node-level losses stay aligned)."""

    def __init__(self, p: float = 0.1) -> None:
        self.p = _check_prob("node drop probability p", p)

    def __call__(self, data: Data) -> Data:
        keep = torch.rand(data.num_nodes, device=data.x.device) >= self.p
        out = copy.copy(data)
        out.x = data.x * keep.unsqueeze(-1).to(data.x.dtype)
        out.edge_index, _ = subgraph(keep, data.edge_index, num_nodes=data.num_nodes)
        return out


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
