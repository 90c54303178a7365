"""Tests of the vectorised random walker and the gensim skip-gram wrapper (DeepWalk/node2vec)."""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import torch
from torch import Tensor
from torch_geometric.data import Data

from graphssl.models.random_walk import random_walks, skipgram_embeddings, skipgram_fit

REPO = Path(__file__).resolve().parents[3]


def _shared_data_dir() -> Path | None:
    for cand in (os.environ.get("GRAPHSSL_DATA_DIR"), "/work/shared/data", REPO / "../shared/data"):
        if cand and (Path(cand) / "Planetoid").is_dir():
            return Path(cand)
    return None


SHARED = _shared_data_dir()


@pytest.fixture(scope="module")
def cora(tmp_path_factory: pytest.TempPathFactory) -> Data:
    if SHARED is None:
        pytest.skip(
            "real Planetoid data not found (set GRAPHSSL_DATA_DIR to the shared/data folder)"
        )
    from torch_geometric.datasets import Planetoid

    root = tmp_path_factory.mktemp("planetoid") / "Planetoid"
    shutil.copytree(SHARED / "Planetoid", root)  # shared/ is read-only; PyG writes processed/
    return Planetoid(str(root), "Cora")[0]


def _undirected(edges: list[tuple[int, int]] | Tensor) -> Tensor:
    ei = torch.as_tensor(edges, dtype=torch.long)
    ei = ei.t() if ei.shape[0] != 2 else ei
    return torch.cat([ei, ei.flip(0)], dim=1)


def _cycle(n: int) -> Tensor:
    return _undirected([(i, (i + 1) % n) for i in range(n)])


def _karate() -> tuple[Tensor, np.ndarray]:
    g = nx.karate_club_graph()
    return _undirected(list(g.edges())), nx.to_numpy_array(g, nodelist=range(34)) > 0


def _assert_walks_follow_edges(walks: Tensor, edge_index: Tensor, num_nodes: int) -> None:
    edges = set(map(tuple, edge_index.t().tolist()))
    has_out = torch.zeros(num_nodes, dtype=torch.bool)
    has_out[edge_index[0]] = True
    steps = torch.stack([walks[:, :-1].reshape(-1), walks[:, 1:].reshape(-1)], dim=1)
    for u, v in set(map(tuple, steps.tolist())):
        assert (u, v) in edges or (u == v and not has_out[u]), f"step {u}->{v} is not an edge"


# ----------------------------------------------------------------------------- walker
@pytest.mark.parametrize(("p", "q"), [(1.0, 1.0), (0.5, 2.0), (4.0, 0.25)])
def test_walks_follow_edges_on_cora(cora: Data, p: float, q: float) -> None:
    walks = random_walks(
        cora.edge_index, cora.num_nodes, walk_length=12, walks_per_node=2, p=p, q=q
    )
    assert walks.shape == (2 * cora.num_nodes, 12) and walks.dtype == torch.long
    assert torch.equal(walks[:, 0], torch.arange(cora.num_nodes).repeat(2))
    _assert_walks_follow_edges(walks, cora.edge_index, cora.num_nodes)


@pytest.mark.parametrize(("p", "q"), [(1.0, 1.0), (0.5, 2.0)])
def test_dead_ends_and_isolated_nodes_stay(p: float, q: float) -> None:
    # 0-1-2 undirected, 2->3 one way (3 is a dead end), 4 isolated, 5 has a self-loop only.
    ei = torch.cat([_undirected([(0, 1), (1, 2)]), torch.tensor([[2, 5], [3, 5]])], dim=1)
    walks = random_walks(ei, 6, walk_length=15, walks_per_node=20, p=p, q=q, seed=1)
    assert walks.shape == (120, 15)
    _assert_walks_follow_edges(walks, ei, 6)
    for v in (4, 5):
        assert bool((walks[v::6] == v).all())
    reached_3 = (walks == 3).any(dim=1)
    assert bool(reached_3.any())
    for walk in walks[reached_3]:
        first = int((walk == 3).nonzero()[0])
        assert bool((walk[first:] == 3).all())


def test_no_edges_and_length_one() -> None:
    empty = torch.empty(2, 0, dtype=torch.long)
    assert torch.equal(
        random_walks(empty, 3, 4, 2), torch.arange(3).repeat(2)[:, None].repeat(1, 4)
    )
    assert torch.equal(random_walks(_cycle(5), 5, 1, 3), torch.arange(5).repeat(3)[:, None])


@pytest.mark.parametrize(("p", "q"), [(1.0, 1.0), (0.5, 2.0)])
def test_seeded_determinism(p: float, q: float) -> None:
    ei, _ = _karate()
    a = random_walks(ei, 34, 20, 5, p=p, q=q, seed=3)
    b = random_walks(ei, 34, 20, 5, p=p, q=q, seed=3)
    c = random_walks(ei, 34, 20, 5, p=p, q=q, seed=4)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def _transition_tv(walks: Tensor, adj: np.ndarray, p: float, q: float) -> float:
    """Count-weighted total variation between empirical and exact node2vec transitions."""
    n = adj.shape[0]
    w = walks.numpy()
    counts = np.zeros((n, n, n))
    np.add.at(counts, (w[:, :-2].ravel(), w[:, 1:-1].ravel(), w[:, 2:].ravel()), 1)
    total = acc = 0.0
    for prev, cur in zip(*np.nonzero(counts.sum(axis=2)), strict=True):
        cnt = counts[prev, cur]
        weights = np.where(adj[cur], np.where(adj[prev], 1.0, 1.0 / q), 0.0)
        weights[prev] = 1.0 / p
        weights /= weights.sum()
        acc += 0.5 * np.abs(cnt / cnt.sum() - weights).sum() * cnt.sum()
        total += cnt.sum()
    return acc / total


@pytest.mark.parametrize(("p", "q"), [(1.0, 1.0), (0.25, 4.0), (4.0, 0.25), (2.0, 0.5)])
def test_second_order_transitions_match_node2vec(p: float, q: float) -> None:
    """Karate club has all three node2vec cases (return, triangle, outward). With ~280k steps the
    correct sampler is ~0.02 from the exact law; uniform walks are 0.15-0.42 from it."""
    ei, adj = _karate()
    walks = random_walks(ei, 34, walk_length=30, walks_per_node=300, p=p, q=q, seed=1)
    assert _transition_tv(walks, adj, p, q) < 0.04
    if (p, q) != (1.0, 1.0):
        uniform = random_walks(ei, 34, walk_length=30, walks_per_node=300, seed=1)
        assert _transition_tv(uniform, adj, p, q) > 0.1


def test_p_and_q_bias_is_measurable() -> None:
    """On a cycle a step returns with prob. (1/p) / (1/p + 1/q); small q walks go farther."""
    n = 400
    ei = _cycle(n)

    def stats(p: float, q: float) -> tuple[float, float]:
        w = random_walks(ei, n, walk_length=40, walks_per_node=2, p=p, q=q, seed=0)
        returns = (w[:, 2:] == w[:, :-2]).float().mean().item()
        d = (w[:, -1] - w[:, 0]).abs()
        return returns, torch.minimum(d, n - d).float().mean().item()

    ret_high_p, _ = stats(4.0, 1.0)
    ret_low_p, _ = stats(0.25, 1.0)
    assert abs(ret_high_p - 0.2) < 0.02 and abs(ret_low_p - 0.8) < 0.02
    _, far = stats(1.0, 0.25)
    _, near = stats(1.0, 4.0)
    _, uniform = stats(1.0, 1.0)
    # Persistent walk: mean |displacement| after 39 steps ≈ 10 (q = 1/4), 5 (uniform), 2.6 (q = 4).
    assert far > 1.5 * uniform and uniform > 1.5 * near


def test_bad_arguments() -> None:
    ei = _cycle(4)
    with pytest.raises(ValueError, match="walk_length must be >= 1"):
        random_walks(ei, 4, 0, 1)
    with pytest.raises(ValueError, match="walks_per_node must be >= 1"):
        random_walks(ei, 4, 5, 0)
    with pytest.raises(ValueError, match=r"got p=0.0, q=1.0"):
        random_walks(ei, 4, 5, 1, p=0.0)
    with pytest.raises(ValueError, match=r"positive and finite, got p=1.0, q=inf"):
        random_walks(ei, 4, 5, 1, q=float("inf"))
    with pytest.raises(ValueError, match=r"indices in \[0, 3\] but num_nodes is 3"):
        random_walks(ei, 3, 5, 1)
    with pytest.raises(ValueError, match=r"shape \[2, num_edges\]"):
        random_walks(ei.t(), 4, 5, 1)


# ----------------------------------------------------------------------------- skip-gram
def test_skipgram_shape_unseen_rows_and_determinism() -> None:
    walks = random_walks(_cycle(10), 10, 8, 4)
    walks = walks[walks[:, 0] < 5][:, :1]  # only nodes 0..4 occur
    z = skipgram_embeddings(walks, 12, dim=8, window=2, seed=1)
    assert z.shape == (12, 8) and z.dtype == torch.float32
    assert bool((z[5:] == 0).all()) and bool((z[:5].abs().sum(1) > 0).all())
    walks = random_walks(_cycle(10), 10, 8, 4)
    a = skipgram_embeddings(walks, 10, dim=8, window=2, seed=1)
    assert torch.equal(a, skipgram_embeddings(walks, 10, dim=8, window=2, seed=1))
    assert not torch.equal(a, skipgram_embeddings(walks, 10, dim=8, window=2, seed=2))


def test_skipgram_bad_arguments() -> None:
    walks = torch.tensor([[0, 1, 2]])
    with pytest.raises(ValueError, match=r"ids in \[0, 2\] but num_nodes is 2"):
        skipgram_embeddings(walks, 2)
    with pytest.raises(ValueError, match="2-D"):
        skipgram_embeddings(walks[0], 3)
    with pytest.raises(ValueError, match="dim must be >= 1, got 0"):
        skipgram_embeddings(walks, 3, dim=0)


def _two_block_sbm(size: int, p_in: float, p_out: float, seed: int) -> tuple[Tensor, Tensor]:
    rng = np.random.default_rng(seed)
    y = np.repeat([0, 1], size)
    prob = np.where(y[:, None] == y[None, :], p_in, p_out)
    upper = np.triu(rng.random((2 * size, 2 * size)) < prob, k=1)
    return _undirected(torch.from_numpy(np.stack(np.nonzero(upper)))), torch.from_numpy(y)


def test_deepwalk_separates_sbm_communities() -> None:
    from sklearn.linear_model import LogisticRegression

    edge_index, y = _two_block_sbm(100, 0.1, 0.005, seed=0)
    n = y.numel()
    walks = random_walks(edge_index, n, walk_length=40, walks_per_node=10, seed=0)
    z = skipgram_embeddings(walks, n, dim=32, window=5, epochs=2, seed=0).numpy()
    perm = np.random.default_rng(0).permutation(n)
    train, test = perm[: n // 2], perm[n // 2 :]
    probe = LogisticRegression(max_iter=1000).fit(z[train], y[train].numpy())
    assert probe.score(z[test], y[test].numpy()) > 0.9


def test_skipgram_fit_reports_a_falling_loss_per_epoch() -> None:
    edge_index, _ = _two_block_sbm(50, 0.2, 0.01, seed=1)
    walks = random_walks(edge_index, 100, walk_length=20, walks_per_node=5, seed=0)
    vectors, losses = skipgram_fit(walks, 100, dim=16, window=3, epochs=4, seed=0)
    assert len(losses) == 4 and all(math.isfinite(v) and v > 0 for v in losses)
    assert losses[-1] < losses[0]
    assert torch.equal(vectors, skipgram_embeddings(walks, 100, dim=16, window=3, epochs=4, seed=0))
