"""GNN encoders built on PyG's basic GNN models (GCN, GAT, GraphSAGE, GIN, MLP).

Every encoder maps ``(x, edge_index, edge_weight=None)`` to node embeddings ``[N, D]`` and
exposes ``out_channels`` and ``num_hops``. ``prepare(data)`` returns the graph an encoder wants for
mini-batch (neighbour-sampled) inference, so sampled subgraphs give the same embeddings as the full
graph: GCN uses the symmetric normalisation of the *full* graph as edge weights.

On a ``NeighborLoader`` batch, passing its per-hop counts (``num_sampled_nodes_per_hop``,
``num_sampled_edges_per_hop``) lets layer ``i`` of an ``L``-layer encoder run only on the nodes
within ``L - i - 1`` hops of the seeds, reading the rows within ``L - i`` hops (a bipartite
step per layer, as PyG's ``trim_to_layer`` but without computing the last hop): the seed rows
are unchanged, the other rows are not computed (:func:`seed_embeddings` returns the seed rows
of a batch).

For layer-wise full-graph inference (:func:`~graphssl.models.encode.encode_layerwise`) every
encoder exposes its per-layer step: :meth:`GNNEncoder.inference_graph` (the graph, once),
:meth:`GNNEncoder.inference_source` (a layer's per-node inputs, once per layer) and
:meth:`GNNEncoder.inference_rows` (a chunk of the layer's output rows, with the activation,
normalisation and dropout that follow the layer in ``forward``); :meth:`GNNEncoder.layerwise_reason`
names what prevents it (a graph-wide normalisation, jumping knowledge).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.nn import GATConv, GCNConv, GINConv, SAGEConv
from torch_geometric.nn import models as pyg_models
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.nn.resolver import activation_resolver, normalization_resolver
from torch_geometric.utils import add_self_loops, remove_self_loops, to_torch_csr_tensor

from graphssl.models.layerwise import InferenceGraph, rowwise_reason
from graphssl.models.sparse_input import (
    SparseMode,
    check_mode,
    sparse_form,
    sparse_linear,
    use_sparse_input,
)


class GNNEncoder(nn.Module):
    """Base of graphssl encoders: a PyG ``BasicGNN`` with a uniform call signature.

    Args:
        in_channels: input feature size (``-1``: inferred on the first call).
        hidden_channels: hidden size, and output size unless ``out_channels`` is given.
        num_layers: number of message-passing layers.
        out_channels: output size of the last layer where an encoder accepts it (GCN; e.g.
            GRACE's encoder is ``2·D`` wide in its first layer and ``D`` in its last)
            (default: ``None``, ``hidden_channels``).
        dropout: dropout between layers (default: ``0.0``).
        act: activation name understood by PyG (default: ``"prelu"``).
        norm: normalisation layer name, e.g. ``"batch_norm"`` (default: ``None``).
        act_last: also apply the activation to the output layer, as DGI's encoder does
            (default: ``False``).
        sparse_input: ``"auto"``, ``"true"`` or ``"false"``: multiply sparse input features
            (bag-of-words, ~1 % non-zero) as a sparse matrix in the first layer's linear map,
            automatically below a measured density, always, or never; the results are the
            dense ones up to float rounding (:mod:`graphssl.models.sparse_input`)
            (default: ``"auto"``).
    """

    gnn: pyg_models.basic_gnn.BasicGNN | pyg_models.MLP
    sparse_input: SparseMode = "auto"

    def __init__(
        self,
        hidden_channels: int,
        num_layers: int,
        act: str = "prelu",
        act_last: bool = False,
        out_channels: int | None = None,
    ) -> None:
        super().__init__()
        self.out_act: nn.Module = activation_resolver(act) if act_last else nn.Identity()
        if hidden_channels <= 0 or num_layers <= 0:
            raise ValueError(
                f"hidden_channels and num_layers must be > 0, got {hidden_channels} and "
                f"{num_layers}"
            )
        if out_channels is not None and out_channels <= 0:
            raise ValueError(f"out_channels must be > 0 or null, got {out_channels}")
        self.out_channels = hidden_channels if out_channels is None else out_channels
        self.num_layers = num_layers

    @property
    def num_hops(self) -> int:
        """Hops of neighbourhood one output row depends on: one per message-passing layer."""
        return self.num_layers

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        edge_weight: Tensor | None = None,
        num_sampled_nodes_per_hop: Sequence[int] | None = None,
        num_sampled_edges_per_hop: Sequence[int] | None = None,
        output_hops: int = 0,
    ) -> Tensor:
        """Node embeddings; with the per-hop counts of a ``NeighborLoader`` batch only the seed
        rows (the first ``num_sampled_nodes_per_hop[0]``) are exact and later hops are skipped
        by the layers that do not need them (the output may then have fewer rows than ``x``).
        ``output_hops=k`` keeps the rows within ``k`` hops of the seeds instead (for a layer that
        follows the encoder, such as GraphMAE's decoder); rows beyond the seeds see their
        neighbourhood only as far as the batch sampled it, whole when the batch sampled ``k``
        hops more than the encoder has layers."""
        hops = trim_hops(
            self.num_hops,
            x,
            edge_index,
            num_sampled_nodes_per_hop,
            num_sampled_edges_per_hop,
            keep=output_hops,
        )
        if hops is None:
            h = self._sparse_forward(x, edge_index)
            return self.out_act(self.gnn(x, edge_index) if h is None else h)
        return self.out_act(self._bipartite(x, edge_index, *hops, output_hops))

    def _use_sparse_input(self, mode: object) -> None:
        """Let the first layer's linear map multiply sparse features as a sparse matrix
        (``mode``: ``"auto"``, ``"true"`` or ``"false"``).

        Where the first layer applies its linear map to the input itself (GCN, GAT, MLP), that
        map becomes a :class:`~graphssl.models.sparse_input.SparseInputLinear`; GraphSAGE and
        GIN aggregate before their linear map, so :meth:`_sparse_forward` reorders their first
        layer instead.
        """
        self.sparse_input = check_mode(mode)
        if isinstance(self.gnn, pyg_models.MLP):
            use_sparse_input(self.gnn.lins[0], self.sparse_input)
            return
        first = self.gnn.convs[0]
        for name in ("lin", "lin_src", "lin_dst"):  # GCNConv, GATConv (and SAGEConv's project)
            lin = getattr(first, name, None)
            if isinstance(lin, nn.Module):
                use_sparse_input(lin, self.sparse_input)

    def _sparse_forward(self, x: Tensor, edge_index: Tensor) -> Tensor | None:
        """``self.gnn(x, edge_index)`` with a first layer that multiplies the CSR form of
        ``x``, for encoders whose first layer aggregates before its linear map; ``None`` where
        the dense forward runs (the default: the first linear map handles sparse input)."""
        return None

    def _bipartite(
        self, x: Tensor, edge_index: Tensor, nodes: list[int], edges: list[int], keep: int = 0
    ) -> Tensor:
        """``self.gnn``'s layers on a sampled batch, layer ``i`` of ``L`` computing only the
        rows within ``L - i - 1 + keep`` hops of the seeds, from the rows within ``L - i + keep``
        hops (as far as the batch reaches).

        A batch numbers its nodes hop by hop and its edges by the hop of their target, so layer
        ``i`` is one bipartite step: sources are the first ``n_in`` rows, targets the first
        ``n_out`` rows, its edges the first ones. PyG's ``trim_to_layer`` would compute the
        first layer on every sampled node; most of them (the last hop, ~75 % of a [10, 5]
        batch) are only ever read as sources. The seed rows are the same either way.
        """
        gnn = self.gnn
        num_layers = len(gnn.convs)
        for i, conv in enumerate(gnn.convs):
            reach = num_layers - i + keep  # the output rows are the hops below `reach`
            n_in = sum(nodes[: reach + 1])
            n_out = sum(nodes[:reach])
            # With keep > 0 the last output hop was sampled without in-edges (its targets have
            # none in the batch); a conv with a closed form for such rows skips their messages.
            n_edged = sum(nodes[: min(reach, len(edges))])
            ei = edge_index[:, : sum(edges[:reach])]
            src = _rows(x, n_in)
            tail = _edgeless_rows(conv, x[n_edged:n_out]) if n_edged < n_out else None
            if tail is None:
                x = conv((src, x[:n_out]), ei, size=(n_in, n_out))
            else:
                head = conv((src, x[:n_edged]), ei, size=(n_in, n_edged))
                x = torch.cat([head, tail])
            if i < num_layers - 1:  # as BasicGNN.forward (no jumping knowledge here)
                x = _between_layers(gnn, i, x)
        return x

    def prepare(self, data: Data) -> Data:
        """The graph to sample from for mini-batch inference (default: ``data`` itself)."""
        return data

    # ------------------------------------------------------------------ layer-wise inference
    # Layer-wise inference runs the encoder one layer at a time over all nodes, in chunks of
    # target rows (graphssl.models.encode.encode_layerwise): per layer, inference_source() once
    # over all nodes, then inference_rows() per chunk. The rows equal those of forward() on the
    # whole graph: each step is the same PyG convolution, and the activation, normalisation and
    # dropout between layers are applied as BasicGNN.forward applies them.

    #: the convolution types whose layer-wise step this encoder implements
    _layerwise_convs: tuple[type[nn.Module], ...] = ()

    @property
    def num_inference_layers(self) -> int:
        """Steps of layer-wise inference: one per message-passing layer."""
        return len(self.gnn.convs)

    def layerwise_reason(self) -> str | None:
        """Why this encoder cannot run layer by layer over chunks of nodes, ``None`` when it
        can: a layer type without a layer-wise step, jumping knowledge, or a normalisation over
        the whole graph (:func:`~graphssl.models.layerwise.rowwise_reason`)."""
        gnn = self.gnn
        if getattr(gnn, "jk_mode", None) is not None or hasattr(gnn, "lin"):
            return f"{type(gnn).__name__} combines its layers (jumping knowledge)"
        for i, conv in enumerate(gnn.convs):
            reason = self._conv_reason(conv)
            if reason is not None:
                return f"layer {i} ({type(conv).__name__}): {reason}"
        for module in (gnn.norms, gnn.act, self._output_modules()):
            if isinstance(module, nn.Module) and (reason := rowwise_reason(module)) is not None:
                return reason
        return None

    def _conv_reason(self, conv: nn.Module) -> str | None:
        if type(conv) not in self._layerwise_convs:
            return f"no layer-wise step for {type(conv).__name__} in {type(self).__name__}"
        return rowwise_reason(conv)

    def _output_modules(self) -> nn.Module:
        """What follows the last layer (the output activation)."""
        return self.out_act

    def _output(self, h: Tensor) -> Tensor:
        return self.out_act(h)  # type: ignore[no-any-return]

    def inference_graph(self, data: Data) -> InferenceGraph:
        """The graph layer-wise inference aggregates over: ``data``'s edges grouped by target.
        Edge weights are not read, as :meth:`forward` does not read them."""
        return InferenceGraph.from_edge_index(data.edge_index, int(data.num_nodes))

    def inference_floats(self, in_channels: int) -> tuple[int, int]:
        """Floats one chunk holds per target row and per in-edge at its peak (for chunk sizes
        from a memory budget), for node features of width ``in_channels``."""
        return in_channels + 4 * self._max_width(in_channels), 1

    def _max_width(self, in_channels: int) -> int:
        gnn = self.gnn
        return max(in_channels, int(gnn.hidden_channels), int(self.out_channels))

    def full_batch_inference_bytes(self, num_nodes: int, num_edges: int, in_channels: int) -> int:
        """Rough peak bytes of :meth:`forward` on a whole graph of ``num_nodes`` nodes and
        ``num_edges`` edges under ``torch.no_grad()``, beyond the graph itself: a few ``n x
        width`` tensors alive at once plus, for convolutions that gather one message per edge
        (GraphSAGE, GIN), the ``E x width`` messages of the widest layer input and their ids."""
        width = self._max_width(in_channels)
        nodes = 4 * num_nodes * (in_channels + 3 * width)
        return nodes + num_edges * (4 * width + 16)

    def inference_source(self, layer: int, x: Tensor) -> dict[str, Tensor]:
        """What layer ``layer`` reads of every node, computed once per layer: ``x`` itself
        (the rows of the previous layer, ``[n, d]``), and for some layers a per-node transform
        of it (GCN's linear map, GAT's projections and attention logits)."""
        return {"x": x}

    def inference_rows(
        self, layer: int, source: dict[str, Tensor], graph: InferenceGraph, start: int, end: int
    ) -> Tensor:
        """Rows ``[start, end)`` of layer ``layer``'s output, with what follows the layer in
        :meth:`forward` (the activation, normalisation and dropout between layers, the output
        activation after the last), from :meth:`inference_source`'s tensors of the layer."""
        conv = self.gnn.convs[layer]
        x = source["x"]
        h = conv((x, x[start:end]), graph.block(start, end, x.dtype))
        return self._after_layer(layer, h)

    def _after_layer(self, layer: int, h: Tensor) -> Tensor:
        """What :meth:`forward` applies to layer ``layer``'s rows (as ``BasicGNN.forward``)."""
        if layer == len(self.gnn.convs) - 1:
            return self._output(h)
        return _between_layers(self.gnn, layer, h)


def trim_hops(
    num_layers: int,
    x: Tensor,
    edge_index: Tensor,
    num_sampled_nodes_per_hop: Sequence[int] | None,
    num_sampled_edges_per_hop: Sequence[int] | None,
    keep: int = 0,
) -> tuple[list[int], list[int]] | None:
    """The per-hop counts an ``num_layers``-layer encoder trims with, or ``None`` for no trim.

    Hops beyond ``num_layers + keep`` cannot reach the seeds, nor the rows within ``keep`` hops
    of them that the encoder keeps, and are cut; with fewer hops than layers (or no counts)
    nothing is trimmed.

    Raises:
        ValueError: for counts given for nodes but not edges (or the reverse), or counts that do
            not add up to the rows of ``x`` and the columns of ``edge_index``.
    """
    if num_sampled_nodes_per_hop is None and num_sampled_edges_per_hop is None:
        return None
    if num_sampled_nodes_per_hop is None or num_sampled_edges_per_hop is None:
        raise ValueError(
            "trimming needs both num_sampled_nodes_per_hop and num_sampled_edges_per_hop, got "
            f"{num_sampled_nodes_per_hop!r} and {num_sampled_edges_per_hop!r}"
        )
    nodes = [int(n) for n in num_sampled_nodes_per_hop]
    edges = [int(e) for e in num_sampled_edges_per_hop]
    if len(nodes) != len(edges) + 1 or sum(nodes) != x.size(0) or sum(edges) != edge_index.size(1):
        raise ValueError(
            f"per-hop counts do not describe this graph: {len(nodes)} node counts summing to "
            f"{sum(nodes)} and {len(edges)} edge counts summing to {sum(edges)}, for {x.size(0)} "
            f"nodes and {edge_index.size(1)} edges (expected one more node count than edge "
            f"counts, adding up to the nodes and edges, as NeighborLoader batches carry)"
        )
    if len(edges) < num_layers or num_layers == 0:
        return None
    depth = min(len(edges), num_layers + keep)
    return nodes[: depth + 1], edges[:depth]


def _rows(x: Tensor, n: int) -> Tensor:
    """The first ``n`` rows of ``x``; ``x`` itself when that is all of it (a slice would cost a
    zero-filled copy of the whole gradient in the backward pass)."""
    return x if n == x.size(0) else x[:n]


_EMPTY_IS_ZERO = frozenset({"sum", "add", "mean", "max", "min"})


def _edgeless_rows(conv: nn.Module, x: Tensor) -> Tensor | None:
    """``conv``'s output for target rows ``x`` that receive no message, where it has a closed
    form (``None`` otherwise: the caller runs the conv on them).

    ``SAGEConv`` aggregates an empty neighbourhood to zero, so such a row is
    ``lin_r(x) + lin_l.bias`` (normalised if the conv normalises): the same value as the full
    step, without multiplying the zero aggregate by ``lin_l``.
    """
    if (
        isinstance(conv, SAGEConv)
        and conv.root_weight
        and isinstance(conv.aggr, str)
        and conv.aggr in _EMPTY_IS_ZERO
    ):
        out: Tensor = conv.lin_r(x)
        if conv.lin_l.bias is not None:
            out = out + conv.lin_l.bias
        if conv.normalize:
            out = torch.nn.functional.normalize(out, p=2.0, dim=-1)
        return out
    return None


def _between_layers(gnn: pyg_models.basic_gnn.BasicGNN, i: int, x: Tensor) -> Tensor:
    """What ``BasicGNN.forward`` does after hidden layer ``i``: activation, norm, dropout."""
    if gnn.act is not None and gnn.act_first:
        x = gnn.act(x)
    norm = gnn.norms[i]
    x = norm(x, None, None) if gnn.supports_norm_batch else norm(x)
    if gnn.act is not None and not gnn.act_first:
        x = gnn.act(x)
    return gnn.dropout(x)


def _after_first_layer(gnn: pyg_models.basic_gnn.BasicGNN, h: Tensor, edge_index: Tensor) -> Tensor:
    """``BasicGNN.forward`` from the output ``h`` of its first layer on (no jumping
    knowledge, as graphssl's encoders build it)."""
    num_layers = len(gnn.convs)
    for i in range(num_layers):
        if i > 0:
            h = gnn.convs[i](h, edge_index)
        if i < num_layers - 1:
            h = _between_layers(gnn, i, h)
    return h


def _mlp_after_first_linear(mlp: pyg_models.MLP, h: Tensor) -> Tensor:
    """PyG ``MLP.forward`` from the output ``h`` of its first linear map on (no batch
    vector, as ``GINConv`` calls it)."""
    for i, (lin, norm) in enumerate(zip(mlp.lins, mlp.norms)):
        if i > 0:
            h = lin(h)
        if mlp.act is not None and mlp.act_first:
            h = mlp.act(h)
        h = norm(h, None, None) if mlp.supports_norm_batch else norm(h)
        if mlp.act is not None and not mlp.act_first:
            h = mlp.act(h)
        h = torch.nn.functional.dropout(h, p=mlp.dropout[i], training=mlp.training)
    if mlp.plain_last:
        h = mlp.lins[-1](h) if len(mlp.lins) > 1 else h
        h = torch.nn.functional.dropout(h, p=mlp.dropout[-1], training=mlp.training)
    return h


def sampled_hops(batch: Data) -> tuple[list[int], list[int]] | None:
    """``(num_sampled_nodes, num_sampled_edges)`` of a ``NeighborLoader`` batch when they still
    describe its nodes and edges (an augmentation may have changed them), else ``None``."""
    nodes = getattr(batch, "num_sampled_nodes", None)
    edges = getattr(batch, "num_sampled_edges", None)
    x = getattr(batch, "x", None)
    edge_index = getattr(batch, "edge_index", None)
    if nodes is None or edges is None or not isinstance(x, Tensor) or edge_index is None:
        return None
    nodes, edges = [int(n) for n in nodes], [int(e) for e in edges]
    if len(nodes) != len(edges) + 1 or sum(nodes) != x.size(0) or sum(edges) != edge_index.size(1):
        return None
    return nodes, edges


def seed_embeddings(encoder: nn.Module, batch: Data) -> Tensor:
    """The embeddings of a batch's seed rows: the first ``batch.batch_size`` rows of a
    ``NeighborLoader`` batch (every row of a batch without ``batch_size``).

    A :class:`GNNEncoder` gets the batch's per-hop counts, so its layers skip the hops they do
    not need; any other encoder runs on the whole batch.
    """
    edge_weight = getattr(batch, "edge_weight", None)
    hops = sampled_hops(batch) if isinstance(encoder, GNNEncoder) else None
    if hops is None:
        h: Tensor = encoder(batch.x, batch.edge_index, edge_weight)
    else:
        h = encoder(batch.x, batch.edge_index, edge_weight, hops[0], hops[1])
    batch_size = getattr(batch, "batch_size", None)
    return h if batch_size is None else h[: int(batch_size)]


class GCNEncoder(GNNEncoder):
    """Graph convolutional network (Kipf & Welling, ICLR 2017, https://arxiv.org/abs/1609.02907).

    Without ``edge_weight`` the graph is normalised on the fly (``D^-1/2 (A+I) D^-1/2``), as in
    ``GCNConv``. With ``edge_weight`` the weights are taken as already normalised, which is what
    :meth:`prepare` supplies for exact neighbour-sampled inference.

    Args:
        norm_last: also apply ``norm`` to the output layer (before ``act_last``), as BGRL's
            reference encoder (``GCNConv → BatchNorm → PReLU`` for every layer) does; PyG's
            ``GCN`` normalises hidden layers only (default: ``False``).
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        num_layers: int = 2,
        dropout: float = 0.0,
        act: str = "prelu",
        norm: str | None = None,
        act_last: bool = False,
        out_channels: int | None = None,
        norm_last: bool = False,
        sparse_input: SparseMode | bool = "auto",
    ) -> None:
        super().__init__(hidden_channels, num_layers, act, act_last, out_channels)
        if norm_last and norm is None:
            raise ValueError("norm_last=true needs a norm (e.g. 'batch_norm'), got norm=None")
        self.out_norm: nn.Module = (
            normalization_resolver(norm, self.out_channels) if norm_last else nn.Identity()
        )
        self.gnn = pyg_models.GCN(
            in_channels,
            hidden_channels,
            num_layers,
            out_channels=self.out_channels,
            dropout=dropout,
            act=act,
            norm=norm,
            normalize=False,
            add_self_loops=False,
            cached=False,
        )
        self._use_sparse_input(sparse_input)

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        edge_weight: Tensor | None = None,
        num_sampled_nodes_per_hop: Sequence[int] | None = None,
        num_sampled_edges_per_hop: Sequence[int] | None = None,
        output_hops: int = 0,
    ) -> Tensor:
        hops = trim_hops(
            self.num_hops,
            x,
            edge_index,
            num_sampled_nodes_per_hop,
            num_sampled_edges_per_hop,
            keep=output_hops,
        )
        # The whole batch is normalised and put in CSR form; trimming then multiplies row blocks
        # of it (see _trimmed), so the seed rows match the untrimmed forward exactly.
        if edge_weight is None:
            edge_index, edge_weight = gcn_norm(
                edge_index, None, x.size(0), improved=False, add_self_loops=True, dtype=x.dtype
            )
        # Propagate with a sparse-matrix product (adj_t[target, source]) rather than PyG's
        # gather/scatter: the same sums, about twice as fast on CPU without torch-scatter.
        adj_t = to_torch_csr_tensor(
            edge_index.flip(0), edge_weight.to(x.dtype), size=(x.size(0), x.size(0))
        )
        if hops is None:
            return self.out_act(self.out_norm(self.gnn(x, adj_t)))
        return self.out_act(self.out_norm(self._trimmed(x, adj_t, hops[0], output_hops)))

    def _trimmed(self, x: Tensor, adj_t: Tensor, nodes: list[int], keep: int = 0) -> Tensor:
        """``self.gnn``'s layers where layer ``i`` computes only the rows within
        ``L - i - 1 + keep`` hops of the seeds, from the rows within ``L - i + keep`` hops.

        A sampled node's in-edges come from its own hop or the next one, so the first rows of
        the adjacency (targets) read only the first columns (sources): layer ``i`` multiplies
        the top-left ``n_out x n_in`` block of ``adj_t``, a prefix of its CSR arrays.
        """
        gnn = self.gnn
        num_layers = len(gnn.convs)
        crow, col, value = adj_t.crow_indices(), adj_t.col_indices(), adj_t.values()
        for i, conv in enumerate(gnn.convs):
            n_in = sum(nodes[: num_layers - i + 1 + keep])
            n_out = sum(nodes[: num_layers - i + keep])
            nnz = int(crow[n_out])
            block = torch.sparse_csr_tensor(
                crow[: n_out + 1], col[:nnz], value[:nnz], size=(n_out, n_in)
            )
            x = conv(_rows(x, n_in), block)
            if i < num_layers - 1:  # as BasicGNN.forward (no jumping knowledge here)
                x = _between_layers(gnn, i, x)
        return x

    def prepare(self, data: Data) -> Data:
        out = copy.copy(data)
        out.edge_index, out.edge_weight = gcn_norm(
            data.edge_index, None, data.num_nodes, add_self_loops=True, dtype=torch.float
        )
        return out

    _layerwise_convs = (GCNConv,)

    def _conv_reason(self, conv: nn.Module) -> str | None:
        if getattr(conv, "normalize", False) or getattr(conv, "aggr", "add") != "add":
            return "a GCNConv that normalises the graph itself or does not sum its messages"
        return super()._conv_reason(conv)

    def _output_modules(self) -> nn.Module:
        return nn.ModuleList([self.out_norm, self.out_act])

    def _output(self, h: Tensor) -> Tensor:
        return self.out_act(self.out_norm(h))  # type: ignore[no-any-return]

    def inference_graph(self, data: Data) -> InferenceGraph:
        """The graph :meth:`forward` propagates over: ``data.edge_weight`` taken as already
        normalised when ``data`` has it, else ``D^-1/2 (A+I) D^-1/2`` of the whole graph."""
        n = int(data.num_nodes)
        weight = getattr(data, "edge_weight", None)
        if weight is not None:
            return InferenceGraph.from_edge_index(data.edge_index, n, weight)
        x = getattr(data, "x", None)
        dtype = x.dtype if isinstance(x, Tensor) else torch.float
        edge_index, weight = gcn_norm(
            data.edge_index, None, n, improved=False, add_self_loops=True, dtype=dtype
        )
        return InferenceGraph.from_edge_index(edge_index, n, weight)

    def full_batch_inference_bytes(self, num_nodes: int, num_edges: int, in_channels: int) -> int:
        """Rough peak bytes of :meth:`forward` on a whole graph under ``torch.no_grad()``: a few
        ``n x width`` tensors plus the normalised edge list (self-loops added), its weights and
        the sparse adjacency built from it (no per-edge messages: a sparse-matrix product)."""
        width = self._max_width(in_channels)
        return 4 * num_nodes * (in_channels + 3 * width) + 40 * (num_edges + num_nodes)

    def inference_source(self, layer: int, x: Tensor) -> dict[str, Tensor]:
        """``x``, and ``lin(x)`` over all nodes when the layer narrows its input (then the
        product with the adjacency runs on the narrower rows)."""
        conv = self.gnn.convs[layer]
        if x.size(1) > int(conv.out_channels):
            return {"x": x, "h": conv.lin(x)}
        return {"x": x}

    def inference_rows(
        self, layer: int, source: dict[str, Tensor], graph: InferenceGraph, start: int, end: int
    ) -> Tensor:
        # GCNConv: A (x W) + b; the same as (A x) W + b, computed on the narrower side
        conv = self.gnn.convs[layer]
        x = source["x"]
        block = graph.block(start, end, x.dtype)
        h = source.get("h")
        out = torch.sparse.mm(block, h) if h is not None else conv.lin(torch.sparse.mm(block, x))
        if conv.bias is not None:
            out = out + conv.bias
        return self._after_layer(layer, out)


class SAGEEncoder(GNNEncoder):
    """GraphSAGE with mean aggregation (Hamilton et al., NeurIPS 2017,
    https://arxiv.org/abs/1706.02216)."""

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        num_layers: int = 2,
        dropout: float = 0.0,
        act: str = "prelu",
        norm: str | None = None,
        act_last: bool = False,
        sparse_input: SparseMode | bool = "auto",
    ) -> None:
        super().__init__(hidden_channels, num_layers, act, act_last)
        self.gnn = pyg_models.GraphSAGE(
            in_channels, hidden_channels, num_layers, dropout=dropout, act=act, norm=norm
        )
        self._use_sparse_input(sparse_input)

    def _sparse_forward(self, x: Tensor, edge_index: Tensor) -> Tensor | None:
        # SAGEConv: lin_l(aggr_j x_j) + lin_r(x_i); for a linear aggregation (mean, sum) that
        # is aggr_j (x_j W_l) + b_l + x_i W_r: both maps on the sparse rows in one product,
        # then the aggregation on the narrow result
        conv = self.gnn.convs[0]
        if conv.project or conv.aggr not in ("mean", "sum", "add") or not conv.root_weight:
            return None
        csr = sparse_form(x, self.sparse_input)
        if csr is None:
            return None
        lin_l, lin_r = conv.lin_l, conv.lin_r
        both = sparse_linear(csr, torch.cat([lin_l.weight, lin_r.weight]))
        left, right = both.split([lin_l.out_channels, lin_r.out_channels], dim=1)
        h = conv.propagate(edge_index, x=(left, left), size=None) + right
        if lin_l.bias is not None:
            h = h + lin_l.bias
        if lin_r.bias is not None:
            h = h + lin_r.bias
        if conv.normalize:
            h = torch.nn.functional.normalize(h, p=2.0, dim=-1)
        return _after_first_layer(self.gnn, h, edge_index)

    _layerwise_convs = (SAGEConv,)

    def _conv_reason(self, conv: nn.Module) -> str | None:
        if getattr(conv, "aggr", None) not in ("mean", "sum", "add"):
            return f"aggregation {getattr(conv, 'aggr', None)!r} (layer-wise: mean or sum)"
        if getattr(conv, "project", False):
            return "project=True (it would transform every source node once per chunk)"
        return super()._conv_reason(conv)


class GATEncoder(GNNEncoder):
    """Graph attention network (Veličković et al., ICLR 2018, https://arxiv.org/abs/1710.10903).

    Args:
        heads: attention heads per layer; hidden layers concatenate them (default: ``4``).
        attn_dropout: dropout on the attention coefficients of every layer. ``None`` keeps PyG's
            ``GAT`` behaviour, which reuses ``dropout`` there (default: ``None``).
        init: ``"pyg"`` keeps PyG's Glorot-uniform weights; ``"dgl"`` re-draws the linear and
            attention weights Xavier-normal with the ReLU gain, as DGL's ``GATConv`` (and so the
            GAT and GraphMAE reference code) does — about 1.4× larger at the start. GraphMAE on
            Cora trains to a lower loss and 3 points higher probe accuracy with it
            (BENCHMARKS.md) (default: ``"pyg"``).
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        num_layers: int = 2,
        heads: int = 4,
        dropout: float = 0.0,
        act: str = "prelu",
        norm: str | None = None,
        act_last: bool = False,
        attn_dropout: float | None = None,
        init: str = "pyg",
        sparse_input: SparseMode | bool = "auto",
    ) -> None:
        super().__init__(hidden_channels, num_layers, act, act_last)
        if hidden_channels % heads:
            raise ValueError(
                f"hidden_channels ({hidden_channels}) must be divisible by heads ({heads})"
            )
        self.gnn = pyg_models.GAT(
            in_channels,
            hidden_channels,
            num_layers,
            dropout=dropout,
            act=act,
            norm=norm,
            heads=heads,
        )
        if attn_dropout is not None:
            if not 0.0 <= attn_dropout < 1.0:
                raise ValueError(f"attn_dropout must be in [0, 1), got {attn_dropout}")
            for conv in self.gnn.convs:
                conv.dropout = attn_dropout  # GATConv's attention dropout (a float attribute)
        self.attn_dropout = dropout if attn_dropout is None else attn_dropout
        if init == "dgl":
            for conv in self.gnn.convs:
                dgl_gat_init_(conv)
        elif init != "pyg":
            raise ValueError(f"init must be 'pyg' or 'dgl', got {init!r}")
        self.init = init
        self._use_sparse_input(sparse_input)

    _layerwise_convs = (GATConv,)

    def layerwise_reason(self) -> str | None:
        loops = {bool(conv.add_self_loops) for conv in self.gnn.convs}
        if len(loops) > 1:
            return "its layers differ in add_self_loops (one graph serves every layer)"
        return super().layerwise_reason()

    def inference_graph(self, data: Data) -> InferenceGraph:
        """``data``'s edges with the self-loops ``GATConv`` uses: every node's existing
        self-loops removed and one added (as each layer of :meth:`forward` does)."""
        n = int(data.num_nodes)
        edge_index = data.edge_index
        if self.gnn.convs[0].add_self_loops:
            edge_index, _ = remove_self_loops(edge_index)
            edge_index, _ = add_self_loops(edge_index, num_nodes=n)
        return InferenceGraph.from_edge_index(edge_index, n)

    def inference_floats(self, in_channels: int) -> tuple[int, int]:
        # per edge: its ids, attention logits and weights per head, and the weighted message
        heads = int(self.gnn.convs[0].heads)
        rows, _ = super().inference_floats(in_channels)
        return rows, 2 * self._max_width(in_channels) + 4 * heads + 6

    def full_batch_inference_bytes(self, num_nodes: int, num_edges: int, in_channels: int) -> int:
        """Rough peak bytes of :meth:`forward` on a whole graph under ``torch.no_grad()``: a few
        ``n x width`` tensors plus, per edge (self-loops added), its ids, attention per head
        and the weighted message of the widest layer."""
        rows, per_edge = self.inference_floats(in_channels)
        return 4 * num_nodes * rows + 4 * (num_edges + num_nodes) * (per_edge + 2)

    def inference_source(self, layer: int, x: Tensor) -> dict[str, Tensor]:
        """``x``, the layer's projections of every node (``[n, heads, channels]``, the same
        tensor for sources and targets when the layer has one linear map) and their attention
        logits (``[n, heads]``), as ``GATConv.forward`` computes them."""
        conv = self.gnn.convs[layer]
        heads, channels = int(conv.heads), int(conv.out_channels)
        if conv.lin is not None:
            src = dst = conv.lin(x).view(-1, heads, channels)
        else:
            src = conv.lin_src(x).view(-1, heads, channels)
            dst = conv.lin_dst(x).view(-1, heads, channels)
        return {
            "x": x,
            "src": src,
            "dst": dst,
            "alpha_src": (src * conv.att_src).sum(dim=-1),
            "alpha_dst": (dst * conv.att_dst).sum(dim=-1),
        }

    def inference_rows(
        self, layer: int, source: dict[str, Tensor], graph: InferenceGraph, start: int, end: int
    ) -> Tensor:
        # GATConv.forward on the chunk's in-edges (self-loops already in the graph), with the
        # projections of all nodes as sources and of the chunk as targets
        conv = self.gnn.convs[layer]
        src, target, _ = graph.edges(start, end)
        edge_index = torch.stack([src, target])
        size = (graph.num_nodes, end - start)
        alpha = conv.edge_updater(
            edge_index,
            alpha=(source["alpha_src"], source["alpha_dst"][start:end]),
            edge_attr=None,
            size=size,
        )
        out = conv.propagate(
            edge_index, x=(source["src"], source["dst"][start:end]), alpha=alpha, size=size
        )
        out = out.reshape(end - start, -1) if conv.concat else out.mean(dim=1)
        res = getattr(conv, "res", None)
        if res is not None:
            out = out + res(source["x"][start:end])
        if conv.bias is not None:
            out = out + conv.bias
        return self._after_layer(layer, out)


def dgl_gat_init_(conv: nn.Module) -> None:
    """Re-draw a PyG ``GATConv``'s weights as DGL's ``GATConv.reset_parameters`` does:
    Xavier-normal with gain ``calculate_gain("relu")`` for the linear map(s) and the attention
    vectors (same fan convention as torch for the ``[1, heads, channels]`` vectors); bias zero.
    """
    gain = nn.init.calculate_gain("relu")
    with torch.no_grad():
        for name in ("lin", "lin_src", "lin_dst"):
            lin = getattr(conv, name, None)
            if lin is not None and getattr(lin, "weight", None) is not None:
                nn.init.xavier_normal_(lin.weight, gain=gain)
        for name in ("att_src", "att_dst"):
            att = getattr(conv, name, None)
            if att is not None:
                nn.init.xavier_normal_(att, gain=gain)
        bias = getattr(conv, "bias", None)
        if bias is not None:
            nn.init.zeros_(bias)


class GINEncoder(GNNEncoder):
    """Graph isomorphism network (Xu et al., ICLR 2019, https://arxiv.org/abs/1810.00826)."""

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        num_layers: int = 3,
        dropout: float = 0.0,
        act: str = "relu",
        norm: str | None = "batch_norm",
        act_last: bool = False,
        sparse_input: SparseMode | bool = "auto",
    ) -> None:
        super().__init__(hidden_channels, num_layers, act, act_last)
        self.gnn = pyg_models.GIN(
            in_channels, hidden_channels, num_layers, dropout=dropout, act=act, norm=norm
        )
        self._use_sparse_input(sparse_input)

    def _sparse_forward(self, x: Tensor, edge_index: Tensor) -> Tensor | None:
        # GINConv: mlp((1 + eps) x_i + sum_j x_j); the MLP's first linear map W commutes with
        # the sum: (1 + eps) x_i W + sum_j x_j W + b, so it runs on the sparse rows first
        conv = self.gnn.convs[0]
        mlp = conv.nn
        if conv.aggr not in ("sum", "add") or not isinstance(mlp, pyg_models.MLP):
            return None
        csr = sparse_form(x, self.sparse_input)
        if csr is None:
            return None
        first = mlp.lins[0]
        p = sparse_linear(csr, first.weight)
        h = conv.propagate(edge_index, x=(p, p), size=None) + (1 + conv.eps) * p
        if first.bias is not None:
            h = h + first.bias
        return _after_first_layer(self.gnn, _mlp_after_first_linear(mlp, h), edge_index)

    _layerwise_convs = (GINConv,)

    def _conv_reason(self, conv: nn.Module) -> str | None:
        if getattr(conv, "aggr", None) not in ("sum", "add"):
            return f"aggregation {getattr(conv, 'aggr', None)!r} (layer-wise: sum)"
        return super()._conv_reason(conv)


class MLPEncoder(GNNEncoder):
    """Graph-agnostic MLP baseline: ignores ``edge_index``."""

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        num_layers: int = 2,
        dropout: float = 0.0,
        act: str = "prelu",
        norm: str | None = None,
        act_last: bool = False,
        sparse_input: SparseMode | bool = "auto",
    ) -> None:
        super().__init__(hidden_channels, num_layers, act, act_last)
        self.gnn = pyg_models.MLP(
            in_channels=in_channels,
            hidden_channels=hidden_channels,
            out_channels=hidden_channels,
            num_layers=num_layers,
            dropout=dropout,
            act=act,
            norm=norm,
            plain_last=False,
        )
        self._use_sparse_input(sparse_input)

    @property
    def num_hops(self) -> int:
        """An MLP reads no neighbours: each row depends on its own features only."""
        return 0

    @property
    def num_inference_layers(self) -> int:
        """One step: the whole MLP on each chunk of rows."""
        return 1

    def layerwise_reason(self) -> str | None:
        return rowwise_reason(nn.ModuleList([self.gnn, self.out_act]))

    def inference_graph(self, data: Data) -> InferenceGraph:
        """No edges: an MLP reads none."""
        empty = data.edge_index.new_empty((2, 0))
        return InferenceGraph.from_edge_index(empty, int(data.num_nodes))

    def _max_width(self, in_channels: int) -> int:
        return max(in_channels, *(int(c) for c in self.gnn.channel_list))

    def inference_floats(self, in_channels: int) -> tuple[int, int]:
        return in_channels + 4 * self._max_width(in_channels), 0

    def full_batch_inference_bytes(self, num_nodes: int, num_edges: int, in_channels: int) -> int:
        return 4 * num_nodes * (in_channels + 3 * self._max_width(in_channels))

    def inference_rows(
        self, layer: int, source: dict[str, Tensor], graph: InferenceGraph, start: int, end: int
    ) -> Tensor:
        return self.out_act(self.gnn(source["x"][start:end]))  # type: ignore[no-any-return]

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        edge_weight: Tensor | None = None,
        num_sampled_nodes_per_hop: Sequence[int] | None = None,
        num_sampled_edges_per_hop: Sequence[int] | None = None,
        output_hops: int = 0,
    ) -> Tensor:
        return self.out_act(self.gnn(x))
