"""The seeded large-graph generator, at a few thousand nodes."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.utils import is_undirected

from graphssl.data.corruptions import undirected_edge_count
from graphssl.data.synthetic_large import SyntheticLargeDataModule, generate_large_graph

SMALL = {"num_nodes": 3000, "avg_degree": 10.0, "num_classes": 5, "num_features": 8}


def test_size_structure_and_dtypes() -> None:
    data, m = generate_large_graph(**SMALL, homophily=0.9, seed=0)
    assert data.num_nodes == 3000 and data.x.shape == (3000, 8)
    assert data.x.dtype == torch.float32 and data.edge_index.dtype == torch.int64
    assert m == 15000 and data.edge_index.size(1) == 30000  # exactly n * avg_degree / 2
    assert is_undirected(data.edge_index) and undirected_edge_count(data.edge_index) == m
    assert bool((data.edge_index[0] != data.edge_index[1]).all())
    y, ei = data.y, data.edge_index
    homophily = (y[ei[0]] == y[ei[1]]).float().mean().item()
    assert homophily == pytest.approx(0.9 + 0.1 / 5, abs=0.02)
    assert set(y.tolist()) == set(range(5))


def test_features_are_correlated_with_classes() -> None:
    data, _ = generate_large_graph(**SMALL, feature_signal=1.0, seed=0)
    means = torch.stack([data.x[data.y == c].mean(0) for c in range(5)])
    nearest = torch.cdist(data.x, means).argmin(1)
    assert (nearest == data.y).float().mean() > 0.8  # chance is 0.2
    flat, _ = generate_large_graph(**SMALL, feature_signal=0.0, seed=0)
    means = torch.stack([flat.x[flat.y == c].mean(0) for c in range(5)])
    assert (torch.cdist(flat.x, means).argmin(1) == flat.y).float().mean() < 0.4


def test_degree_skew_gives_hubs() -> None:
    flat, _ = generate_large_graph(**SMALL, degree_skew=0.0, seed=0)
    skewed, _ = generate_large_graph(**SMALL, degree_skew=1.5, seed=0)
    deg = lambda d: torch.bincount(d.edge_index[0], minlength=3000).max().item()  # noqa: E731
    assert deg(skewed) > 2 * deg(flat)


def test_seeded_and_split_independent_of_graph(tmp_path) -> None:
    a = SyntheticLargeDataModule(**SMALL, cache_dir=tmp_path, seed=0, graph_seed=7)
    b = SyntheticLargeDataModule(**SMALL, cache_dir=tmp_path, seed=1, graph_seed=7)
    c = SyntheticLargeDataModule(**SMALL, cache=False, seed=0, graph_seed=8)
    assert torch.equal(a.data.edge_index, b.data.edge_index)
    assert torch.equal(a.data.x, b.data.x)
    assert not torch.equal(a.splits()[0].train, b.splits()[0].train)
    assert torch.equal(a.splits()[0].train, c.splits()[0].train)  # same split seed
    assert not torch.equal(a.data.edge_index, c.data.edge_index)
    assert a.splits()[0].train.numel() == 300


def test_cache_is_keyed_by_parameters_and_reused(tmp_path) -> None:
    first = SyntheticLargeDataModule(**SMALL, cache_dir=tmp_path)
    first.setup()
    path = first.cache_file
    assert path.is_file() and path.parent == tmp_path / "synthetic_large"
    second = SyntheticLargeDataModule(**SMALL, cache_dir=tmp_path)
    assert second.cache_file == path
    torch.save(  # a marker proves the second module read the file instead of regenerating
        {
            "x": torch.zeros(3000, 8),
            "edge_index": first.data.edge_index,
            "y": first.data.y,
            "num_undirected_edges": torch.tensor(15000),
        },
        path,
    )
    assert float(second.data.x.abs().sum()) == 0.0
    assert second.graph_stats() == {
        "data/num_nodes": 3000.0,
        "data/num_edges": 15000.0,
        "data/avg_degree": 5.0,
    }
    other = SyntheticLargeDataModule(**{**SMALL, "num_classes": 6}, cache_dir=tmp_path)
    assert other.cache_file != path


def test_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError, match="homophily must be a probability"):
        SyntheticLargeDataModule(homophily=1.5)
    with pytest.raises(ValueError, match="avg_degree must be a positive number"):
        SyntheticLargeDataModule(avg_degree=0)
    with pytest.raises(ValueError, match="at most 6"):
        generate_large_graph(4, 10.0, 2, 2)
