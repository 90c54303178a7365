"""The one way to run an encoder on a batch: graphs, mini-batches of graphs, or images."""

from __future__ import annotations

from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.nn import global_add_pool, global_mean_pool

from graphssl.models.encoders import seed_embeddings

__all__ = ["encode"]


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
