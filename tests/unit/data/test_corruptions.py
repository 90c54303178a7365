"""The graph sparsification corruptions (Tsitsulin et al. 2023, §4.2), real and generated data."""

from __future__ import annotations

import math
import os
import shutil
from itertools import combinations
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import connected_components
from scipy.stats import chisquare
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.utils import coalesce

from graphssl.data.corruptions import (
    ConnectedSparsify,
    NaiveSparsify,
    spanning_forest,
    undirected_edge_count,
)

REPO = Path(__file__).resolve().parents[3]


def _shared_data_dir() -> Path | None:
    for cand in (os.environ.get("GRAPHSSL_DATA_DIR"), "/work/shared/data", REPO / "../shared/data"):
        if cand and (Path(cand) / "Planetoid").is_dir():
            return Path(cand)
    return None


SHARED = _shared_data_dir()
needs_data = pytest.mark.skipif(
    SHARED is None,
    reason="real Planetoid data not found (set GRAPHSSL_DATA_DIR to the shared/data folder)",
)


def _planetoid(tmp_root: Path, name: str) -> Data:
    from torch_geometric.datasets import Planetoid

    assert SHARED is not None
    root = tmp_root / "Planetoid"
    if not root.exists():  # shared/ is read-only: PyG writes processed/ beside raw/
        shutil.copytree(SHARED / "Planetoid", root)
    return Planetoid(str(root), name)[0]


@pytest.fixture(scope="module")
def planetoid_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("planetoid")


@pytest.fixture(scope="module")
def cora(planetoid_root: Path) -> Data:
    return _planetoid(planetoid_root, "Cora")


@pytest.fixture(scope="module")
def citeseer(planetoid_root: Path) -> Data:
    return _planetoid(planetoid_root, "CiteSeer")


@pytest.fixture(scope="module")
def generated() -> Data:
    """400 nodes: 3 random blocks, 20 isolated nodes, duplicates, one-way edges and self-loops."""
    rng = np.random.default_rng(7)
    edges = []
    for lo, hi, m in ((0, 200, 700), (200, 330, 300), (330, 380, 60)):
        edges.append(rng.integers(lo, hi, size=(2, m)))
    edge_index = torch.from_numpy(np.concatenate(edges, axis=1))
    loops = torch.arange(0, 50).repeat(2, 1)
    dup = edge_index[:, :100]
    edge_index = torch.cat([edge_index, edge_index[:, 300:].flip(0), loops, dup], dim=1)
    return Data(x=torch.randn(400, 3), edge_index=edge_index, y=torch.arange(400) % 3)


def _graph(name: str, request: pytest.FixtureRequest) -> Data:
    if name != "generated" and SHARED is None:
        pytest.skip("real Planetoid data not found (set GRAPHSSL_DATA_DIR to shared/data)")
    return request.getfixturevalue(name)


# ----------------------------------------------------------------------------- reference helpers
def _edge_set(edge_index: Tensor) -> set[tuple[int, int]]:
    return {(min(u, v), max(u, v)) for u, v in edge_index.t().tolist() if u != v}


def _components(edge_index: Tensor, num_nodes: int) -> tuple[int, np.ndarray]:
    row, col = edge_index.numpy()
    adj = sp.coo_matrix((np.ones(row.shape[0]), (row, col)), shape=(num_nodes, num_nodes))
    return connected_components(adj, directed=False)


def _same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    pairs = set(zip(a.tolist(), b.tolist(), strict=True))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


def _check_output(out: Data, data: Data) -> None:
    ei = out.edge_index
    assert ei.dtype == torch.long and ei.shape[0] == 2
    assert out.num_nodes == data.num_nodes
    assert not bool((ei[0] == ei[1]).any()), "self-loops in the output"
    directed = set(map(tuple, ei.t().tolist()))
    assert len(directed) == ei.shape[1], "duplicate edges in the output"
    assert all((v, u) in directed for u, v in directed), "output is not symmetric"
    assert _edge_set(ei) <= _edge_set(data.edge_index), "output has edges not in the input"
    for key in ("x", "y", "train_mask"):
        if key in data:
            assert torch.equal(out[key], data[key])


# ----------------------------------------------------------------------------- counting
def test_undirected_edge_count() -> None:
    ei = torch.tensor([[0, 1, 1, 2, 2, 3, 0], [1, 0, 2, 1, 2, 0, 3]])  # 0-1, 1-2, 0-3 + loop + dup
    assert undirected_edge_count(ei) == 3
    assert undirected_edge_count(torch.empty(2, 0, dtype=torch.long)) == 0


@needs_data
def test_undirected_edge_count_real(cora: Data, citeseer: Data) -> None:
    assert undirected_edge_count(cora.edge_index) == 5278  # Tsitsulin et al. Table 2 basis
    assert undirected_edge_count(citeseer.edge_index) == 4552


# ----------------------------------------------------------------------------- sparsifiers
@pytest.mark.parametrize("graph", ["generated", "cora", "citeseer"])
@pytest.mark.parametrize("t", [1.0, 1.1, 1.9])
def test_naive_hits_target(graph: str, t: float, request: pytest.FixtureRequest) -> None:
    data = _graph(graph, request)
    n, m = data.num_nodes, undirected_edge_count(data.edge_index)
    out = NaiveSparsify(t, seed=3)(data)
    _check_output(out, data)
    expected = round(n * t) if t * n < m else m
    assert undirected_edge_count(out.edge_index) == expected


@pytest.mark.parametrize("graph", ["generated", "cora", "citeseer"])
@pytest.mark.parametrize("t", [1.0, 1.1, 1.9])
def test_connected_hits_target_and_keeps_components(
    graph: str, t: float, request: pytest.FixtureRequest
) -> None:
    data = _graph(graph, request)
    n, m = data.num_nodes, undirected_edge_count(data.edge_index)
    c, labels = _components(data.edge_index, n)
    out = ConnectedSparsify(t, seed=3)(data)
    _check_output(out, data)
    expected = n - c + round(n * (t - 1)) if t * n < m else m
    assert undirected_edge_count(out.edge_index) == expected
    c_out, labels_out = _components(out.edge_index, n)
    assert c_out == c
    assert _same_partition(labels, labels_out)


@needs_data
def test_naive_breaks_components_connected_does_not(cora: Data) -> None:
    c, _ = _components(cora.edge_index, cora.num_nodes)
    c_naive, _ = _components(NaiveSparsify(1.1)(cora).edge_index, cora.num_nodes)
    c_conn, _ = _components(ConnectedSparsify(1.1)(cora).edge_index, cora.num_nodes)
    assert c_conn == c == 78
    assert c_naive > c + 100


@pytest.mark.parametrize("cls", [NaiveSparsify, ConnectedSparsify])
def test_seeded_determinism(cls: type, generated: Data) -> None:
    a = cls(1.2, seed=5)(generated).edge_index
    b = cls(1.2, seed=5)(generated).edge_index
    c = cls(1.2, seed=6)(generated).edge_index
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


@pytest.mark.parametrize("cls", [NaiveSparsify, ConnectedSparsify])
def test_result_depends_only_on_edge_set(cls: type, generated: Data) -> None:
    perm = torch.randperm(generated.edge_index.shape[1], generator=torch.Generator().manual_seed(0))
    shuffled = Data(x=generated.x, edge_index=generated.edge_index[:, perm].flip(0))
    assert torch.equal(cls(1.3)(generated).edge_index, cls(1.3)(shuffled).edge_index)


@pytest.mark.parametrize("cls", [NaiveSparsify, ConnectedSparsify])
def test_target_above_density_keeps_original(cls: type, request: pytest.FixtureRequest) -> None:
    data = _graph("cora", request)
    m = undirected_edge_count(data.edge_index)
    for t in (m / data.num_nodes, 10.0):
        out = cls(t)(data)
        # Cora's edge_index is symmetric and loop-free but sorted by target: compare coalesced.
        assert torch.equal(out.edge_index, coalesce(data.edge_index, num_nodes=data.num_nodes))


def test_input_is_not_modified(generated: Data) -> None:
    before = generated.edge_index.clone()
    ConnectedSparsify(1.2)(generated)
    assert torch.equal(generated.edge_index, before)


def test_edge_attributes_dropped_with_warning_and_nodes_kept() -> None:
    ei = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
    data = Data(edge_index=ei, edge_attr=torch.randn(6, 2), edge_weight=torch.rand(6), num_nodes=6)
    with pytest.warns(
        UserWarning, match=r"dropping edge attributes \['edge_attr', 'edge_weight'\]"
    ):
        out = NaiveSparsify(0.34)(data)  # round(6 · 0.34) = 2 of 3 edges
    assert "edge_attr" not in out and "edge_weight" not in out
    assert out.num_nodes == 6
    assert undirected_edge_count(out.edge_index) == 2


@pytest.mark.parametrize(
    ("cls", "value"),
    [
        (NaiveSparsify, 0.0),
        (NaiveSparsify, -1.0),
        (NaiveSparsify, math.nan),
        (ConnectedSparsify, 0.99),
        (ConnectedSparsify, math.inf),
    ],
)
def test_bad_avg_degree(cls: type, value: float) -> None:
    with pytest.raises(ValueError, match=rf"{cls.__name__}: avg_degree .* got {value!r}"):
        cls(value)


def test_out_of_range_edge_index() -> None:
    data = Data(edge_index=torch.tensor([[0, 5], [5, 0]]), num_nodes=3)
    with pytest.raises(ValueError, match="refers to node 5 but num_nodes is 3"):
        NaiveSparsify(1.0)(data)


# ----------------------------------------------------------------------------- spanning forest
@pytest.mark.parametrize("graph", ["generated", "cora", "citeseer"])
def test_spanning_forest(graph: str, request: pytest.FixtureRequest) -> None:
    data = _graph(graph, request)
    n = data.num_nodes
    c, labels = _components(data.edge_index, n)
    forest = spanning_forest(data.edge_index, n, torch.Generator().manual_seed(0))
    assert forest.shape == (2, n - c)
    assert bool((forest[0] < forest[1]).all())
    assert _edge_set(forest) <= _edge_set(data.edge_index)
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from(forest.t().tolist())
    assert nx.is_forest(g)
    assert _same_partition(labels, _components(forest, n)[1])


def test_spanning_forest_is_uniform() -> None:
    """K4 minus one edge has 8 spanning trees; Wilson's algorithm draws each with prob. 1/8."""
    edges = [(0, 1), (0, 2), (0, 3), (1, 2), (2, 3)]
    ei = torch.tensor(edges).t()
    trees = [
        frozenset(s)
        for s in combinations(edges, 3)
        if nx.is_tree(nx.Graph(list(s))) and len(nx.Graph(list(s))) == 4
    ]
    assert len(trees) == 8
    gen = torch.Generator().manual_seed(0)
    counts = dict.fromkeys(trees, 0)
    draws = 1600
    for _ in range(draws):
        tree = frozenset(map(tuple, spanning_forest(ei, 4, gen).t().tolist()))
        counts[tree] += 1
    assert sum(counts.values()) == draws
    assert chisquare(list(counts.values())).pvalue > 1e-3
