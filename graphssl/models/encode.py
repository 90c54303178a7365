"""The one way to run an encoder on a batch: graphs, mini-batches of graphs, or images; and
layer-wise inference of a node encoder over a whole graph (:func:`encode_layerwise`)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.nn import global_add_pool, global_mean_pool
from tqdm import tqdm

from graphssl.models.encoders import GNNEncoder, seed_embeddings

__all__ = ["DEFAULT_CHUNK_BYTES", "encode", "encode_layerwise", "layerwise_reason"]

#: memory one chunk of layer-wise inference may take when no budget is given (256 MiB)
DEFAULT_CHUNK_BYTES: int = 256 * 2**20


def encode(
    encoder: nn.Module,
    batch: Data,
    *,
    graph_level: bool = False,
    pool: str = "mean",
    seeds_only: bool = False,
) -> Tensor:
    """Run ``encoder`` on ``batch`` with the uniform ``(x, edge_index, edge_weight)`` call.

    Args:
        encoder: a :class:`~graphssl.models.encoders.GNNEncoder` (or compatible module).
        batch: a PyG ``Data``/``Batch``.
        graph_level: pool node embeddings into one row per graph (``batch.batch``).
        pool: ``"mean"`` or ``"sum"`` readout when ``graph_level`` (default: ``"mean"``).
        seeds_only: for a ``NeighborLoader`` batch, return only its ``batch_size`` seed rows,
            and let the encoder's layers skip the hops they do not need (node level only; a
            batch without ``batch_size`` gives all rows) (default: ``False``).

    Returns:
        ``[N, D]`` node embeddings, or ``[num_graphs, D]`` when ``graph_level``.

    An image batch (a ``[B, C, H, W]`` tensor, or a tuple ``(x, y)`` from an image
    DataModule) is passed to ``encoder(x)`` as is: image encoders pool by themselves.
    """
    if isinstance(batch, Tensor):
        return encoder(batch)  # type: ignore[no-any-return]
    if isinstance(batch, (tuple, list)):
        return encoder(batch[0])  # type: ignore[no-any-return]
    if seeds_only and not graph_level:
        return seed_embeddings(encoder, batch)
    h: Tensor = encoder(batch.x, batch.edge_index, getattr(batch, "edge_weight", None))
    if not graph_level:
        return h
    index = getattr(batch, "batch", None)
    if pool == "sum":
        return global_add_pool(h, index)
    if pool == "mean":
        return global_mean_pool(h, index)
    raise ValueError(f"pool must be 'mean' or 'sum', got {pool!r}")


def layerwise_reason(encoder: nn.Module) -> str | None:
    """Why ``encoder`` cannot run layer by layer (:func:`encode_layerwise`), ``None`` when it
    can: it is not a :class:`~graphssl.models.encoders.GNNEncoder`, or one of its layers has no
    layer-wise step or normalises over the whole graph
    (:meth:`~graphssl.models.encoders.GNNEncoder.layerwise_reason`)."""
    if not isinstance(encoder, GNNEncoder):
        return f"{type(encoder).__name__} is not a graphssl GNNEncoder (it has no per-layer step)"
    return encoder.layerwise_reason()


def encode_layerwise(
    encoder: nn.Module,
    data: Data,
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    chunk_nodes: int | None = None,
    progress: bool = False,
    part: tuple[int, int] = (0, 1),
    exchange: Callable[[Tensor], Tensor] | None = None,
) -> Tensor:
    """Node embeddings of ``encoder`` on the whole graph ``data``, one layer at a time.

    For each layer, the encoder's per-node inputs are computed once over all nodes
    (:meth:`~graphssl.models.encoders.GNNEncoder.inference_source`), then the layer's output
    rows are computed for consecutive chunks of target nodes from their full in-neighbourhoods
    (:meth:`~graphssl.models.encoders.GNNEncoder.inference_rows`) and written into one
    ``[n, d]`` tensor, the next layer's input. Each edge is read once per layer; memory is
    ``O(n·d)`` for the two layer tensors plus one chunk, whose target rows and in-edges are
    bounded so that it needs at most about ``chunk_bytes``
    (:meth:`~graphssl.models.encoders.GNNEncoder.inference_floats`); a node with more
    in-edges than that bound allows is a chunk of its own. The rows equal ``encoder(x,
    edge_index, edge_weight)`` on the whole graph up to float rounding (PyG's
    ``BasicGNN.inference`` computes the same, with a one-hop ``NeighborLoader``).

    Runs under ``torch.no_grad()``; the encoder must be in eval mode (dropout off, batch norm on
    its running statistics), as it is for extraction.

    Args:
        encoder: a :class:`~graphssl.models.encoders.GNNEncoder` whose
            :meth:`~graphssl.models.encoders.GNNEncoder.layerwise_reason` is ``None``.
        data: the whole graph (``x``, ``edge_index``, optional ``edge_weight``), on the
            encoder's device.
        chunk_bytes: memory budget of one chunk (default: :data:`DEFAULT_CHUNK_BYTES`).
        chunk_nodes: target nodes per chunk; ``None``: as many as ``chunk_bytes`` allows
            (default: ``None``).
        progress: show a tqdm bar over the chunks of all layers (default: ``False``).
        part: ``(index, parts)``: compute only the rows of the ``index``-th of ``parts``
            near-equal contiguous node ranges, and get each layer's other rows from
            ``exchange`` (default: ``(0, 1)``, every row here).
        exchange: with ``parts > 1``, maps this part's rows of a layer to all ``n`` rows in
            node order (e.g. an all-gather over the processes that compute the other parts);
            required then (default: ``None``).

    Returns:
        ``[n, out_channels]`` embeddings, on the device of ``data``.

    Raises:
        ValueError: for an encoder that cannot run layer by layer (the reason named), one in
            training mode, a graph without node features, or a chunk size below 1.
    """
    reason = layerwise_reason(encoder)
    if reason is not None or not isinstance(encoder, GNNEncoder):
        raise ValueError(
            f"{type(encoder).__name__} cannot run layer by layer: {reason}; use full-batch or "
            f"mini-batch extraction instead"
        )
    if encoder.training:
        raise ValueError(
            f"layer-wise inference needs {type(encoder).__name__} in eval mode (dropout off, "
            f"batch norm on its running statistics); call .eval() first"
        )
    x = getattr(data, "x", None)
    if not isinstance(x, Tensor):
        raise ValueError("layer-wise inference needs node features data.x, got none")
    if chunk_bytes < 1 or (chunk_nodes is not None and chunk_nodes < 1):
        raise ValueError(
            f"chunk_bytes and chunk_nodes must be >= 1 (chunk_nodes may be None), got "
            f"{chunk_bytes} and {chunk_nodes}"
        )
    index, parts = part
    if parts > 1 and exchange is None:
        raise ValueError(f"part={part} computes a share of the rows; pass exchange to get the rest")
    with torch.no_grad():
        graph = encoder.inference_graph(data)
        row_floats, edge_floats = encoder.inference_floats(int(x.size(1)))
        max_nodes = chunk_nodes or max(1, chunk_bytes // (4 * max(row_floats, 1)))
        max_edges = None if edge_floats <= 0 else max(1, chunk_bytes // (4 * edge_floats))
        size, extra = divmod(graph.num_nodes, parts)
        first = index * size + min(index, extra)
        last = first + size + (1 if index < extra else 0)
        chunks = graph.chunks(max_nodes, max_edges, first, last)
        layers = encoder.num_inference_layers
        bar = tqdm(
            total=layers * len(chunks),
            desc="extract (layer-wise)",
            unit="chunk",
            leave=False,
            disable=not progress,
        )
        try:
            for layer in range(layers):
                source = encoder.inference_source(layer, x)
                out: Tensor | None = None
                for start, end in chunks:
                    rows = encoder.inference_rows(layer, source, graph, start, end)
                    if out is None:
                        out = rows.new_empty((last - first, *rows.shape[1:]))
                    out[start - first : end - first] = rows
                    bar.update(1)
                del source
                if out is None:  # a graph without nodes
                    out = encoder(x, data.edge_index)
                elif exchange is not None and parts > 1:
                    out = exchange(out)
                x = out
        finally:
            bar.close()
    return x
