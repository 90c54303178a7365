"""Tests of graphssl's pure-PyTorch neighbour sampler and ``make_neighbor_loader``."""

from __future__ import annotations

import pytest
import torch
import torch_geometric.typing
from torch_geometric.data import Data, HeteroData

from graphssl.data.sampler import (
    TorchNeighborSampler,
    make_neighbor_loader,
    validate_num_neighbors,
)


def _random_graph(num_nodes: int = 300, num_edges: int = 3000, seed: int = 0) -> Data:
    """A directed random graph with skewed degrees, a few isolated nodes and edge attributes."""
    g = torch.Generator().manual_seed(seed)
    # Squaring uniforms concentrates edges on low ids: some nodes get high in-degree.
    dst = (torch.rand(num_edges, generator=g) ** 2 * (num_nodes - 5)).long()
    src = torch.randint(0, num_nodes - 5, (num_edges,), generator=g)
    keep = src != dst
    edge_index = torch.stack([src[keep], dst[keep]])
    edge_index = torch.unique(edge_index, dim=1)  # no multi-edges
    edge_index = edge_index[:, torch.randperm(edge_index.size(1), generator=g)]  # unsorted
    e = edge_index.size(1)
    return Data(
        x=torch.randn(num_nodes, 4, generator=g),
        edge_index=edge_index,
        edge_attr=torch.arange(e),
        edge_weight=torch.rand(e, generator=g),
        num_nodes=num_nodes,
    )


def _in_neighbors(data: Data) -> list[set[int]]:
    out: list[set[int]] = [set() for _ in range(data.num_nodes)]
    for s, d in data.edge_index.t().tolist():
        out[d].add(s)
    return out


def _hop_edges(batch: Data, hop: int) -> torch.Tensor:
    start = sum(batch.num_sampled_edges[:hop])
    return batch.edge_index[:, start : start + batch.num_sampled_edges[hop]]


def test_loader_uses_torch_sampler_without_compiled_backends(monkeypatch) -> None:
    monkeypatch.setattr(torch_geometric.typing, "WITH_PYG_LIB", False)
    monkeypatch.setattr(torch_geometric.typing, "WITH_TORCH_SPARSE", False)
    loader = make_neighbor_loader(_random_graph(), [2], batch_size=64)
    assert isinstance(loader.node_sampler, TorchNeighborSampler)


@pytest.mark.parametrize("fanouts", [[3, 2], [1, 1, 1], [5]])
def test_fanout_respected_without_replacement(fanouts: list[int]) -> None:
    data = _random_graph()
    nbrs = _in_neighbors(data)
    for batch in make_neighbor_loader(data, fanouts, batch_size=64):
        assert batch.num_sampled_nodes[0] == batch.batch_size
        assert len(batch.num_sampled_edges) == len(fanouts)
        first = 0
        for hop, k in enumerate(fanouts):
            n_frontier = batch.num_sampled_nodes[hop]
            frontier = range(first, first + n_frontier)
            first += n_frontier
            src, dst = batch.n_id[_hop_edges(batch, hop)].tolist()
            per_target: dict[int, list[int]] = {}
            for s, d in zip(src, dst, strict=True):
                per_target.setdefault(d, []).append(s)
            targets = {int(batch.n_id[i]) for i in frontier}
            assert set(per_target) <= targets  # only frontier nodes are expanded at this hop
            for v in targets:
                got = per_target.get(v, [])
                assert len(got) == len(set(got))  # without replacement
                assert set(got) <= nbrs[v]  # real in-neighbours
                assert len(got) == min(k, len(nbrs[v]))  # fanout respected, and filled


def test_all_neighbours_with_minus_one() -> None:
    data = _random_graph()
    nbrs = _in_neighbors(data)
    seen = 0
    for batch in make_neighbor_loader(data, [-1, -1], batch_size=50):
        seeds = batch.n_id[: batch.batch_size].tolist()
        assert seeds == list(range(seen, seen + batch.batch_size))  # seeds first, in order
        seen += batch.batch_size
        src, dst = batch.n_id[_hop_edges(batch, 0)].tolist()
        per_target: dict[int, set[int]] = {v: set() for v in seeds}
        for s, d in zip(src, dst, strict=True):
            per_target[d].add(s)
        assert per_target == {v: nbrs[v] for v in seeds}
        # two hops of all neighbours reach exactly the 2-hop in-neighbourhood
        hop1 = set().union(*(nbrs[v] for v in seeds))
        hop2 = set().union(*(nbrs[v] for v in hop1)) if hop1 else set()
        assert set(batch.n_id.tolist()) == set(seeds) | hop1 | hop2
        assert batch.n_id.unique().numel() == batch.n_id.numel()
    assert seen == data.num_nodes


def test_deterministic_given_seed() -> None:
    data = _random_graph()

    def run(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        loader = make_neighbor_loader(data, [4, 3], batch_size=70, shuffle=True, seed=seed)
        return [(b.n_id, b.edge_index) for b in loader]

    a, b, c = run(7), run(7), run(8)
    assert all(
        torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(a, b, strict=True)
    )
    assert any(
        x[0].shape != y[0].shape or not torch.equal(x[0], y[0]) for x, y in zip(a, c, strict=True)
    )


def test_sampler_reset_generator_repeats_draws() -> None:
    data = _random_graph()
    sampler = TorchNeighborSampler(data, [2, 2], seed=3)
    seeds = torch.arange(40)
    first = sampler._sample(seeds)
    sampler.reset_generator()
    again = sampler._sample(seeds)
    assert torch.equal(first.node, again.node) and torch.equal(first.edge, again.edge)


def test_edge_ids_carry_edge_attributes() -> None:
    data = _random_graph()
    for batch in make_neighbor_loader(data, [3, -1], batch_size=64):
        # edge_attr holds each edge's original position: the sampled edges are those edges
        assert torch.equal(batch.e_id, batch.edge_attr)
        assert torch.equal(batch.n_id[batch.edge_index], data.edge_index[:, batch.edge_attr])
        assert torch.equal(batch.edge_weight, data.edge_weight[batch.edge_attr])


def test_duplicate_seeds_and_subset_input_nodes() -> None:
    data = _random_graph()
    sampler = TorchNeighborSampler(data, [-1], seed=0)
    out = sampler._sample(torch.tensor([5, 9, 5]))
    assert out.node[:3].tolist() == [5, 9, 5]
    assert out.num_sampled_nodes[0] == 3
    assert out.node[3:].unique().numel() == out.node.numel() - 3
    assert 2 not in out.col.tolist()  # the repeated seed is expanded at its first position

    seeds = torch.tensor([10, 3, 250])
    batch = next(iter(make_neighbor_loader(data, [2], batch_size=8, input_nodes=seeds)))
    assert batch.n_id[: batch.batch_size].tolist() == [10, 3, 250]


def test_isolated_and_empty_hops() -> None:
    data = _random_graph()
    isolated = torch.arange(data.num_nodes - 5, data.num_nodes)
    out = TorchNeighborSampler(data, [-1, 0, 2], seed=0)._sample(isolated)
    assert out.node.tolist() == isolated.tolist()
    assert out.num_sampled_nodes == [5, 0, 0, 0]
    assert out.num_sampled_edges == [0, 0, 0]
    assert out.row.numel() == out.col.numel() == out.edge.numel() == 0


@pytest.mark.parametrize(
    ("bad", "exc", "match"),
    [
        ([], ValueError, "at least one hop"),
        ([10, -2], ValueError, r"num_neighbors\[1\] must be >= -1"),
        ([10, 2.5], TypeError, r"num_neighbors\[1\] must be an int"),
        ([True], TypeError, "got bool"),
        (10, TypeError, "list of ints"),
        ("10", TypeError, "list of ints"),
        (None, TypeError, "list of ints"),
    ],
)
def test_bad_num_neighbors(bad: object, exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        make_neighbor_loader(_random_graph(), bad, batch_size=8)  # type: ignore[arg-type]


def test_num_neighbors_normalised_and_other_errors() -> None:
    import numpy as np

    assert validate_num_neighbors((np.int64(3), -1, 0)) == [3, -1, 0]
    data = _random_graph()
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        make_neighbor_loader(data, [2], batch_size=0)
    with pytest.raises(ValueError, match="induced"):
        TorchNeighborSampler(data, [2], subgraph_type="induced")
    with pytest.raises(TypeError, match="homogeneous"):
        TorchNeighborSampler(HeteroData(), [2])  # type: ignore[arg-type]


def _hub_graph() -> Data:
    """Nodes 0-9 with in-degrees 1..10 (hub 9 also gets 300 more), sources among 10-399."""
    g = torch.Generator().manual_seed(1)
    dst = torch.cat([torch.full((d,), d - 1) for d in range(1, 11)] + [torch.full((300,), 9)])
    src = 10 + torch.randperm(390, generator=g).repeat(2)[: dst.numel()]
    edge_index = torch.stack([src, dst])
    edge_index = edge_index[:, torch.randperm(edge_index.size(1), generator=g)]
    return Data(x=torch.randn(400, 2, generator=g), edge_index=edge_index, num_nodes=400)


@pytest.mark.parametrize("k", [1, 2, 5, 9, 10, 15])
def test_without_replacement_and_fanout_bounds_around_the_degree(k: int) -> None:
    # Degrees 1..10 and 310 around every k: below k (take all), k itself, k + 1 (Floyd's
    # hardest case: one node left out) and far above it.
    data = _hub_graph()
    nbrs = _in_neighbors(data)
    sampler = TorchNeighborSampler(data, [k], seed=k)
    seeds = torch.arange(10)
    for _ in range(20):
        out = sampler._sample(seeds)
        assert out.num_sampled_edges == [sum(min(k, len(nbrs[v])) for v in range(10))]
        assert out.node[:10].tolist() == seeds.tolist()
        assert out.node.unique().numel() == out.node.numel()
        src, dst = out.node[out.row], out.node[out.col]
        for v in range(10):
            got = src[dst == v].tolist()
            assert len(got) == len(set(got)) == min(k, len(nbrs[v]))
            assert set(got) <= nbrs[v]
        # edge ids point at CSC-sorted edges whose endpoints are the sampled ones
        assert torch.equal(sampler.row[out.edge], src)
        assert torch.equal(torch.searchsorted(sampler.colptr, out.edge, right=True) - 1, dst)


def test_floyd_sample_is_uniform_over_subsets() -> None:
    from itertools import combinations

    from graphssl.data.sampler import _floyd_sample

    deg, k, draws = 5, 2, 20_000
    g = torch.Generator().manual_seed(0)
    offsets = _floyd_sample(torch.full((draws,), deg), k, g)  # (k, draws)
    assert offsets.shape == (k, draws)
    assert bool((offsets >= 0).all() and (offsets < deg).all())
    assert bool((offsets[0] != offsets[1]).all())
    pairs = (offsets.min(0).values * deg + offsets.max(0).values).tolist()
    counts = {a * deg + b: 0 for a, b in combinations(range(deg), k)}
    for p in pairs:
        counts[p] += 1
    expected = draws / len(counts)  # 10 subsets, 2000 each
    assert all(abs(c - expected) < 0.1 * expected for c in counts.values()), counts


def test_loader_epochs_reshuffle_and_resume() -> None:
    from graphssl.data.sampler import set_loader_epoch

    data = _random_graph()

    def epoch_batches(loader, epoch: int) -> list[torch.Tensor]:
        set_loader_epoch(loader, epoch)
        return [torch.cat([b.n_id, b.edge_index.view(-1)]) for b in loader]

    kept = make_neighbor_loader(data, [3, 2], batch_size=64, shuffle=True, seed=5)
    run = [epoch_batches(kept, e) for e in range(3)]
    # epoch 0 is what a fresh loader gives; later epochs reshuffle and resample
    fresh = [
        torch.cat([b.n_id, b.edge_index.view(-1)])
        for b in make_neighbor_loader(data, [3, 2], batch_size=64, shuffle=True, seed=5)
    ]
    assert all(torch.equal(a, b) for a, b in zip(run[0], fresh, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(run[0], run[1], strict=True))
    # a loader built anew and set to epoch 2 (a resumed run) repeats epoch 2
    resumed = make_neighbor_loader(data, [3, 2], batch_size=64, shuffle=True, seed=5)
    again = epoch_batches(resumed, 2)
    assert all(torch.equal(a, b) for a, b in zip(run[2], again, strict=True))
    with pytest.raises(ValueError, match="make_neighbor_loader"):
        set_loader_epoch(torch.utils.data.DataLoader([1, 2]), 0)  # type: ignore[arg-type]
