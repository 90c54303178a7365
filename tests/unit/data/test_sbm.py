"""The stochastic block model's edges: drawn from the whole matrix for small models, block pair by
block pair above ``DENSE_SBM_NODES``, with the same distribution and no ``n x n`` matrix."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from torch_geometric.utils import is_undirected, to_undirected

from graphssl.data import node
from graphssl.data.node import SBMDataModule, _distinct_pairs, sparse_sbm_edges


def test_small_models_draw_from_the_whole_matrix() -> None:
    """Up to DENSE_SBM_NODES the edges are one Bernoulli draw per cell of the n x n matrix."""
    sbm = SBMDataModule(num_blocks=3, block_size=20, p_in=0.3, p_out=0.05, seed=4)
    gen = torch.Generator().manual_seed(4)
    y = torch.arange(3).repeat_interleave(20)
    prob = torch.where(y.view(-1, 1) == y.view(1, -1), 0.3, 0.05)
    upper = torch.triu(torch.rand(60, 60, generator=gen) < prob, diagonal=1)
    assert torch.equal(sbm.data.edge_index, to_undirected(upper.nonzero().t(), num_nodes=60))


@pytest.mark.parametrize(("rows", "cols", "count", "within"), [(6, 6, 3, True), (4, 5, 4, False)])
def test_distinct_pairs_are_uniform_over_the_grid(rows, cols, count, within) -> None:
    gen = torch.Generator().manual_seed(0)
    draws, seen = 3000, Counter()
    for _ in range(draws):
        i, j = _distinct_pairs(rows, cols, count, within, gen)
        cells = list(zip(i.tolist(), j.tolist(), strict=True))
        assert len(set(cells)) == count  # distinct
        assert all(0 <= a < rows and 0 <= b < cols and (a < b or not within) for a, b in cells)
        seen.update(cells)
    grid = rows * (rows - 1) // 2 if within else rows * cols
    assert len(seen) == grid
    expected = draws * count / grid
    for hits in seen.values():  # binomial around the expectation: within 5 standard deviations
        assert abs(hits - expected) < 5 * math.sqrt(expected)


def test_a_draw_of_most_of_the_grid_takes_it_whole() -> None:
    gen = torch.Generator().manual_seed(1)
    i, j = _distinct_pairs(6, 6, 14, True, gen)  # 14 of the 15 cells above the diagonal
    assert len(set(zip(i.tolist(), j.tolist(), strict=True))) == 14 and bool((i < j).all())


def test_block_pairs_get_their_expected_edges() -> None:
    sizes, p_in, p_out = [300, 200, 100], 0.05, 0.005
    edges = sparse_sbm_edges(sizes, p_in, p_out, torch.Generator().manual_seed(2))
    block = torch.arange(3).repeat_interleave(torch.tensor(sizes))
    assert bool((edges[0] < edges[1]).all())  # each edge once, no self-loops
    assert torch.unique(edges[0] * 600 + edges[1]).numel() == edges.size(1)
    pairs = Counter(zip(block[edges[0]].tolist(), block[edges[1]].tolist(), strict=True))
    for (a, b), got in pairs.items():
        assert a <= b
        cells = sizes[a] * (sizes[a] - 1) // 2 if a == b else sizes[a] * sizes[b]
        p = p_in if a == b else p_out
        mean, sd = cells * p, math.sqrt(cells * p * (1 - p))
        assert abs(got - mean) < 5 * sd, ((a, b), got, mean)
    assert len(pairs) == 6


def test_large_models_hold_no_n_by_n_matrix(monkeypatch, largest_tensor) -> None:
    monkeypatch.setattr(node, "DENSE_SBM_NODES", 1000)
    sbm = SBMDataModule(num_blocks=2, block_size=1500, p_in=0.004, p_out=0.0004, seed=0)
    with largest_tensor() as seen:
        data = sbm.load()
    assert data.num_nodes == 3000 and is_undirected(data.edge_index)
    assert seen.numel < 3000 * 3000 / 100  # the edges' size, not the matrix's
    again = SBMDataModule(num_blocks=2, block_size=1500, p_in=0.004, p_out=0.0004, seed=0)
    assert torch.equal(again.load().edge_index, data.edge_index)  # seeded
    # the classes still show in the edges: most of them stay inside a block
    y = data.y
    assert (y[data.edge_index[0]] == y[data.edge_index[1]]).float().mean() > 0.8
