"""Graph sparsification corruptions (Tsitsulin et al., 2023, arXiv 2305.16562, §4.2).

"Unsupervised Embedding Quality Evaluation" (Tsitsulin, Munkhoeva & Perozzi, 2023,
https://arxiv.org/abs/2305.16562) sparsifies a graph to a target number of undirected edges per
node ``t`` (``d̄ = |E| / |V|``, edges per node, *not* ``2|E| / |V|``) and checks whether an
embedding diagnostic tracks the downstream accuracy of DeepWalk embeddings across the ``t`` grid.
Two corruptions are defined (Tsitsulin et al. 2023, §4.2):

* :class:`NaiveSparsify` keeps a uniform random subset of ``round(n·t)`` undirected edges; the
  graph falls apart into many components as ``t`` decreases.
* :class:`ConnectedSparsify` first draws a uniform random spanning forest (one uniform spanning
  tree per connected component, Wilson's algorithm, :func:`spanning_forest`) and then adds
  ``round(n·(t - 1))`` further edges drawn uniformly from the remaining ones, so every connected
  component of the input stays connected.

Both operate on the undirected simple graph underlying ``edge_index``: duplicate edges and both
directions of an edge count once and self-loops are removed. If ``t ≥ m / n`` (``m`` undirected
edges) no edge is removed ("we stop at that number"). The output ``edge_index`` is
symmetric (both directions of each kept edge), coalesced (sorted by source, then target) and has no
self-loops, also when no edge is removed; all nodes and all node- and graph-level attributes are
kept. ``round`` is Python's (half to even). Each call draws from a fresh generator seeded with
``seed``, so the output depends only on the input edge *set* and ``seed``.

Edge-level attributes (``edge_attr``, ``edge_weight``, …) are **dropped**, with a warning: the
graph is treated as unweighted, and the two directions of an undirected input edge (or its
duplicates) may carry different values, so there is no single consistent value to keep.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform

__all__ = [
    "ConnectedSparsify",
    "NaiveSparsify",
    "spanning_forest",
    "undirected_edge_count",
]


# --------------------------------------------------------------------------- helpers
def _check_edge_index(edge_index: Tensor, num_nodes: int | None = None) -> None:
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise ValueError(
            f"edge_index must have shape [2, num_edges], got {tuple(edge_index.shape)}"
        )
    if edge_index.dtype != torch.long:
        raise ValueError(f"edge_index must be a long tensor, got {edge_index.dtype}")
    if edge_index.numel() and int(edge_index.min()) < 0:
        raise ValueError(f"edge_index has a negative node index ({int(edge_index.min())})")
    if num_nodes is not None and edge_index.numel() and int(edge_index.max()) >= num_nodes:
        raise ValueError(
            f"edge_index refers to node {int(edge_index.max())} but num_nodes is {num_nodes}; "
            "expected every index in [0, num_nodes)"
        )


def _undirected_edges(edge_index: Tensor, num_nodes: int) -> Tensor:
    """Unique undirected non-loop edges as ``[2, m]`` with ``row < col``, sorted by (row, col)."""
    row, col = edge_index[0], edge_index[1]
    lo, hi = torch.minimum(row, col), torch.maximum(row, col)
    keep = lo != hi
    key = torch.unique(lo[keep] * num_nodes + hi[keep])  # sorted
    return torch.stack([key // num_nodes, key % num_nodes])


def _symmetric(und: Tensor, num_nodes: int) -> Tensor:
    """Both directions of the undirected edges ``und`` ([2, m], row < col), coalesced: [2, 2m]."""
    row = torch.cat([und[0], und[1]])
    col = torch.cat([und[1], und[0]])
    perm = torch.argsort(row * num_nodes + col)
    return torch.stack([row[perm], col[perm]])


def _csr_lists(und: Tensor, num_nodes: int) -> tuple[list[int], list[int]]:
    """Symmetric CSR (``rowptr``, ``col``) of undirected edges, as Python lists for fast loops."""
    sym = _symmetric(und, num_nodes)
    counts = torch.bincount(sym[0], minlength=num_nodes)
    rowptr = torch.zeros(num_nodes + 1, dtype=torch.long)
    torch.cumsum(counts, 0, out=rowptr[1:])
    return rowptr.tolist(), sym[1].tolist()


def _component_labels(und: Tensor, num_nodes: int) -> np.ndarray:
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    u, v = und[0].numpy(), und[1].numpy()
    adj = coo_matrix((np.ones(u.shape[0], dtype=np.int8), (u, v)), shape=(num_nodes, num_nodes))
    _, labels = connected_components(adj, directed=False)
    return labels


def undirected_edge_count(edge_index: Tensor) -> int:
    """Number of undirected edges of the simple graph underlying ``edge_index``.

    Both directions of an edge and duplicate edges count once; self-loops are not counted. This is
    the ``|E|`` of ``d̄ = |E| / |V|`` in Tsitsulin et al. (2023), Table 2 (Cora: 5278).

    Args:
        edge_index: ``[2, E]`` long tensor.
    """
    _check_edge_index(edge_index)
    if edge_index.numel() == 0:
        return 0
    num_nodes = int(edge_index.max()) + 1
    return int(_undirected_edges(edge_index.cpu(), num_nodes).shape[1])


def spanning_forest(
    edge_index: Tensor, num_nodes: int, generator: torch.Generator | None = None
) -> Tensor:
    """Uniform random spanning forest by Wilson's algorithm (Wilson, STOC 1996).

    One uniform spanning tree is drawn independently for each connected component of the
    undirected simple graph underlying ``edge_index`` (directions, duplicates and self-loops are
    ignored). Each tree is rooted at the component's highest-degree node (ties: the lowest id);
    Wilson's loop-erased random walks give a uniform tree for any fixed root, and a high-degree
    root shortens the walks.

    Args:
        edge_index: ``[2, E]`` long tensor.
        num_nodes: number of nodes ``n`` (isolated nodes are their own component).
        generator: source of randomness on the CPU (default: torch's global generator).

    Returns:
        ``[2, n - c]`` long tensor (``c`` connected components, isolated nodes included) with
        each forest edge once, ``row < col``, sorted by (row, col).
    """
    _check_edge_index(edge_index, num_nodes)
    und = _undirected_edges(edge_index.cpu(), num_nodes)
    if und.shape[1] == 0:
        return und
    rowptr, col = _csr_lists(und, num_nodes)
    labels = _component_labels(und, num_nodes)
    deg = np.diff(np.asarray(rowptr))

    # Root of each component: its highest-degree node, lowest id among ties.
    order = np.lexsort((np.arange(num_nodes), -deg, labels))  # by label, then -deg, then id
    first = np.ones(num_nodes, dtype=bool)
    first[1:] = labels[order[1:]] != labels[order[:-1]]
    in_tree = [False] * num_nodes
    for r in order[first].tolist():
        in_tree[r] = True

    chunk = 256  # random numbers are drawn in chunks, doubling up to 65536
    rand: list[float] = []
    pos = 0
    nxt = [-1] * num_nodes
    src: list[int] = []
    dst: list[int] = []
    for start in range(num_nodes):
        # Loop-erased random walk from `start` until it hits the tree; overwriting `nxt[u]` on
        # every visit erases the loops.
        u = start
        while not in_tree[u]:
            if pos == len(rand):
                rand = torch.rand(chunk, generator=generator, dtype=torch.float64).tolist()
                pos = 0
                chunk = min(2 * chunk, 1 << 16)
            d = rowptr[u + 1] - rowptr[u]
            k = int(rand[pos] * d)
            pos += 1
            v = col[rowptr[u] + (k if k < d else d - 1)]
            nxt[u] = v
            u = v
        u = start
        while not in_tree[u]:
            in_tree[u] = True
            src.append(u)
            dst.append(nxt[u])
            u = nxt[u]

    forest = torch.tensor([src, dst], dtype=torch.long).reshape(2, -1)
    return _undirected_edges(forest, num_nodes)


# --------------------------------------------------------------------------- transforms
class _Sparsify(BaseTransform):
    """Shared logic: clean the graph, decide whether to keep it, rebuild the ``Data`` object."""

    #: smallest admissible ``avg_degree`` and whether it is itself admissible.
    _min_degree: float = 0.0
    _min_inclusive: bool = False

    def __init__(self, avg_degree: float, seed: int = 0) -> None:
        t = float(avg_degree)
        ok = math.isfinite(t) and (t >= self._min_degree if self._min_inclusive else t > 0)
        if not ok:
            expected = (
                f">= {self._min_degree:g}" if self._min_inclusive else f"> {self._min_degree:g}"
            )
            raise ValueError(
                f"{type(self).__name__}: avg_degree (undirected edges per node) must be a finite "
                f"number {expected}, got {avg_degree!r}"
            )
        self.avg_degree = t
        self.seed = int(seed)

    def _keep(self, und: Tensor, num_nodes: int, generator: torch.Generator) -> Tensor:
        raise NotImplementedError

    def forward(self, data: Data) -> Data:
        if not isinstance(data, Data):
            raise TypeError(
                f"{type(self).__name__} supports homogeneous torch_geometric.data.Data graphs, "
                f"got {type(data).__name__}"
            )
        if data.edge_index is None:
            raise ValueError(f"{type(self).__name__}: the graph has no edge_index")
        num_nodes = data.num_nodes
        if num_nodes is None:
            raise ValueError(f"{type(self).__name__}: cannot infer the number of nodes")
        edge_index = data.edge_index
        _check_edge_index(edge_index, num_nodes)
        und = _undirected_edges(edge_index.cpu(), num_nodes)
        m = und.shape[1]
        if num_nodes > 0 and self.avg_degree * num_nodes < m:
            generator = torch.Generator().manual_seed(self.seed)
            und = self._keep(und, num_nodes, generator)
        # else: t >= m / n, the original (cleaned) graph is kept.

        dropped = [
            key
            for key, value in data.items()
            if key != "edge_index" and data.is_edge_attr(key) and isinstance(value, Tensor)
        ]
        if dropped:
            warnings.warn(
                f"{type(self).__name__}: dropping edge attributes {sorted(dropped)}; the "
                "sparsified graph is unweighted",
                stacklevel=3,
            )
            for key in dropped:
                del data[key]
        data.edge_index = _symmetric(und, num_nodes).to(edge_index.device)
        data.num_nodes = num_nodes  # keep isolated trailing nodes when there is no ``x``
        return data

    def __repr__(self) -> str:
        return f"{type(self).__name__}(avg_degree={self.avg_degree:g}, seed={self.seed})"


class NaiveSparsify(_Sparsify):
    """Keep a uniform random subset of ``round(n·t)`` undirected edges (Tsitsulin et al., 2023,
    https://arxiv.org/abs/2305.16562, §4.2, "naïve" corruption).

    The output is symmetric, coalesced and loop-free; all nodes are kept, edge attributes are
    dropped (see the module docstring). If ``t ≥ m / n`` the (cleaned) input graph is returned.
    The result depends only on the edge *set* and ``seed``: the same seed gives the same edges.

    Args:
        avg_degree: target undirected edges per node ``t`` (``> 0``).
        seed: seed of the edge sampling (default: ``0``).
    """

    def _keep(self, und: Tensor, num_nodes: int, generator: torch.Generator) -> Tensor:
        k = min(round(num_nodes * self.avg_degree), und.shape[1])
        idx = torch.randperm(und.shape[1], generator=generator)[:k]
        return und[:, torch.sort(idx).values]


class ConnectedSparsify(_Sparsify):
    """Component-preserving sparsification (Tsitsulin et al., 2023,
    https://arxiv.org/abs/2305.16562, §4.2, "connected" corruption).

    Draws a uniform random spanning forest (:func:`spanning_forest`; ``n - c`` edges for ``c``
    connected components, isolated nodes included), then adds ``round(n·(t - 1))`` edges drawn
    uniformly from the remaining ones, so the result has ``n - c + round(n·(t - 1))`` undirected
    edges (``round(n·t) - 1`` for a connected graph; fewer than :class:`NaiveSparsify` keeps when
    the input has many components, e.g. CiteSeer) and every connected component of the input
    stays connected. If ``t ≥ m / n`` the (cleaned) input graph is returned.

    Args:
        avg_degree: target undirected edges per node ``t`` (``>= 1``: the spanning forest alone
            already has about one edge per node).
        seed: seed of the forest and of the extra edges (default: ``0``).
    """

    _min_degree = 1.0
    _min_inclusive = True

    def _keep(self, und: Tensor, num_nodes: int, generator: torch.Generator) -> Tensor:
        forest = spanning_forest(und, num_nodes, generator)
        key = und[0] * num_nodes + und[1]
        rest = und[:, ~torch.isin(key, forest[0] * num_nodes + forest[1])]
        k = min(round(num_nodes * (self.avg_degree - 1.0)), rest.shape[1])
        idx = torch.randperm(rest.shape[1], generator=generator)[:k]
        kept = torch.cat([forest, rest[:, idx]], dim=1)
        return _undirected_edges(kept, num_nodes)
