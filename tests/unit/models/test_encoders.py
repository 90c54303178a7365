"""Tests of the encoders' layer trimming on ``NeighborLoader`` batches."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data

from graphssl.data.sampler import make_neighbor_loader
from graphssl.models.encoders import (
    GATEncoder,
    GCNEncoder,
    GINEncoder,
    MLPEncoder,
    SAGEEncoder,
    seed_embeddings,
    trim_hops,
)

ENCODERS = [GCNEncoder, SAGEEncoder, GATEncoder, GINEncoder, MLPEncoder]


def _graph(num_nodes: int = 300, num_edges: int = 2400) -> Data:
    g = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, num_nodes, (2, num_edges), generator=g)
    return Data(x=torch.randn(num_nodes, 5, generator=g), edge_index=edge_index)


@pytest.mark.parametrize("cls", ENCODERS)
@pytest.mark.parametrize(
    ("num_layers", "fanouts"),
    [(2, [4, 3]), (2, [4, 3, 2]), (3, [3, 2, 2]), (3, [3, 2]), (1, [-1])],
)
def test_trimmed_seed_rows_equal_untrimmed(cls: type, num_layers: int, fanouts: list[int]) -> None:
    # More hops than layers, as many, and fewer (no trimming then): seed rows never change.
    torch.manual_seed(0)
    encoder = cls(5, 8, num_layers=num_layers).eval()
    data = _graph()
    graphs = [data, GCNEncoder(5, 8).prepare(data)] if cls is GCNEncoder else [data]
    for graph in graphs:
        for batch in make_neighbor_loader(graph, fanouts, batch_size=40):
            weight = getattr(batch, "edge_weight", None)
            with torch.no_grad():
                full = encoder(batch.x, batch.edge_index, weight)[: batch.batch_size]
                trimmed = encoder(
                    batch.x,
                    batch.edge_index,
                    weight,
                    batch.num_sampled_nodes,
                    batch.num_sampled_edges,
                )
                seeds = seed_embeddings(encoder, batch)
            assert trimmed.size(0) <= batch.num_nodes
            assert seeds.shape == full.shape
            torch.testing.assert_close(trimmed[: batch.batch_size], full, atol=1e-5, rtol=0)
            torch.testing.assert_close(seeds, full, atol=1e-5, rtol=0)


@pytest.mark.parametrize("cls", [GCNEncoder, SAGEEncoder, GATEncoder, GINEncoder])
def test_trimmed_output_is_the_seeds_alone(cls: type) -> None:
    encoder = cls(5, 8, num_layers=2)
    batch = next(iter(make_neighbor_loader(_graph(), [3, 3], batch_size=30)))
    out = encoder(batch.x, batch.edge_index, None, batch.num_sampled_nodes, batch.num_sampled_edges)
    assert out.shape == (30, 8)  # the last layer computes the seed rows only


@pytest.mark.parametrize("cls", [SAGEEncoder, GATEncoder, GINEncoder])
def test_first_layer_skips_the_last_hop(cls: type) -> None:
    """Layer 0 of a 2-layer encoder writes the seeds and hop 1 only; hop-2 nodes are read."""
    encoder = cls(5, 8, num_layers=2)
    batch = next(iter(make_neighbor_loader(_graph(), [3, 3], batch_size=30)))
    rows: list[tuple[int, int]] = []
    for conv in encoder.gnn.convs:
        conv.register_forward_hook(
            lambda m, args, out: rows.append((args[0][0].size(0), out.size(0)))
        )
    encoder(batch.x, batch.edge_index, None, batch.num_sampled_nodes, batch.num_sampled_edges)
    n0, n1, n2 = batch.num_sampled_nodes
    assert rows == [(n0 + n1 + n2, n0 + n1), (n0 + n1, n0)]


def test_kept_hop_rows_equal_untrimmed_and_skip_the_edgeless_hop() -> None:
    """``output_hops=1`` keeps the rows within one hop of the seeds, each equal to the untrimmed
    forward; SAGE's first layer then runs its messages only for the rows that have in-edges and
    computes the last hop's rows (no sampled in-edges) in closed form."""
    torch.manual_seed(0)
    encoder = SAGEEncoder(5, 8, num_layers=2).eval()
    batch = next(iter(make_neighbor_loader(_graph(), [3, 3], batch_size=30)))
    n0, n1, n2 = batch.num_sampled_nodes
    targets: list[int] = []
    for conv in encoder.gnn.convs:
        conv.register_forward_hook(lambda m, args, out: targets.append(out.size(0)))
    with torch.no_grad():
        kept = encoder(
            batch.x,
            batch.edge_index,
            None,
            batch.num_sampled_nodes,
            batch.num_sampled_edges,
            output_hops=1,
        )
        full = encoder(batch.x, batch.edge_index)
    assert kept.shape == (n0 + n1, 8)
    torch.testing.assert_close(kept, full[: n0 + n1], atol=1e-5, rtol=0)
    targets.clear()
    with torch.no_grad():
        encoder(
            batch.x, batch.edge_index, None, batch.num_sampled_nodes, batch.num_sampled_edges, 1
        )
    assert targets == [n0 + n1, n0 + n1]  # the n2 edgeless rows of layer 0 skipped the conv
    assert n2 > 0


def test_trim_hops_checks_the_counts() -> None:
    x, edge_index = torch.zeros(6, 1), torch.zeros(2, 5, dtype=torch.long)
    assert trim_hops(2, x, edge_index, None, None) is None
    assert trim_hops(2, x, edge_index, [2, 3, 1], [3, 2]) == ([2, 3, 1], [3, 2])
    assert trim_hops(1, x, edge_index, [2, 3, 1], [3, 2]) == ([2, 3], [3])
    assert trim_hops(3, x, edge_index, [2, 3, 1], [3, 2]) is None  # fewer hops than layers
    with pytest.raises(ValueError, match="needs both"):
        trim_hops(2, x, edge_index, [2, 3, 1], None)
    with pytest.raises(ValueError, match="do not describe this graph"):
        trim_hops(2, x, edge_index, [2, 3, 2], [3, 2])


def test_seed_embeddings_ignores_stale_counts() -> None:
    # An augmentation that removed edges without updating the counts: run untrimmed.
    torch.manual_seed(0)
    encoder = SAGEEncoder(5, 8, num_layers=2).eval()
    batch = next(iter(make_neighbor_loader(_graph(), [3, 3], batch_size=30)))
    batch.edge_index = batch.edge_index[:, 5:]
    with torch.no_grad():
        expected = encoder(batch.x, batch.edge_index)[:30]
        torch.testing.assert_close(seed_embeddings(encoder, batch), expected)
    assert encoder.num_hops == 2 and MLPEncoder(5, 8).num_hops == 0
