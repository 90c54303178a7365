"""Neighbour sampling for PyG's ``NeighborLoader`` without pyg-lib or torch-sparse.

PyG's :class:`~torch_geometric.loader.NeighborLoader` (GraphSAGE-style sampling, Hamilton et al.,
NeurIPS 2017, https://arxiv.org/abs/1706.02216) delegates the sampling step to pyg-lib or
torch-sparse and raises ``ImportError`` when neither is installed.
:class:`TorchNeighborSampler` replaces only that step, the homogeneous ``_sample``, with a
vectorised pure-PyTorch version, so the real loader keeps its ``n_id``/``batch_size``/``e_id``
semantics. :func:`make_neighbor_loader` picks PyG's compiled sampler when one is importable and
this one otherwise.

Per hop the work is proportional to the edges *kept*, not to the frontier's degrees: a node with
at most ``k`` in-neighbours takes its CSC range whole, the others draw ``k`` distinct offsets with
Robert Floyd's algorithm vectorised over the frontier (``k`` tensor steps, no sort). New nodes are
found through a global node -> first-position map kept across batches (one ``scatter_reduce``
with ``amin`` and one gather, no ``unique``), so the whole batch costs a few passes over its
sampled edges; on an ogbn-products-size graph it samples faster than torch-sparse's compiled
``neighbor_sample`` (``benchmarks/bench_sampler.py``).

The sampler reads the graph in CSC form (:class:`SamplerIndex`: ``colptr``, ``row`` and the
edge permutation ``perm``), about 0.94 GiB at ogbn-products size. :func:`build_sampler_index`
builds it once; a sampler given that index (``index=``) uses it as it is instead of converting
the graph again, so the loaders of one graph, and the processes of a multi-process fit (the
index in shared memory), all read one copy.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Sequence
from typing import Any, Literal, NamedTuple

import torch
import torch_geometric.typing
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.loader import NeighborLoader
from torch_geometric.sampler import NeighborSampler, SamplerOutput
from torch_geometric.sampler.base import SubgraphType
from torch_geometric.sampler.utils import to_csc

__all__ = [
    "SamplerIndex",
    "TorchNeighborSampler",
    "build_sampler_index",
    "check_sampler_index",
    "epoch_seed",
    "make_neighbor_loader",
    "set_loader_epoch",
    "uses_torch_sampler",
    "validate_num_neighbors",
]

#: Value of the global -> local map for a node not (yet) in the batch: larger than any local id.
#: The map holds int32 positions: half the memory traffic of int64 on its random accesses.
_UNSEEN: int = torch.iinfo(torch.int32).max


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


class SamplerIndex(NamedTuple):
    """A graph's edges in the CSC form :class:`TorchNeighborSampler` samples from.

    Attributes:
        colptr: ``(num_nodes + 1,)`` offsets: the in-edges of node ``v`` are CSC edges
            ``colptr[v]:colptr[v + 1]``.
        row: ``(num_edges,)`` source node of each CSC edge.
        perm: ``(num_edges,)`` position in ``edge_index`` of each CSC edge (edge attributes
            follow the sampled edges through it), ``None`` when ``edge_index`` was already
            sorted by target.
    """

    colptr: Tensor
    row: Tensor
    perm: Tensor | None


def build_sampler_index(
    data: Data, *, is_sorted: bool = False, share_memory: bool = False
) -> SamplerIndex:
    """The CSC index of ``data`` that :class:`TorchNeighborSampler` samples from.

    The conversion is PyG's own (``torch_geometric.sampler.utils.to_csc``, what
    ``NeighborSampler`` runs on construction), so a sampler given this index draws the batches
    it would draw after converting ``data`` itself.

    Args:
        data: homogeneous graph with ``edge_index``.
        is_sorted: whether ``edge_index`` is already sorted by target (default: ``False``).
        share_memory: put the tensors in shared memory, so that processes the index is handed
            to (``torch.multiprocessing``) map the same pages instead of copying them
            (default: ``False``).

    Raises:
        TypeError: for a graph that is not a ``torch_geometric.data.Data``.
        ValueError: for a graph without ``edge_index``.
    """
    _check_graph(data, "build_sampler_index")
    colptr, row, perm = to_csc(data, device="cpu", share_memory=share_memory, is_sorted=is_sorted)
    return SamplerIndex(colptr, row, perm)


def check_sampler_index(index: SamplerIndex, data: Data) -> None:
    """Check that ``index`` has the shape of the CSC index of ``data``.

    Only sizes are compared (one node offset more than ``data`` has nodes, one source per edge,
    the last offset equal to the edge count), not every edge: an index must come from
    :func:`build_sampler_index` on this graph, or on a copy with the same ``edge_index``.

    Raises:
        TypeError: ``index`` is not a :class:`SamplerIndex` of tensors.
        ValueError: its sizes do not match ``data``'s nodes and edges.
    """
    if not isinstance(index, SamplerIndex):
        raise TypeError(
            f"a sampler index must be a SamplerIndex (from build_sampler_index), got "
            f"{type(index).__name__}"
        )
    colptr, row, perm = index
    if not (
        isinstance(colptr, Tensor)
        and isinstance(row, Tensor)
        and (perm is None or isinstance(perm, Tensor))
    ):
        raise TypeError(
            f"a SamplerIndex holds tensors colptr, row and perm (or perm=None), got "
            f"{type(colptr).__name__}, {type(row).__name__} and {type(perm).__name__}"
        )
    num_nodes = int(data.num_nodes)
    num_edges = int(data.num_edges)
    last = int(colptr[-1]) if colptr.dim() == 1 and colptr.numel() else None
    if colptr.dim() != 1 or colptr.numel() != num_nodes + 1:
        raise ValueError(
            f"the sampler index does not fit the graph: its colptr has shape "
            f"{tuple(colptr.shape)}, expected ({num_nodes + 1},) for a graph of {num_nodes} "
            f"nodes; build the index from this graph with build_sampler_index(data)"
        )
    if row.dim() != 1 or row.numel() != num_edges or last != num_edges:
        raise ValueError(
            f"the sampler index does not fit the graph: it holds {row.numel()} source(s) and "
            f"colptr[-1]={last}, expected both equal to the graph's {num_edges} edges; build "
            f"the index from this graph with build_sampler_index(data)"
        )
    if perm is not None and (perm.dim() != 1 or perm.numel() != num_edges):
        raise ValueError(
            f"the sampler index does not fit the graph: its perm has shape "
            f"{tuple(perm.shape)}, expected ({num_edges},), one position per edge; build the "
            f"index from this graph with build_sampler_index(data)"
        )
    if colptr.is_floating_point() or row.is_floating_point():
        raise ValueError(
            f"the sampler index must hold integer tensors, got colptr {colptr.dtype} and row "
            f"{row.dtype}"
        )


def uses_torch_sampler() -> bool:
    """Whether :func:`make_neighbor_loader` samples with :class:`TorchNeighborSampler` (neither
    pyg-lib nor torch-sparse importable), the sampler a :class:`SamplerIndex` is for."""
    return not (torch_geometric.typing.WITH_PYG_LIB or torch_geometric.typing.WITH_TORCH_SPARSE)


class TorchNeighborSampler(NeighborSampler):
    """PyG ``NeighborSampler`` whose homogeneous sampling step is plain PyTorch.

    Per hop, each node of the frontier (hop 1: the seeds; hop ``i``: the nodes first reached at
    hop ``i - 1``) keeps ``min(k, in-degree)`` of its in-neighbours, drawn uniformly without
    replacement, or all of them when ``k == -1``. A node reached again is not expanded again.
    The same ``seed`` gives the same batches (the sampler draws from its own generator).
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
        index: the CSC index of ``data`` (:func:`build_sampler_index`), used as it is (its
            tensors, not copies) instead of converting ``data``; ``None``: convert ``data``
            (default: ``None``).

    Raises:
        TypeError/ValueError: for a non-``Data`` graph, a malformed ``num_neighbors``,
            ``subgraph_type='induced'`` or an ``index`` whose sizes do not fit ``data``.
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
        index: SamplerIndex | None = None,
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
        if index is not None:
            check_sampler_index(index, data)
        # With an index, PyG's constructor runs on an edgeless stand-in of the graph (its CSC
        # conversion is then an empty one) and the index takes the converted tensors' place.
        # Nothing else it sets depends on the edges: edge times and weights stay None, as this
        # sampler passes neither time_attr nor weight_attr.
        source = data if index is None else _edgeless(data)
        with warnings.catch_warnings():
            # PyG warns that sampling without pyg-lib is deprecated: this class is the
            # replacement it warns about, so the warning does not apply.
            warnings.filterwarnings("ignore", message=".*without a 'pyg-lib' installation.*")
            super().__init__(
                source,
                fanouts,
                subgraph_type=subgraph_type,
                is_sorted=is_sorted or index is not None,
                share_memory=share_memory and index is None,
            )
        if index is not None:
            if share_memory:
                for t in index:
                    if t is not None:
                        t.share_memory_()
            self.colptr, self.row, self.perm = index.colptr, index.row, index.perm
        self.seed = int(seed)
        self._stream_seed = self.seed  # seed of the current epoch's stream (see set_epoch)
        self.generator = torch.Generator(device="cpu").manual_seed(self.seed)
        self._worker_id: int | None = None  # DataLoader worker the generator was seeded for
        # Global node -> first-position map reused across batches: _UNSEEN everywhere between
        # batches; a batch resets only the entries it touched.
        self._local = torch.full((int(self.num_nodes),), _UNSEEN, dtype=torch.int32)
        # Buffers kept across batches (allocating and faulting in fresh pages per batch costs
        # about as much as filling them): 0, 1, 2, ... and the code -> local id table.
        self._iota = torch.arange(0)
        self._iota32 = torch.arange(0, dtype=torch.int32)
        self._codes = torch.empty(0, dtype=torch.long)

    def reset_generator(self) -> None:
        """Restart the random stream from ``seed`` (the next batches repeat the first ones)."""
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        """Restart the random stream at the one of ``epoch`` (epoch 0: ``seed`` itself)."""
        self._stream_seed = epoch_seed(self.seed, epoch)
        self._worker_id = None
        self.generator.manual_seed(self._stream_seed)

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
            self.generator.manual_seed(self._stream_seed * 1_000_003 + worker.id + 1)
        fanouts = [int(k) for k in self.num_neighbors.get_mapped_values()]
        seed = seed.to(device="cpu", dtype=torch.long)
        local = self._local
        touched: list[Tensor] = []
        try:
            out = self._sample_homogeneous(seed, fanouts, local, touched)
        finally:
            for nodes in touched:
                local.index_fill_(0, nodes, _UNSEEN)
        if self.sample_direction == "backward":
            out.row, out.col = out.col, out.row
        return out

    def _sample_homogeneous(
        self, seed: Tensor, fanouts: list[int], local: Tensor, touched: list[Tensor]
    ) -> SamplerOutput:
        colptr = self.colptr.to(torch.long)
        row = self.row.to(torch.long)
        num_seeds = seed.numel()

        # Deduplication goes through the global map instead of a sort. Every seed and every
        # sampled edge gets a position ("code"); within a batch a node's map entry is the code
        # where it first appeared (`amin` over _UNSEEN), and `code_to_local` turns codes into
        # local ids. Only the first occurrence of a node reads its own code back.
        #
        # Seeds come first, verbatim (NeighborLoader slices the first `batch_size` rows). A seed
        # given twice is expanded once, at its first position.
        positions = self._arange(0, num_seeds)
        local.scatter_reduce_(0, seed, self._positions(0, num_seeds), reduce="amin")
        first = local.index_select(0, seed) == self._positions(0, num_seeds)
        frontier = seed[first]
        frontier_local = positions[first]
        touched.append(frontier)
        codes = self._code_buffer(num_seeds)
        codes[:num_seeds] = positions  # a first seed's local id is its position
        num_codes = num_seeds

        nodes = [seed]
        rows: list[Tensor] = []
        cols: list[Tensor] = []
        edges: list[Tensor] = []
        num_sampled_nodes = [num_seeds]
        num_sampled_edges: list[int] = []
        num_total = num_seeds

        for k in fanouts:
            eid, target = self._sample_hop(frontier, frontier_local, k, colptr)
            src = row.index_select(0, eid)
            num_edges = src.numel()
            new_nodes = seed.new_empty(0)
            if num_edges:
                # Nodes seen before keep their (smaller) code; a new node takes the code of
                # its first occurrence, and new nodes are numbered num_total, num_total + 1, ...
                # in order of first appearance.
                base = num_codes
                pos = self._positions(base, base + num_edges)
                local.scatter_reduce_(0, src, pos, reduce="amin")
                code = local.index_select(0, src)
                is_first = code == pos
                new_nodes = src.masked_select(is_first)
                touched.append(new_nodes)
                num_codes = base + num_edges
                codes = self._code_buffer(num_codes, keep=base)
                hop_ids = codes[base:num_codes]  # read only at first occurrences
                torch.cumsum(is_first, 0, out=hop_ids)
                hop_ids.add_(num_total - 1)
                rows.append(codes[:num_codes].index_select(0, code))
                cols.append(target)
                edges.append(eid)
            nodes.append(new_nodes)
            num_sampled_nodes.append(new_nodes.numel())
            num_sampled_edges.append(num_edges)
            frontier = new_nodes
            frontier_local = self._arange(num_total, num_total + new_nodes.numel())
            num_total += new_nodes.numel()

        return SamplerOutput(
            node=_concat(nodes),
            row=_concat(rows),
            col=_concat(cols),
            edge=_concat(edges),
            batch=None,
            num_sampled_nodes=num_sampled_nodes,
            num_sampled_edges=num_sampled_edges,
        )

    def _arange(self, start: int, end: int) -> Tensor:
        """``torch.arange(start, end)`` as a read-only view of a buffer kept across batches."""
        if end > self._iota.numel():
            self._iota = torch.arange(max(end, 2 * self._iota.numel()))
        return self._iota[start:end]

    def _positions(self, start: int, end: int) -> Tensor:
        """``_arange`` in the map's int32, for the positions (codes) of one batch."""
        if end > _UNSEEN:
            raise RuntimeError(
                f"a batch of {end} sampled nodes and edges exceeds the sampler's int32 positions "
                f"({_UNSEEN}); use a smaller batch_size or fanout"
            )
        if end > self._iota32.numel():
            size = min(max(end, 2 * self._iota32.numel()), _UNSEEN)
            self._iota32 = torch.arange(size, dtype=torch.int32)
        return self._iota32[start:end]

    def _code_buffer(self, size: int, keep: int = 0) -> Tensor:
        """The code -> local id table, at least ``size`` long, its first ``keep`` entries kept."""
        if size > self._codes.numel():
            grown = torch.empty(max(size, 2 * self._codes.numel()), dtype=torch.long)
            grown[:keep] = self._codes[:keep]
            self._codes = grown
        return self._codes

    def _sample_hop(
        self, frontier: Tensor, frontier_local: Tensor, k: int, colptr: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Sampled CSC edge ids of one hop and the local id of each edge's target.

        Every frontier node contributes ``min(k, deg)`` edges (all of them for ``k == -1``); only
        the kept edges are ever materialised. Nodes with more than ``k`` in-neighbours come first
        (``k`` draws each), then the nodes that keep all their edges; edges are grouped by node.
        """
        empty = frontier.new_empty(0)
        if k == 0 or frontier.numel() == 0:
            return empty, empty
        start = colptr.index_select(0, frontier)
        deg = colptr.index_select(0, frontier + 1) - start
        eids: list[Tensor] = []
        targets: list[Tensor] = []
        if k > 0:
            is_many = deg > k
            num_many = int(is_many.sum())
            if num_many:
                if num_many < frontier.numel():
                    many = is_many.nonzero().view(-1)
                    few = (~is_many).nonzero().view(-1)
                    m_start, m_deg = start.index_select(0, many), deg.index_select(0, many)
                    m_local = frontier_local.index_select(0, many)
                    start, deg = start.index_select(0, few), deg.index_select(0, few)
                    frontier_local = frontier_local.index_select(0, few)
                else:
                    m_start, m_deg, m_local = start, deg, frontier_local
                    deg = deg.new_empty(0)
                # k distinct offsets in [0, deg) per node, drawn uniformly.
                offsets = _floyd_sample(m_deg, k, self.generator)
                # node-major, so a node's k reads of `row` fall on the same cache lines
                eids.append(offsets.add_(m_start).t().reshape(-1))
                targets.append(m_local.repeat_interleave(k))
        if deg.numel():
            # Take-all layout: edge j of node i sits at ptr[i] + j and is CSC edge start[i] + j.
            total = int(deg.sum())
            segment = torch.repeat_interleave(deg, output_size=total)
            ptr = deg.cumsum(0) - deg
            eids.append(self._arange(0, total) + (start - ptr).index_select(0, segment))
            targets.append(frontier_local.index_select(0, segment))
        if len(eids) == 1:
            return eids[0], targets[0]
        return _concat(eids), _concat(targets)


def _edgeless(data: Data) -> Data:
    """A graph with ``data``'s node count and no edges."""
    return Data(edge_index=torch.empty(2, 0, dtype=torch.long), num_nodes=int(data.num_nodes))


def _concat(tensors: list[Tensor]) -> Tensor:
    """``torch.cat`` of 1-D int64 tensors, by copies into one ``empty`` tensor (several times
    faster than ``torch.cat`` on CPU for the large index tensors of a batch)."""
    out = torch.empty(sum(t.numel() for t in tensors), dtype=torch.long)
    offset = 0
    for t in tensors:
        out[offset : offset + t.numel()].copy_(t)
        offset += t.numel()
    return out


def _floyd_sample(deg: Tensor, k: int, generator: torch.Generator) -> Tensor:
    """``k`` distinct offsets in ``[0, deg[i])`` for every ``i``, uniform over the k-subsets.

    Robert Floyd's algorithm (Bentley & Floyd, "A sample of brilliance", CACM 30(9), 1987),
    run for all nodes at once: step ``i`` draws ``t`` uniformly from ``[0, j]`` with
    ``j = deg - k + i`` and keeps ``t``, or ``j`` itself when ``t`` was drawn before (``j`` never
    was: earlier draws are at most ``j - 1``). ``k`` vectorised steps, no sort, no rejection.

    Args:
        deg: ``(m,)`` degrees, each ``> k``.
        k: sample size per node, ``>= 1``.
        generator: the random stream.

    Returns:
        ``(k, m)`` offsets; column ``i`` holds node ``i``'s ``k`` distinct offsets.
    """
    upper = (deg - k).view(1, -1) + torch.arange(k).view(-1, 1)  # j per step and node
    u = torch.rand(k, deg.numel(), generator=generator, dtype=torch.float64)
    out = (u * (upper + 1)).long()
    torch.minimum(out, upper, out=out)  # u * (j + 1) may round up to j + 1
    seen = torch.empty(deg.numel(), dtype=torch.bool)
    for i in range(1, k):
        torch.eq(out[0], out[i], out=seen)
        for j in range(1, i):
            seen |= out[j] == out[i]
        torch.where(seen, upper[i], out[i], out=out[i])
    return out


def make_neighbor_loader(
    data: Data,
    num_neighbors: Sequence[int],
    batch_size: int,
    input_nodes: Tensor | None = None,
    shuffle: bool = False,
    seed: int = 0,
    index: SamplerIndex | None = None,
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
        index: the CSC index of ``data`` (:func:`build_sampler_index`) for graphssl's sampler
            to use instead of converting ``data`` again; PyG's compiled samplers convert the
            graph themselves and ignore it (default: ``None``).

    Raises:
        TypeError/ValueError: for a malformed ``num_neighbors``, a non-positive
            ``batch_size``, a non-``Data`` graph or an ``index`` that does not fit ``data``.
    """
    fanouts = validate_num_neighbors(num_neighbors)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    _check_graph(data, "make_neighbor_loader")
    generator = torch.Generator().manual_seed(int(seed))
    kwargs: dict[str, Any] = {
        "input_nodes": input_nodes,
        "batch_size": batch_size,
        "shuffle": shuffle,
        "generator": generator,
    }
    if not uses_torch_sampler():
        loader = NeighborLoader(data, num_neighbors=fanouts, **kwargs)
    else:
        sampler = TorchNeighborSampler(data, fanouts, seed=seed, index=index)
        loader = NeighborLoader(data, num_neighbors=fanouts, neighbor_sampler=sampler, **kwargs)
    loader.graphssl_seed = int(seed)  # type: ignore[attr-defined]  # read by set_loader_epoch
    return loader


def _check_graph(data: Any, caller: str) -> None:
    """``data`` must be a homogeneous PyG graph with edges (what ``caller`` samples from)."""
    if not isinstance(data, Data):
        raise TypeError(
            f"{caller} needs a homogeneous torch_geometric.data.Data, got {type(data).__name__}"
        )
    if data.edge_index is None:
        raise ValueError(f"{caller} needs a graph with edge_index, got none")


def epoch_seed(seed: int, epoch: int) -> int:
    """The seed of epoch ``epoch``'s random streams in a run seeded ``seed`` (``seed`` at 0)."""
    if epoch < 0:
        raise ValueError(f"epoch must be >= 0, got {epoch}")
    return int(seed) + 1_000_003 * int(epoch)


def set_loader_epoch(loader: NeighborLoader, epoch: int) -> None:
    """Seed the shuffling and sampling of a :func:`make_neighbor_loader` loader for ``epoch``.

    A loader kept across epochs (its construction converts the graph to CSC, seconds on large
    graphs) reshuffles its seeds and redraws its neighbours every epoch; seeding each epoch from
    ``(seed, epoch)`` makes epoch ``e``'s batches the same whether the run got there without
    stopping or resumed from a checkpoint. PyG's compiled samplers draw the neighbours from
    torch's global RNG, so for them only the shuffling is seeded here.

    Raises:
        ValueError: for a loader :func:`make_neighbor_loader` did not build, or ``epoch < 0``.
    """
    seed = getattr(loader, "graphssl_seed", None)
    if seed is None:
        raise ValueError(
            f"set_loader_epoch needs a loader built by make_neighbor_loader, got "
            f"{type(loader).__name__} without a graphssl_seed"
        )
    stream = epoch_seed(seed, epoch)
    if isinstance(loader.generator, torch.Generator):
        loader.generator.manual_seed(stream)
    sampler = getattr(loader, "node_sampler", None)
    if isinstance(sampler, TorchNeighborSampler):
        sampler.set_epoch(epoch)
