"""Nearest-neighbour graphs built from image pixels, as node-level DataModules.

Tsitsulin et al. (2023, https://arxiv.org/abs/2305.16562, §4.2, Table 2) add MNIST and
CIFAR-10 to their sparsification study as "ε-nearest neighbor graphs with average degree 100"
(d̄ = |E| / |V| = 99 in their Table 2). :func:`epsilon_graph` builds such a graph: the
``round(n · avg_degree)`` most similar pairs of rows, i.e. a global similarity threshold ε,
so that the graph has exactly ``avg_degree`` undirected edges per node. Candidate pairs come from
each row's ``candidates · avg_degree`` nearest neighbours (a symmetric kNN graph), computed in
row chunks, so memory stays ``O(n · k)`` and never ``O(n²)``; a pair within ε that is in neither
row's candidate list is missed, which only happens at rows with more than
``candidates · avg_degree`` neighbours within ε.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Data

from graphssl.data.node import NodeDataModule
from graphssl.data.paths import require_raw_files

__all__ = ["FashionMNISTKNNGraphDataModule", "epsilon_graph"]

Metric = Literal["cosine", "l2"]

_FMNIST_RAW = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


def epsilon_graph(
    x: Tensor,
    avg_degree: float,
    metric: Metric = "cosine",
    candidates: float = 2.0,
    chunk_size: int = 1024,
) -> Tensor:
    """The ``round(n · avg_degree)`` most similar pairs of rows of ``x`` as a symmetric graph.

    Args:
        x: ``(N, F)`` float features.
        avg_degree: undirected edges per node ``|E| / |V|`` (Table 2's d̄); must be ``> 0``.
        metric: ``"cosine"`` similarity or (negative squared) ``"l2"`` distance
            (default: ``"cosine"``).
        candidates: each row contributes its ``ceil(candidates · avg_degree)`` nearest rows as
            candidate pairs (default: ``2.0``).
        chunk_size: rows per similarity block (default: ``1024``).

    Returns:
        ``[2, 2·|E|]`` coalesced ``edge_index`` with both directions of each edge and no
        self-loops.
    """
    if x.ndim != 2:
        raise ValueError(f"x must be an (N, F) matrix, got shape {tuple(x.shape)}")
    if not (math.isfinite(avg_degree) and avg_degree > 0):
        raise ValueError(f"avg_degree must be a finite number > 0, got {avg_degree!r}")
    if metric not in ("cosine", "l2"):
        raise ValueError(f"metric must be 'cosine' or 'l2', got {metric!r}")
    if candidates < 1 or chunk_size < 1:
        raise ValueError(
            f"candidates must be >= 1 and chunk_size >= 1, got {candidates} and {chunk_size}"
        )
    n = x.shape[0]
    if n < 2:
        return torch.empty(2, 0, dtype=torch.long)
    x = x.float()
    if metric == "cosine":
        x = F.normalize(x, dim=1)
    sq = (x * x).sum(1)
    m = min(n - 1, math.ceil(candidates * avg_degree))
    keys, scores = [], []
    for start in range(0, n, chunk_size):
        rows = torch.arange(start, min(start + chunk_size, n))
        s = x[rows] @ x.T
        if metric == "l2":  # -‖a - b‖² up to the row's own constant, which ranking ignores
            s = 2 * s - sq.view(1, -1) - sq[rows].view(-1, 1)
        s[torch.arange(rows.numel()), rows] = -math.inf
        val, idx = s.topk(m, dim=1)
        lo = torch.minimum(rows.view(-1, 1), idx)
        hi = torch.maximum(rows.view(-1, 1), idx)
        keys.append((lo * n + hi).view(-1))
        scores.append(val.view(-1))
    key, inverse = torch.unique(torch.cat(keys), return_inverse=True)
    score = torch.full((key.numel(),), -math.inf).scatter_reduce(
        0, inverse, torch.cat(scores), reduce="amax"
    )
    target = round(n * avg_degree)
    if target > key.numel():
        warnings.warn(
            f"epsilon_graph: only {key.numel()} candidate pairs for {target} edges "
            f"(avg_degree={avg_degree:g}, n={n}); raise `candidates`",
            stacklevel=2,
        )
        target = key.numel()
    keep = key[score.topk(target).indices]
    lo, hi = keep // n, keep % n
    row, col = torch.cat([lo, hi]), torch.cat([hi, lo])
    order = torch.argsort(row * n + col)
    return torch.stack([row[order], col[order]])


class FashionMNISTKNNGraphDataModule(NodeDataModule):
    """A nearest-neighbour graph of Fashion-MNIST images (Xiao et al., 2017), one node per image.

    A seeded subset of ``num_nodes`` training images; ``x`` = pixels scaled to ``[0, 1]``
    (784 features), ``y`` = the 10 classes; edges from :func:`epsilon_graph` on the pixel
    vectors with ``k`` undirected edges per node. Raw files are read from
    ``<data_dir>/FashionMNIST/raw/`` with torchvision (never downloaded).

    Args:
        name: dataset name (default: ``"FashionMNIST-kNN"``).
        num_nodes: images kept (seeded); ``None`` all 60000 (default: ``10000``).
        k: target average degree, undirected edges per node ``|E|/|V|`` (default: ``100``).
        metric: ``"cosine"`` or ``"l2"`` on pixel vectors (default: ``"cosine"``).
        candidates: candidate neighbours per node, as a multiple of ``k`` (default: ``2.0``).
        chunk_size: rows per similarity block (default: ``1024``).
        **kwargs: :class:`~graphssl.data.node.NodeDataModule` arguments (``split`` defaults to
            ``"random"``).
    """

    def __init__(
        self,
        name: str = "FashionMNIST-kNN",
        num_nodes: int | None = 10000,
        k: float = 100.0,
        metric: Metric = "cosine",
        candidates: float = 2.0,
        chunk_size: int = 1024,
        **kwargs: object,
    ) -> None:
        kwargs.setdefault("split", "random")
        super().__init__(name, **kwargs)  # type: ignore[arg-type]
        if num_nodes is not None and num_nodes < 2:
            raise ValueError(f"num_nodes must be >= 2 or null, got {num_nodes}")
        self.num_nodes = num_nodes
        self.k = float(k)
        self.metric: Metric = metric
        self.candidates = candidates
        self.chunk_size = chunk_size

    def load(self) -> Data:
        from torchvision.datasets import FashionMNIST

        raw = Path(self.data_dir) / "FashionMNIST" / "raw"
        require_raw_files(self.name, raw, _FMNIST_RAW)
        ds = FashionMNIST(str(self.data_dir), train=True, download=False)
        images, labels = ds.data, ds.targets
        n_all = images.shape[0]
        if self.num_nodes is not None and self.num_nodes < n_all:
            gen = torch.Generator().manual_seed(self.seed)
            keep = torch.randperm(n_all, generator=gen)[: self.num_nodes].sort().values
            images, labels = images[keep], labels[keep]
        x = images.reshape(images.shape[0], -1).float() / 255.0
        edge_index = epsilon_graph(x, self.k, self.metric, self.candidates, self.chunk_size)
        return Data(x=x, edge_index=edge_index, y=labels.long(), num_nodes=x.shape[0])
