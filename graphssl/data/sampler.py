"""Neighbour sampling for PyG's ``NeighborLoader`` without pyg-lib or torch-sparse.

PyG's :class:`~torch_geometric.loader.NeighborLoader` (GraphSAGE-style sampling, Hamilton et al.,
NeurIPS 2017, https://arxiv.org/abs/1706.02216) delegates the sampling step to pyg-lib or
torch-sparse and raises ``ImportError`` when neither is installed (design.md §3, §6).
:class:`TorchNeighborSampler` replaces only that step, the homogeneous ``_sample``, with a
vectorised pure-PyTorch version, so the real loader keeps its ``n_id``/``batch_size``/``e_id``
semantics. :func:`make_neighbor_loader` picks PyG's compiled sampler when one is importable and
this one otherwise.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Sequence
from typing import Any, Literal

import torch
import torch_geometric.typing
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.loader import NeighborLoader
from torch_geometric.sampler import NeighborSampler, SamplerOutput
from torch_geometric.sampler.base import SubgraphType

__all__ = ["TorchNeighborSampler", "make_neighbor_loader", "validate_num_neighbors"]


def validate_num_neighbors(num_neighbors: Any) -> list[int]:
    """Check a per-hop fanout list and return it as a list of Python ints.

    Args:
        num_neighbors: a non-empty sequence of ints ``>= -1`` (``-1``: all neighbours of the
            hop, ``0``: none). Hydra ``ListConfig`` and numpy integers are accepted.

    Raises:
        TypeError: for a non-sequence (e.g. an int or a dict) or a non-integer entry.
        ValueError: for an empty sequence or an entry below ``-1``.
    """
    if isinstance(num_neighbors, str | bytes | dict | set) or not hasattr(
        num_neighbors, "__iter__"
    ):
        raise TypeError(
            f"num_neighbors must be a list of ints, one fanout per hop (e.g. [10, 10] or "
            f"[-1, -1]), got {type(num_neighbors).__name__} {num_neighbors!r}"
        )
    values = list(num_neighbors)
    if not values:
        raise ValueError(
            "num_neighbors must hold at least one hop (e.g. [10, 10] or [-1, -1]), got []"
        )
    out: list[int] = []
    for hop, value in enumerate(values):
        if isinstance(value, bool):
            raise TypeError(f"num_neighbors[{hop}] must be an int, got bool {value!r}")
        try:
            k = operator.index(value)
        except TypeError:
            raise TypeError(
                f"num_neighbors[{hop}] must be an int, got {type(value).__name__} {value!r} "
                f"(in num_neighbors={values!r})"
            ) from None
        if k < -1:
            raise ValueError(
                f"num_neighbors[{hop}] must be >= -1 (-1 = all neighbours), got {k} "
                f"(in num_neighbors={values!r})"
            )
        out.append(int(k))
    return out


class TorchNeighborSampler(NeighborSampler):
    """PyG ``NeighborSampler`` whose homogeneous sampling step is plain PyTorch.

    Per hop, each node of the frontier (hop 1: the seeds; hop ``i``: the nodes first reached at
    hop ``i - 1``) keeps ``min(k, in-degree)`` of its in-neighbours, drawn uniformly without
    replacement, or all of them when ``k == -1``. A node reached again is not expanded again.
    The output follows PyG's contract: ``node`` holds global ids with the seeds first, ``row``
    (source) and ``col`` (target) are local indices into ``node``, and ``edge`` indexes the
    CSC-sorted edges (``self.perm`` maps them back), so edge attributes such as
    ``edge_weight`` follow the sampled edges.

    Only directional (and bidirectional) homogeneous sampling is supported; heterogeneous,
    induced, disjoint, temporal, weighted and with-replacement sampling need pyg-lib.

    Args:
        data: the homogeneous graph to sample from.
        num_neighbors: fanout per hop (``-1``: all neighbours).
        seed: seed of the sampler's own ``torch.Generator`` (default: ``0``).
        subgraph_type: ``"directional"`` or ``"bidirectional"`` (default: ``"directional"``).
        is_sorted: whether ``edge_index`` is already sorted by target (default: ``False``).
        share_memory: move the CSC tensors to shared memory for worker processes
            (default: ``False``).
    """

    def __init__(
        self,
        data: Data,
        num_neighbors: Sequence[int],
        *,
        seed: int = 0,
        subgraph_type: SubgraphType | Literal["directional", "bidirectional"] = "directional",
        is_sorted: bool = False,
        share_memory: bool = False,
    ) -> None:
        if not isinstance(data, Data):
            raise TypeError(
                f"{type(self).__name__} samples homogeneous graphs (torch_geometric.data.Data), "
                f"got {type(data).__name__}; heterogeneous or remote graphs need pyg-lib"
            )
        fanouts = validate_num_neighbors(num_neighbors)
        subgraph_type = SubgraphType(subgraph_type)
        if subgraph_type == SubgraphType.induced:
            raise ValueError(
                f"{type(self).__name__} does not support subgraph_type='induced'; use "
                f"'directional' or 'bidirectional', or install pyg-lib / torch-sparse"
            )
        with warnings.catch_warnings():
            # PyG warns that sampling without pyg-lib is deprecated: this class is the
            # replacement it warns about, so the warning does not apply.
            warnings.filterwarnings("ignore", message=".*without a 'pyg-lib' installation.*")
            super().__init__(
                data,
                fanouts,
                subgraph_type=subgraph_type,
                is_sorted=is_sorted,
                share_memory=share_memory,
            )
        self.seed = int(seed)
        self.generator = torch.Generator(device="cpu").manual_seed(self.seed)
        self._worker_id: int | None = None  # DataLoader worker the generator was seeded for
        # Global -> local id map reused across batches; only touched entries are reset.
        self._local = torch.full((int(self.num_nodes),), -1, dtype=torch.long)

    def reset_generator(self) -> None:
        """Restart the random stream from ``seed`` (the next batches repeat the first ones)."""
        self.generator.manual_seed(self.seed)

    def _sample(  # type: ignore[override]
        self,
        seed: Tensor | dict[Any, Tensor],
        seed_time: Tensor | dict[Any, Tensor] | None = None,
        **kwargs: Any,
    ) -> SamplerOutput:
        if isinstance(seed, dict):
            raise NotImplementedError(
                f"{type(self).__name__} samples homogeneous graphs only; heterogeneous "
                f"sampling needs pyg-lib or torch-sparse"
            )
        if seed_time is not None:
            raise NotImplementedError(
                f"{type(self).__name__} does not support temporal sampling (seed_time given); "
                f"install pyg-lib"
            )
        worker = torch.utils.data.get_worker_info()
        if worker is not None and worker.id != self._worker_id:
            # Forked workers inherit the same generator state: give each its own stream.
            self._worker_id = worker.id
            self.generator.manual_seed(self.seed * 1_000_003 + worker.id + 1)
        fanouts = [int(k) for k in self.num_neighbors.get_mapped_values()]
        seed = seed.to(device="cpu", dtype=torch.long)
        local = self._local
        touched: list[Tensor] = []
        try:
            out = self._sample_homogeneous(seed, fanouts, local, touched)
        finally:
            for nodes in touched:
                local[nodes] = -1
        if self.sample_direction == "backward":
            out.row, out.col = out.col, out.row
        return out

    def _sample_homogeneous(
        self, seed: Tensor, fanouts: list[int], local: Tensor, touched: list[Tensor]
    ) -> SamplerOutput:
        colptr = self.colptr.to(torch.long)
        row = self.row.to(torch.long)
        num_seeds = seed.numel()

        # Seeds come first, verbatim (NeighborLoader slices the first `batch_size` rows). A seed
        # given twice is expanded once, at its first position.
        uniq, inverse = torch.unique(seed, return_inverse=True)
        first = torch.full((uniq.numel(),), num_seeds, dtype=torch.long)
        first.scatter_reduce_(0, inverse, torch.arange(num_seeds), reduce="amin")
        local[uniq] = first
        touched.append(uniq)
        frontier_local = first.sort().values
        frontier = seed[frontier_local]

        nodes = [seed]
        rows: list[Tensor] = []
        cols: list[Tensor] = []
        edges: list[Tensor] = []
        num_sampled_nodes = [num_seeds]
        num_sampled_edges: list[int] = []
        num_total = num_seeds

        for k in fanouts:
            eid, target = self._sample_hop(frontier, frontier_local, k, colptr)
            src = row[eid]
            src_local = local[src]
            new = src_local < 0
            if bool(new.any()):
                new_pos = new.nonzero().view(-1)
                cand, cand_inv = torch.unique(src[new_pos], return_inverse=True)
                first_pos = torch.full((cand.numel(),), eid.numel(), dtype=torch.long)
                first_pos.scatter_reduce_(0, cand_inv, new_pos, reduce="amin")
                order = first_pos.argsort()  # new nodes in order of first appearance
                new_nodes = cand[order]
                new_local = torch.arange(num_total, num_total + new_nodes.numel())
                local[new_nodes] = new_local
                touched.append(new_nodes)
                src_local = local[src]
            else:
                new_nodes = seed.new_empty(0)
                new_local = seed.new_empty(0)
            rows.append(src_local)
            cols.append(target)
            edges.append(eid)
            nodes.append(new_nodes)
            num_sampled_nodes.append(new_nodes.numel())
            num_sampled_edges.append(eid.numel())
            num_total += new_nodes.numel()
            frontier, frontier_local = new_nodes, new_local

        empty = seed.new_empty(0)
        return SamplerOutput(
            node=torch.cat(nodes),
            row=torch.cat(rows) if rows else empty,
            col=torch.cat(cols) if cols else empty,
            edge=torch.cat(edges) if edges else empty,
            batch=None,
            num_sampled_nodes=num_sampled_nodes,
            num_sampled_edges=num_sampled_edges,
        )

    def _sample_hop(
        self, frontier: Tensor, frontier_local: Tensor, k: int, colptr: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Sampled CSC edge ids of one hop and the local id of each edge's target."""
        start = colptr[frontier]
        deg = colptr[frontier + 1] - start
        if k == 0 or frontier.numel() == 0:
            empty = frontier.new_empty(0)
            return empty, empty
        total = int(deg.sum())
        segment = torch.repeat_interleave(torch.arange(frontier.numel()), deg)
        seg_start = deg.cumsum(0) - deg  # offset of each frontier node in the flat edge list
        offset = torch.arange(total) - seg_start[segment]
        eid = start[segment] + offset
        if k > 0 and bool((deg > k).any()):
            # Uniform without replacement: a random permutation within every segment (sort by
            # segment + U[0, 1)), then keep its first k positions; the kept edges stay in CSC
            # order so the output does not depend on the permutation beyond the chosen set.
            # U[0, 0.5) keeps every key strictly below the next segment's after rounding.
            key = segment.to(torch.float64) + 0.5 * torch.rand(
                total, generator=self.generator, dtype=torch.float64
            )
            perm = key.argsort()
            keep = torch.zeros(total, dtype=torch.bool)
            keep[perm[offset < k]] = True  # offset is also the rank within the sorted segment
            eid, segment = eid[keep], segment[keep]
        return eid, frontier_local[segment]


def make_neighbor_loader(
    data: Data,
    num_neighbors: Sequence[int],
    batch_size: int,
    input_nodes: Tensor | None = None,
    shuffle: bool = False,
    seed: int = 0,
) -> NeighborLoader:
    """A PyG ``NeighborLoader`` over ``data`` with a sampler that works on this install.

    PyG's own (compiled) sampler is used when ``torch_geometric.typing.WITH_PYG_LIB`` or
    ``WITH_TORCH_SPARSE``; otherwise :class:`TorchNeighborSampler`. Each batch holds
    ``n_id`` (global ids, seeds first), ``batch_size`` (number of seeds) and ``e_id``.

    Args:
        data: homogeneous graph (``x``, ``edge_index``, optional edge attributes).
        num_neighbors: fanout per hop, e.g. ``[10, 10]``; ``-1`` takes all neighbours.
        batch_size: seeds per batch.
        input_nodes: seed nodes (index or boolean mask); ``None``: every node
            (default: ``None``).
        shuffle: shuffle the seeds every epoch (default: ``False``).
        seed: seeds the shuffling and graphssl's sampler; PyG's compiled samplers draw from
            torch's global RNG instead (default: ``0``).

    Raises:
        TypeError/ValueError: for a malformed ``num_neighbors``, a non-positive
            ``batch_size`` or a non-``Data`` graph.
    """
    fanouts = validate_num_neighbors(num_neighbors)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    if not isinstance(data, Data):
        raise TypeError(
            f"make_neighbor_loader needs a homogeneous torch_geometric.data.Data, got "
            f"{type(data).__name__}"
        )
    if data.edge_index is None:
        raise ValueError("make_neighbor_loader needs a graph with edge_index, got none")
    generator = torch.Generator().manual_seed(int(seed))
    kwargs: dict[str, Any] = {
        "input_nodes": input_nodes,
        "batch_size": batch_size,
        "shuffle": shuffle,
        "generator": generator,
    }
    if torch_geometric.typing.WITH_PYG_LIB or torch_geometric.typing.WITH_TORCH_SPARSE:
        return NeighborLoader(data, num_neighbors=fanouts, **kwargs)
    sampler = TorchNeighborSampler(data, fanouts, seed=seed)
    return NeighborLoader(data, num_neighbors=fanouts, neighbor_sampler=sampler, **kwargs)
