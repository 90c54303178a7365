"""The graph of layer-wise full-graph inference, and what may run row by row.

Layer-wise inference (GraphSAGE, Hamilton et al., NeurIPS 2017, https://arxiv.org/abs/1706.02216,
appendix; PyG's ``BasicGNN.inference``) computes an encoder one layer at a time over all nodes:
layer ``l`` of a chunk of target nodes reads the layer ``l - 1`` rows of their in-neighbours
from one ``n x d`` tensor. Each edge is read once per layer, so the cost is that of the
full-batch forward, without the receptive-field growth of ``L``-hop neighbour sampling, and only
one chunk's edges are ever expanded at once.

:class:`InferenceGraph` holds the graph once in CSR form over the targets (the in-edges of node
``i`` are ``col[crow[i]:crow[i + 1]]``, duplicates kept), so a chunk of consecutive targets is a
slice of its arrays: a ``torch.sparse_csr_tensor`` block for sum/mean aggregation by
sparse-matrix product, or the chunk's edge list for convolutions that weigh each edge.
:func:`rowwise_reason` says why a module's output row would depend on other rows (a graph-wide
normalisation), which layer-wise inference cannot reproduce chunk by chunk.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

__all__ = ["InferenceGraph", "rowwise_reason"]

_INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class InferenceGraph:
    """A graph in CSR form over its target nodes, for chunked layer-wise inference.

    Attributes:
        crow: ``(n + 1,)`` offsets: the in-edges of node ``i`` are positions
            ``crow[i]:crow[i + 1]``.
        col: ``(E,)`` source node of each in-edge, grouped by target.
        weight: ``(E,)`` edge weights in the same order, or ``None`` for unweighted edges.
        num_nodes: ``n``.
    """

    crow: Tensor
    col: Tensor
    weight: Tensor | None
    num_nodes: int

    @classmethod
    def from_edge_index(
        cls, edge_index: Tensor, num_nodes: int, edge_weight: Tensor | None = None
    ) -> InferenceGraph:
        """Group the edges ``edge_index[0] -> edge_index[1]`` by target, keeping duplicates
        (a mean then counts an edge given twice twice, as PyG's scatter does) and the given
        order of each target's edges (a stable sort).

        Indices are stored as ``int32`` when the graph allows it (half the memory of ``int64``).

        Raises:
            ValueError: for an ``edge_index`` that is not ``(2, E)``, ids outside
                ``[0, num_nodes)``, or weights that are not one per edge.
        """
        if edge_index.dim() != 2 or edge_index.size(0) != 2:
            raise ValueError(f"edge_index must have shape (2, E), got {tuple(edge_index.shape)}")
        num_edges = edge_index.size(1)
        if num_edges and (int(edge_index.min()) < 0 or int(edge_index.max()) >= num_nodes):
            raise ValueError(
                f"edge_index holds node ids in [{int(edge_index.min())}, "
                f"{int(edge_index.max())}], expected ids in [0, {num_nodes}) for a graph of "
                f"{num_nodes} nodes"
            )
        if edge_weight is not None and edge_weight.numel() != num_edges:
            raise ValueError(
                f"edge_weight has {edge_weight.numel()} entries for {num_edges} edges; "
                f"expected one weight per edge"
            )
        small = num_edges <= _INT32_MAX and num_nodes <= _INT32_MAX
        dtype = torch.int32 if small else torch.long
        dst = edge_index[1]
        perm = torch.argsort(dst, stable=True)
        crow = torch.zeros(num_nodes + 1, dtype=torch.long, device=edge_index.device)
        torch.cumsum(torch.bincount(dst, minlength=num_nodes), 0, out=crow[1:])
        col = edge_index[0].index_select(0, perm).to(dtype)
        weight = None if edge_weight is None else edge_weight.reshape(-1).index_select(0, perm)
        return cls(crow.to(dtype), col, weight, int(num_nodes))

    @property
    def num_edges(self) -> int:
        """Number of (directed) edges ``E``."""
        return int(self.col.numel())

    def max_in_degree(self) -> int:
        """The largest number of in-edges of one node (``0`` for a graph without edges)."""
        if self.num_nodes == 0:
            return 0
        return int((self.crow[1:] - self.crow[:-1]).max())

    def chunks(
        self,
        max_nodes: int,
        max_edges: int | None = None,
        first: int = 0,
        last: int | None = None,
    ) -> list[tuple[int, int]]:
        """Consecutive target ranges ``[start, end)`` covering every node of ``[first, last)``
        (default: all) once, each of at most ``max_nodes`` nodes and ``max_edges`` in-edges
        (``None``: no edge bound). A node with more than ``max_edges`` in-edges forms a chunk
        of its own.

        Raises:
            ValueError: for a ``max_nodes`` or ``max_edges`` below 1.
        """
        if max_nodes < 1 or (max_edges is not None and max_edges < 1):
            raise ValueError(
                f"chunks need max_nodes >= 1 and max_edges >= 1 (or None), got {max_nodes} "
                f"and {max_edges}"
            )
        n = self.num_nodes if last is None else last
        if max_edges is None or max_edges >= self.num_edges:
            return [(s, min(s + max_nodes, n)) for s in range(first, n, max_nodes)]
        crow = self.crow.to(device="cpu", dtype=torch.long)
        out: list[tuple[int, int]] = []
        start = first
        while start < n:
            limit = int(crow[start]) + max_edges
            # the last end whose crow is within the edge bound
            by_edges = int(torch.searchsorted(crow, limit, right=True)) - 1
            end = max(start + 1, min(start + max_nodes, n, by_edges))
            out.append((start, end))
            start = end
        return out

    def _span(self, start: int, end: int) -> tuple[int, int]:
        return int(self.crow[start]), int(self.crow[end])

    def block(self, start: int, end: int, dtype: torch.dtype = torch.float32) -> Tensor:
        """The in-edges of targets ``[start, end)`` as an ``(end - start) x n`` sparse CSR
        tensor (rows: targets, columns: sources), valued with the edge weights (ones when the
        graph has none), in ``dtype``. Its index arrays are slices of the graph's."""
        a, b = self._span(start, end)
        crow = self.crow[start : end + 1] - a
        col = self.col[a:b]
        if self.weight is None:
            values = torch.ones(b - a, dtype=dtype, device=col.device)
        else:
            values = self.weight[a:b].to(dtype)
        return torch.sparse_csr_tensor(
            crow, col, values, size=(end - start, self.num_nodes), check_invariants=False
        )

    def edges(self, start: int, end: int) -> tuple[Tensor, Tensor, Tensor | None]:
        """The in-edges of targets ``[start, end)``: ``(source, target - start, weight)``, int64
        ids (the source global, the target local to the chunk) and the weights or ``None``."""
        a, b = self._span(start, end)
        crow = self.crow[start : end + 1].to(torch.long)
        counts = crow[1:] - crow[:-1]
        local = torch.arange(end - start, device=crow.device)
        target = torch.repeat_interleave(local, counts, output_size=b - a)
        source = self.col[a:b].to(torch.long)
        weight = None if self.weight is None else self.weight[a:b]
        return source, target, weight


#: graph-level normalisations of PyG: their output row depends on every row of the graph
_GRAPH_NORMS = ("GraphNorm", "InstanceNorm", "PairNorm", "MeanSubtractionNorm", "GraphSizeNorm")


def rowwise_reason(module: nn.Module) -> str | None:
    """Why an eval-mode ``module`` (with its submodules) does not map each row on its own, or
    ``None`` when it does.

    Batch norm with running statistics (eval mode) and layer norm over each row's features are
    row-wise; batch norm without running statistics, PyG's ``LayerNorm`` in ``"graph"`` mode
    and the graph-level normalisations (``GraphNorm``, ``InstanceNorm``, ``PairNorm``, ...)
    normalise over all rows of the graph, which one chunk of rows does not see.
    """
    for name, sub in module.named_modules():
        where = f"{type(sub).__name__}" + (f" ({name})" if name else "")
        if isinstance(sub, nn.modules.batchnorm._BatchNorm) and sub.running_mean is None:
            return f"{where} has no running statistics (it normalises over the graph's rows)"
        if isinstance(sub, nn.modules.instancenorm._InstanceNorm):
            return f"{where} normalises over the graph's rows"
        if type(sub).__module__.startswith("torch_geometric.nn.norm"):
            cls = type(sub).__name__
            if cls == "LayerNorm" and getattr(sub, "mode", "graph") != "node":
                return f"{where} in mode {getattr(sub, 'mode', '?')!r} normalises over the graph"
            if cls in _GRAPH_NORMS:
                return f"{where} normalises over the graph's rows"
    return None
