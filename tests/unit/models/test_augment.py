"""Graph augmentations: seeded determinism, node count kept, probabilities respected, and every
YAML of the ``conf/augment`` group instantiates."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from graphssl.models.augment import (
    Compose,
    DropEdge,
    DropNodes,
    GraphAugment,
    MaskFeatures,
    Subgraph,
    edge_and_feature,
)
from graphssl.tasks.components import resolve_config

CONF = Path(__file__).resolve().parents[3] / "conf"
AUGMENTS = sorted(p.stem for p in (CONF / "augment").glob("*.yaml"))


def graph(n: int = 400, avg_degree: float = 10.0, f: int = 64, seed: int = 0) -> Data:
    """A random undirected graph with about ``n * avg_degree`` directed edges."""
    torch.manual_seed(seed)
    edge_index = to_undirected(torch.randint(n, (2, int(n * avg_degree / 2))), num_nodes=n)
    return Data(
        x=torch.rand(n, f) + 0.1,
        edge_index=edge_index,
        edge_weight=torch.rand(edge_index.size(1)),
        num_nodes=n,
    )


ALL: list[GraphAugment] = [
    DropEdge(0.3),
    MaskFeatures(0.3),
    DropNodes(0.2),
    Subgraph(0.7),
    edge_and_feature(0.2, 0.3),
]


@pytest.mark.parametrize("aug", ALL, ids=repr)
def test_seeded_determinism_and_node_count(aug: GraphAugment) -> None:
    data = graph()
    x0, e0 = data.x.clone(), data.edge_index.clone()

    def once(seed: int) -> Data:
        torch.manual_seed(seed)
        return aug(data)

    a, b, c = once(1), once(1), once(2)
    assert torch.equal(a.x, b.x) and torch.equal(a.edge_index, b.edge_index)
    assert not (torch.equal(a.x, c.x) and torch.equal(a.edge_index, c.edge_index))
    assert a.num_nodes == data.num_nodes and a.x.shape == data.x.shape
    assert a.edge_weight is None or a.edge_weight.numel() == a.edge_index.size(1)
    # the input is never modified
    assert torch.equal(data.x, x0) and torch.equal(data.edge_index, e0)


def test_drop_edge_probability() -> None:
    data = graph(n=1000, avg_degree=20)
    torch.manual_seed(0)
    kept = torch.tensor([DropEdge(0.3)(data).edge_index.size(1) for _ in range(20)]).float()
    frac = kept.mean().item() / data.edge_index.size(1)
    assert abs(frac - 0.7) < 0.01, frac


def test_mask_features_probability_by_column() -> None:
    data = graph(n=50, f=2000)
    torch.manual_seed(0)
    x = MaskFeatures(0.3)(data).x
    zero_cols = (x == 0).all(dim=0)
    assert ((x == 0).any(dim=0) == zero_cols).all(), "whole columns are masked"
    assert abs(zero_cols.float().mean().item() - 0.3) < 0.03


def test_drop_nodes_probability_and_edges() -> None:
    data = graph(n=3000, avg_degree=8, f=4)
    torch.manual_seed(0)
    out = DropNodes(0.2)(data)
    dropped = (out.x == 0).all(dim=1)
    assert abs(dropped.float().mean().item() - 0.2) < 0.02
    # no edge touches a dropped node, and every edge between kept nodes survives
    assert not dropped[out.edge_index].any()
    keep_both = ~dropped[data.edge_index[0]] & ~dropped[data.edge_index[1]]
    assert out.edge_index.size(1) == int(keep_both.sum())
    assert torch.equal(out.edge_weight, data.edge_weight[keep_both])


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.8, 1.0])
def test_subgraph_keeps_exact_count_and_isolates_the_rest(keep: float) -> None:
    data = graph(n=300, avg_degree=6)
    torch.manual_seed(0)
    aug = Subgraph(keep)
    mask = aug.sample_nodes(data.edge_index, data.num_nodes)
    assert int(mask.sum()) == round(keep * data.num_nodes)
    torch.manual_seed(0)
    out = aug(data)
    if keep < 1.0:
        assert torch.equal((out.x != 0).any(dim=1), mask)
        assert mask[out.edge_index].all()
    else:
        assert torch.equal(out.edge_index, data.edge_index)


def test_subgraph_grows_connected_sets_and_restarts_across_components() -> None:
    # two disjoint paths of 10 nodes: keeping 5 nodes from one path gives a contiguous run
    path = torch.stack([torch.arange(9), torch.arange(1, 10)])
    edge_index = to_undirected(torch.cat([path, path + 10], dim=1))
    torch.manual_seed(3)
    mask = Subgraph(0.25).sample_nodes(edge_index, 20)
    kept = mask.nonzero().view(-1)
    assert kept.numel() == 5
    assert int(kept.max() - kept.min()) == 4, kept.tolist()  # one contiguous run
    # keeping 15 nodes must exhaust one path and restart in the other
    mask = Subgraph(0.75).sample_nodes(edge_index, 20)
    assert int(mask.sum()) == 15 and mask[:10].any() and mask[10:].any()


def test_invalid_probabilities_raise() -> None:
    with pytest.raises(ValueError, match="probability"):
        DropEdge(1.0)
    with pytest.raises(ValueError, match="keep fraction"):
        Subgraph(0.0)


@pytest.mark.parametrize("name", AUGMENTS)
def test_augment_group_instantiates(name: str) -> None:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = resolve_config(compose(config_name="train", overrides=[f"augment={name}"]))
    aug = instantiate(cfg.augment)
    assert isinstance(aug, GraphAugment | Compose)
    data = graph(n=50)
    out = aug(data)
    assert out.num_nodes == 50 and out.x.shape == data.x.shape


def test_edge_removal_keeps_sampled_hop_counts() -> None:
    from graphssl.data.sampler import make_neighbor_loader
    from graphssl.models.augment import DropEdge, DropNodes

    g = torch.Generator().manual_seed(0)
    graph = Data(
        x=torch.randn(200, 3, generator=g),
        edge_index=torch.randint(0, 200, (2, 1600), generator=g),
    )
    batch = next(iter(make_neighbor_loader(graph, [4, 3], batch_size=20)))
    torch.manual_seed(0)
    for augment in (DropEdge(0.5), DropNodes(0.3)):
        view = augment(batch)
        counts = view.num_sampled_edges
        assert sum(counts) == view.edge_index.size(1) < batch.edge_index.size(1)
        # hop h's edges target hop h - 1's nodes: the recount splits the kept edges right
        first_hop = view.edge_index[:, : counts[0]]
        assert bool((first_hop[1] < batch.batch_size).all())
        assert bool((view.edge_index[1, counts[0] :] >= batch.batch_size).all())
