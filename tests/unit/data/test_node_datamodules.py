"""Node-level DataModules on the real offline datasets, their splits and their errors."""

from __future__ import annotations

import shutil
import stat

import pytest
import torch

from graphssl.data.node import (
    ActorDataModule,
    CitationFullDataModule,
    KarateClubDataModule,
    PlanetoidDataModule,
    SBMDataModule,
    WebKBDataModule,
)
from graphssl.data.paths import DatasetNotFoundError


def disjoint(split) -> bool:
    parts = [set(split.train.tolist()), set(split.val.tolist()), set(split.test.tolist())]
    return not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2])


@pytest.mark.parametrize(
    "name,nodes,classes,feats", [("Cora", 2708, 7, 1433), ("CiteSeer", 3327, 6, 3703)]
)
def test_planetoid_public_split(data_dir, tmp_path, name, nodes, classes, feats) -> None:
    dm = PlanetoidDataModule(name, data_dir=data_dir, cache_dir=tmp_path)
    dm.setup()
    assert dm.data.num_nodes == nodes and dm.num_classes == classes
    assert dm.num_features == feats
    (split,) = dm.splits()
    assert (len(split.train), len(split.val), len(split.test)) == (classes * 20, 500, 1000)
    assert disjoint(split)


def test_planetoid_geom_gcn_splits(data_dir, tmp_path) -> None:
    dm = PlanetoidDataModule("Cora", data_dir=data_dir, cache_dir=tmp_path, split="geom-gcn")
    assert len(dm.splits()) == 10
    assert (len(dm.splits()[0].train), len(dm.splits()[0].val)) == (1192, 796)
    one = PlanetoidDataModule(
        "Cora", data_dir=data_dir, cache_dir=tmp_path, split="geom-gcn", split_index=3
    )
    assert len(one.splits()) == 1
    assert torch.equal(one.splits()[0].test, dm.splits()[3].test)
    bad = PlanetoidDataModule(
        "Cora", data_dir=data_dir, cache_dir=tmp_path, split="geom-gcn", split_index=10
    )
    with pytest.raises(ValueError, match=r"split_index must be in \[0, 9\]"):
        bad.setup()


def test_random_split_is_seeded(data_dir, tmp_path) -> None:
    def split(seed: int):
        dm = PlanetoidDataModule(
            "Cora",
            data_dir=data_dir,
            cache_dir=tmp_path,
            split="random",
            train_frac=0.6,
            val_frac=0.2,
            seed=seed,
        )
        return dm.splits()[0]

    a, b, c = split(0), split(0), split(1)
    assert torch.equal(a.train, b.train) and not torch.equal(a.train, c.train)
    assert len(a.train) == round(0.6 * 2708) and disjoint(a)


def test_normalize_features(data_dir, tmp_path) -> None:
    dm = PlanetoidDataModule("Cora", data_dir=data_dir, cache_dir=tmp_path, normalize_features=True)
    sums = dm.data.x.sum(1)
    assert torch.allclose(sums[sums > 0], torch.ones_like(sums[sums > 0]))


@pytest.mark.parametrize(
    "cls,name,nodes,classes",
    [
        (WebKBDataModule, "Cornell", 183, 5),
        (WebKBDataModule, "Texas", 183, 5),
        (WebKBDataModule, "Wisconsin", 251, 5),
        (ActorDataModule, "Actor", 7600, 5),
        (CitationFullDataModule, "Cora_ML", 2995, 7),
    ],
)
def test_other_node_datasets(data_dir, tmp_path, cls, name, nodes, classes) -> None:
    dm = cls(name=name, data_dir=data_dir, cache_dir=tmp_path)
    dm.setup()
    assert dm.data.num_nodes == nodes and dm.num_classes == classes
    splits = dm.splits()
    assert len(splits) == (1 if cls is CitationFullDataModule else 10)
    assert all(disjoint(s) for s in splits)


def test_karate_and_sbm_need_no_files(tmp_path) -> None:
    karate = KarateClubDataModule(data_dir=tmp_path / "none")
    assert karate.data.num_nodes == 34 and karate.num_classes == 4
    sbm = SBMDataModule(num_blocks=3, block_size=20, seed=1)
    assert sbm.data.num_nodes == 60 and sbm.num_classes == 3
    again = SBMDataModule(num_blocks=3, block_size=20, seed=1)
    assert torch.equal(sbm.data.edge_index, again.data.edge_index)
    from torch_geometric.utils import is_undirected

    assert is_undirected(sbm.data.edge_index)
    with pytest.raises(ValueError, match=r"p_in must be a probability in \[0, 1\], got 1\.5"):
        SBMDataModule(p_in=1.5)


def test_missing_raw_files_fail_fast_with_the_expected_files(tmp_path, no_network) -> None:
    dm = PlanetoidDataModule("CiteSeer", data_dir=tmp_path / "empty", cache_dir=tmp_path)
    with pytest.raises(DatasetNotFoundError) as err:
        dm.setup()
    assert no_network == [], "a missing file with downloads off sends no request"
    msg = str(err.value)
    assert "dataset 'CiteSeer'" in msg
    assert str(tmp_path / "empty" / "Planetoid") in msg
    assert "ind.citeseer.x" in msg and "GRAPHSSL_DATA_DIR" in msg


def test_unknown_planetoid_name(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"Planetoid name must be one of .*got 'PubMedd'"):
        PlanetoidDataModule("PubMedd", data_dir=tmp_path)


def test_read_only_source_is_read_where_it_is(tmp_path, data_dir) -> None:
    src = tmp_path / "ro" / "Planetoid"
    shutil.copytree(data_dir / "Planetoid" / "Cora" / "raw", src / "Cora" / "raw")
    for p in (src / "Cora" / "raw", src / "Cora", src):
        p.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        dm = PlanetoidDataModule("Cora", data_dir=tmp_path / "ro", cache_dir=tmp_path / "cache")
        dm.setup()
        assert dm.data.num_nodes == 2708
        assert sorted(p.name for p in (src / "Cora").iterdir()) == ["raw"]
    finally:
        for p in (src, src / "Cora", src / "Cora" / "raw"):
            p.chmod(stat.S_IRWXU)
