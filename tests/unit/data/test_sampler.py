"""Tests of graphssl's pure-PyTorch neighbour sampler and ``make_neighbor_loader``."""

from __future__ import annotations

import pytest
import torch
import torch_geometric.typing
from torch_geometric.data import Data, HeteroData

from graphssl.data.sampler import (
    SamplerIndex,
    TorchNeighborSampler,
    build_sampler_index,
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


# ---------------------------------------------------------------------------- a given index
def _batches(loader, epochs: int) -> list[tuple[torch.Tensor, ...]]:
    from graphssl.data.sampler import set_loader_epoch

    out = []
    for epoch in range(epochs):
        set_loader_epoch(loader, epoch)
        out += [(b.n_id, b.edge_index, b.e_id, b.edge_attr, b.edge_weight) for b in loader]
    return out


@pytest.mark.parametrize("share_memory", [False, True])
def test_a_given_index_samples_the_batches_of_a_converted_graph(
    monkeypatch: pytest.MonkeyPatch, share_memory: bool
) -> None:
    monkeypatch.setattr(torch_geometric.typing, "WITH_PYG_LIB", False)
    monkeypatch.setattr(torch_geometric.typing, "WITH_TORCH_SPARSE", False)
    data = _random_graph()
    index = build_sampler_index(data, share_memory=share_memory)
    assert index.perm is not None  # the graph's edges are not sorted by target
    assert index.row.is_shared() == share_memory
    converted = make_neighbor_loader(data, [4, 3], batch_size=48, shuffle=True, seed=2)
    given = make_neighbor_loader(data, [4, 3], batch_size=48, shuffle=True, seed=2, index=index)
    sampler = given.node_sampler
    assert sampler.colptr is index.colptr and sampler.row is index.row
    assert sampler.perm is index.perm
    assert sampler.num_nodes == data.num_nodes
    expected, got = _batches(converted, 3), _batches(given, 3)
    assert len(got) == len(expected) == 3 * 7
    for a, b in zip(expected, got, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    # the three epochs differ from each other: the comparison covers resampled batches
    assert not torch.equal(got[0][0], got[7][0])


def test_an_index_that_does_not_fit_the_graph_is_refused() -> None:
    data = _random_graph()
    colptr, row, perm = build_sampler_index(data)
    other = build_sampler_index(_random_graph(num_nodes=200, num_edges=1000))
    with pytest.raises(ValueError, match=r"colptr has shape \(201,\), expected \(301,\)"):
        TorchNeighborSampler(data, [2], index=other)
    with pytest.raises(ValueError, match=rf"holds {row.numel() - 1} source.*{row.numel()} edges"):
        TorchNeighborSampler(data, [2], index=SamplerIndex(colptr, row[:-1], perm))
    short = colptr.clone()
    short[-1] -= 1
    with pytest.raises(ValueError, match=rf"colptr\[-1\]={row.numel() - 1}, expected both"):
        make_neighbor_loader(data, [2], batch_size=8, index=SamplerIndex(short, row, perm))
    with pytest.raises(ValueError, match=r"its perm has shape \(3,\)"):
        TorchNeighborSampler(data, [2], index=SamplerIndex(colptr, row, perm[:3]))
    with pytest.raises(TypeError, match=r"must be a SamplerIndex.*got tuple"):
        TorchNeighborSampler(data, [2], index=(colptr, row, perm))  # type: ignore[arg-type]
    # an index of the right sizes is taken
    assert TorchNeighborSampler(data, [2], index=SamplerIndex(colptr, row, None)).perm is None


def test_datamodule_keeps_one_index_per_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    import copy

    from graphssl.data import sampler as sampler_module
    from graphssl.data.node import InMemoryNodeDataModule

    monkeypatch.setattr(torch_geometric.typing, "WITH_PYG_LIB", False)
    monkeypatch.setattr(torch_geometric.typing, "WITH_TORCH_SPARSE", False)
    built: list[SamplerIndex] = []
    real = sampler_module.build_sampler_index

    def counting(*args, **kwargs) -> SamplerIndex:
        built.append(real(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(sampler_module, "build_sampler_index", counting)
    dm = InMemoryNodeDataModule(_random_graph(), name="random", split="random")
    train = dm.neighbor_loader([3, 2], 32, shuffle=True)
    extract = dm.neighbor_loader([-1, -1], 64, data=dm.data)  # the graph itself, passed
    assert len(built) == 1
    assert train.node_sampler.row is extract.node_sampler.row is built[0].row
    assert dm.sampler_index() is built[0]
    # moved to shared memory in place: the loaders read the same pages
    shared = dm.sampler_index(share_memory=True)
    assert shared is built[0] and train.node_sampler.row.is_shared() and len(built) == 1
    # a prepared copy is another graph: its loader converts it, the kept index stays
    prepared = copy.copy(dm.data)
    own = dm.neighbor_loader([2], 32, data=prepared)
    assert own.node_sampler.row is not built[0].row and dm.sampler_index() is built[0]
    # a replaced edge_index is another graph too
    dm.data.edge_index = dm.data.edge_index.flip(0)
    flipped = dm.neighbor_loader([2], 32)
    assert len(built) == 2 and flipped.node_sampler.row is built[1].row


def test_datamodule_adopts_a_given_index_and_refuses_one_of_another_graph(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from graphssl.data.node import InMemoryNodeDataModule

    monkeypatch.setattr(torch_geometric.typing, "WITH_PYG_LIB", False)
    monkeypatch.setattr(torch_geometric.typing, "WITH_TORCH_SPARSE", False)
    data = _random_graph()
    index = build_sampler_index(data)
    dm = InMemoryNodeDataModule(data, name="random", split="random")
    dm.set_sampler_index(index)
    assert dm.sampler_index() is index
    assert dm.neighbor_loader([2], 16).node_sampler.row is index.row
    small = InMemoryNodeDataModule(_random_graph(num_nodes=50, num_edges=200), name="small")
    with pytest.raises(ValueError, match=r"colptr has shape \(301,\), expected \(51,\)"):
        small.set_sampler_index(index)
