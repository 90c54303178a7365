"""Graph-level DataModules: TUDataset and MoleculeNet on the real offline files, the generated
set, k-fold cross-validation splits, loaders and errors."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
from torch_geometric.data import Batch

from graphssl.data.base import Split
from graphssl.data.graph import (
    MoleculeNetDataModule,
    SyntheticGraphsDataModule,
    TUDataModule,
    kfold_splits,
    random_graph_splits,
)
from graphssl.data.paths import DatasetNotFoundError

HAS_RDKIT = importlib.util.find_spec("rdkit") is not None
needs_rdkit = pytest.mark.skipif(
    not HAS_RDKIT, reason="MoleculeNet needs RDKit (pip install rdkit, or the 'molecules' extra)"
)


@pytest.fixture(scope="module")
def graph_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One writable cache per module, so each dataset is copied and processed once."""
    return tmp_path_factory.mktemp("graph-cache")


def check_partition(splits: list[Split], n: int) -> None:
    """Every split is disjoint, and every graph is a test graph exactly once."""
    seen = torch.zeros(n, dtype=torch.long)
    for s in splits:
        parts = [set(s.train.tolist()), set(s.val.tolist()), set(s.test.tolist())]
        assert not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2])
        assert len(parts[0]) + len(parts[1]) + len(parts[2]) == n
        seen[s.test] += 1
    assert bool((seen == 1).all())


# ---------------------------------------------------------------------------- TUDataset
# graph counts, classes and default node features from shared/data/README.md §4
TU = [
    ("MUTAG", 188, 2, 7),
    ("PTC_MR", 344, 2, 18),
    ("ENZYMES", 600, 6, 3),
    ("PROTEINS", 1113, 2, 3),
    ("NCI1", 4110, 2, 37),
    ("IMDB-BINARY", 493, 2, None),
]


@pytest.mark.parametrize("name,graphs,classes,feats", TU)
def test_tu_datasets_load(data_dir, graph_cache, name, graphs, classes, feats) -> None:
    dm = TUDataModule(name, data_dir=data_dir, cache_dir=graph_cache)
    dm.setup()
    assert dm.is_graph_level and dm.task == "classification"
    assert dm.num_graphs == graphs and dm.num_classes == classes
    if feats is not None:
        assert dm.num_features == feats
    y = dm.labels
    assert y is not None and y.shape == (graphs,) and y.dtype == torch.long
    assert all(g.x.dtype == torch.float32 for g in dm.graphs[:5])
    splits = dm.splits()
    assert len(splits) == 10
    check_partition(list(splits), graphs)


def test_imdb_binary_cleaned_gets_degree_features(data_dir, graph_cache) -> None:
    dm = TUDataModule("IMDB-BINARY", data_dir=data_dir, cache_dir=graph_cache)
    assert dm.cleaned
    dm.setup()
    assert dm.labels is not None and dm.labels.bincount().tolist() == [261, 232]
    max_deg = max(int(torch.bincount(g.edge_index[0]).max()) for g in dm.graphs)
    assert dm.num_features == max_deg + 1
    for g in dm.graphs[:20]:
        assert torch.equal(g.x.sum(1), torch.ones(g.num_nodes))
        deg = torch.bincount(g.edge_index[0], minlength=g.num_nodes)
        assert torch.equal(g.x.argmax(1), deg)


def test_tu_missing_files_fail_fast(tmp_path, no_network) -> None:
    dm = TUDataModule("MUTAG", data_dir=tmp_path / "nowhere", cache_dir=tmp_path / "cache")
    with pytest.raises(DatasetNotFoundError) as err:
        dm.setup()
    assert no_network == [], "a missing file with downloads off sends no request"
    msg = str(err.value)
    assert "'MUTAG'" in msg and str(tmp_path / "nowhere" / "TUDataset" / "MUTAG") in msg
    assert "raw/MUTAG_A.txt" in msg and "does not download" in msg


def test_tu_unknown_name() -> None:
    with pytest.raises(ValueError, match=r"Could not resolve TUDataset 'COLLAB' among choices"):
        TUDataModule("COLLAB")


def test_tu_fold_index_and_random_split(data_dir, graph_cache) -> None:
    full = TUDataModule("MUTAG", data_dir=data_dir, cache_dir=graph_cache)
    one = TUDataModule("MUTAG", data_dir=data_dir, cache_dir=graph_cache, fold_index=3)
    assert len(one.splits()) == 1 and torch.equal(one.splits()[0].test, full.splits()[3].test)
    with pytest.raises(ValueError, match=r"fold_index must be in \[0, 9\]"):
        TUDataModule("MUTAG", data_dir=data_dir, cache_dir=graph_cache, fold_index=10).setup()
    rnd = TUDataModule(
        "MUTAG", data_dir=data_dir, cache_dir=graph_cache, split="random", num_splits=3
    )
    assert len(rnd.splits()) == 3
    s = rnd.splits()[0]
    assert (len(s.train), len(s.val), len(s.test)) == (150, 19, 19)


# --------------------------------------------------------------------------- k-fold splits
def test_kfold_is_stratified_disjoint_and_seeded() -> None:
    y = torch.tensor([0] * 63 + [1] * 125)[
        torch.randperm(188, generator=torch.Generator().manual_seed(5))
    ]

    def folds(seed: int) -> list[Split]:
        return kfold_splits(188, 10, 0.1, strata=y, generator=torch.Generator().manual_seed(seed))

    a, b, c = folds(0), folds(0), folds(1)
    check_partition(a, 188)
    assert all(torch.equal(s.test, t.test) and torch.equal(s.val, t.val) for s, t in zip(a, b))
    assert any(not torch.equal(s.test, t.test) for s, t in zip(a, c))
    for s in a:
        assert len(s.test) in (18, 19)
        # each class in proportion: 6.3 and 12.5 per fold
        assert int((y[s.test] == 0).sum()) in (6, 7) and int((y[s.test] == 1).sum()) in (12, 13)
        n_train = len(s.train) + len(s.val)
        assert len(s.val) == round(0.1 * n_train)
        assert abs(float(y[s.val].float().mean()) - 125 / 188) < 0.1


def test_kfold_and_random_split_errors() -> None:
    gen = torch.Generator()
    with pytest.raises(ValueError, match=r"num_folds must be in \[2, number of graphs = 5\]"):
        kfold_splits(5, 10, generator=gen)
    with pytest.raises(ValueError, match="val_frac must be in"):
        kfold_splits(50, 5, 1.0, generator=gen)
    with pytest.raises(ValueError, match="split fractions"):
        random_graph_splits(50, 0.9, 0.2, generator=gen)
    with pytest.raises(ValueError, match="split must be 'kfold' or 'random'"):
        SyntheticGraphsDataModule(split="public")  # type: ignore[arg-type]


def test_random_split_without_strata_covers_all() -> None:
    (s,) = random_graph_splits(100, 0.8, 0.1, generator=torch.Generator().manual_seed(0))
    assert (len(s.train), len(s.val), len(s.test)) == (80, 10, 10)
    assert sorted(torch.cat([s.train, s.val, s.test]).tolist()) == list(range(100))


# ------------------------------------------------------------------------------ synthetic
def test_synthetic_graphs_deterministic_and_balanced() -> None:
    a, b, c = (
        SyntheticGraphsDataModule(seed=0),
        SyntheticGraphsDataModule(seed=0),
        SyntheticGraphsDataModule(seed=1),
    )
    for dm in (a, b, c):
        dm.setup()
    assert a.num_graphs == 120 and a.num_classes == 2 and a.num_features == 8
    assert a.labels is not None and a.labels.bincount().tolist() == [60, 60]
    for ga, gb in zip(a.graphs, b.graphs):
        assert torch.equal(ga.x, gb.x) and torch.equal(ga.edge_index, gb.edge_index)
    assert any(ga.num_nodes != gc.num_nodes for ga, gc in zip(a.graphs, c.graphs))
    for g, label in zip(a.graphs, a.labels.tolist()):  # cycles: n edges, trees: n - 1
        assert g.edge_index.size(1) == 2 * (g.num_nodes - label)


def test_loaders_shuffle_seeded_and_eval_in_order() -> None:
    def epoch_orders(seed: int) -> list[list[int]]:
        dm = SyntheticGraphsDataModule(num_graphs=40, batch_size=16, seed=seed)
        dm.setup()
        keys = {g.x.sum().item(): i for i, g in enumerate(dm.graphs)}
        return [
            [keys[g.x.sum().item()] for b in dm.train_dataloader() for g in b.to_data_list()]
            for _ in range(2)
        ]

    first, again = epoch_orders(0), epoch_orders(0)
    assert first == again  # the same seed replays the same epochs
    assert first[0] != first[1]  # each epoch is shuffled anew
    assert sorted(first[0]) == list(range(40))

    dm = SyntheticGraphsDataModule(num_graphs=40, eval_batch_size=16)
    batches = list(dm.eval_dataloader())
    assert [b.num_graphs for b in batches] == [16, 16, 8]
    assert torch.equal(torch.cat([b.y for b in batches]), dm.labels)
    assert isinstance(dm.data, Batch) and dm.data.num_graphs == 40


def test_single_graph_last_batch_is_dropped() -> None:
    dm = SyntheticGraphsDataModule(num_graphs=33, batch_size=16)
    assert [b.num_graphs for b in dm.train_dataloader()] == [16, 16]


# ---------------------------------------------------------------------------- MoleculeNet
def test_moleculenet_without_rdkit_names_the_install(data_dir, graph_cache, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "rdkit", None)  # makes `import rdkit` raise ImportError
    dm = MoleculeNetDataModule("ESOL", data_dir=data_dir, cache_dir=graph_cache)
    with pytest.raises(ImportError, match=r"pip install rdkit.*\.\[molecules\]"):
        dm.setup()


def test_moleculenet_unknown_name() -> None:
    with pytest.raises(ValueError, match="Could not resolve MoleculeNet dataset 'HIV2'"):
        MoleculeNetDataModule("HIV2")


@needs_rdkit
@pytest.mark.parametrize(
    "name,graphs,task,tasks", [("ESOL", 1128, "regression", 1), ("ClinTox", 1480, "multilabel", 2)]
)
def test_moleculenet_loads(data_dir, graph_cache, name, graphs, task, tasks) -> None:
    dm = MoleculeNetDataModule(name, data_dir=data_dir, cache_dir=graph_cache)
    dm.setup()
    assert dm.task == task and dm.num_graphs == graphs and dm.num_tasks == tasks
    assert dm.num_features == 9 and dm.graphs[0].x.dtype == torch.float32
    y = dm.labels
    assert y is not None and y.dtype == torch.float32 and y.size(0) == graphs
    (s,) = dm.splits()
    assert (len(s.train), len(s.val), len(s.test)) == (
        round(0.8 * graphs),
        round(0.1 * graphs),
        graphs - round(0.8 * graphs) - round(0.1 * graphs),
    )
