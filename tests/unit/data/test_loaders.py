"""Loaders of the standard node and graph benchmarks, on tiny files in each dataset's exact
on-disk format placed in a (read-only) data folder: splits, shapes, OGB's evaluator, and the
error for a key the DataModule does not accept."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from dataset_files import (
    flickr_files,
    need_ogb,
    ogbg_zip,
    ogbn_zip,
    shchur_npz,
    unzip_to,
    wikics_json,
)

from graphssl.data.node import (
    CoauthorDataModule,
    FlickrDataModule,
    PlanetoidDataModule,
    WikiCSDataModule,
)
from graphssl.data.paths import DatasetNotFoundError


def read_only(folder: Path) -> None:
    for p in [folder, *folder.rglob("*")]:
        p.chmod(0o555 if p.is_dir() else 0o444)


@pytest.fixture
def data_dir(tmp_path: Path):
    folder = tmp_path / "data"
    folder.mkdir()
    yield folder
    for p in [folder, *folder.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)


def test_coauthor_physics_random_split_is_seeded(data_dir, tmp_path) -> None:
    shchur_npz(data_dir / "Coauthor/Physics/raw/ms_academic_phy.npz", n=50, num_classes=5)
    read_only(data_dir)
    dm = CoauthorDataModule("physics", data_dir=data_dir, cache_dir=tmp_path / "c", seed=3)
    dm.setup()
    assert dm.name == "Physics" and dm.data.num_nodes == 50 and dm.num_classes == 5
    (split,) = dm.splits()
    assert (split.train.numel(), split.val.numel(), split.test.numel()) == (5, 5, 40)
    same = CoauthorDataModule("Physics", data_dir=data_dir, cache_dir=tmp_path / "c", seed=3)
    other = CoauthorDataModule("Physics", data_dir=data_dir, cache_dir=tmp_path / "c", seed=4)
    assert torch.equal(same.splits()[0].train, split.train)
    assert not torch.equal(other.splits()[0].train, split.train)
    # processed in the cache's copy keyed by the raw files' digest, never in the data folder
    assert list((tmp_path / "c").glob("Coauthor-*/Coauthor/Physics/processed"))
    assert not (data_dir / "Coauthor/Physics/processed").exists()


def test_coauthor_rejects_unknown_name() -> None:
    with pytest.raises(ValueError, match=r"Coauthor name must be one of \['CS', 'Physics'\]"):
        CoauthorDataModule("Chemistry")


def test_wikics_evaluates_its_20_splits_with_one_test_set(data_dir, tmp_path) -> None:
    wikics_json(data_dir / "WikiCS/raw/data.json", n=30)
    read_only(data_dir)
    dm = WikiCSDataModule(data_dir=data_dir, cache_dir=tmp_path / "c")
    splits = dm.splits()
    assert len(splits) == 20
    assert all(torch.equal(s.test, splits[0].test) for s in splits)
    assert splits[0].test.tolist() == list(range(0, 30, 2))
    assert not torch.equal(splits[0].train, splits[1].train)
    one = WikiCSDataModule(data_dir=data_dir, cache_dir=tmp_path / "c", split_index=4)
    assert torch.equal(one.splits()[0].train, splits[4].train)
    assert "stopping_mask" not in dm.data


def test_flickr_uses_its_own_masks(data_dir, tmp_path) -> None:
    flickr_files(data_dir / "Flickr/raw", n=40)
    dm = FlickrDataModule(data_dir=data_dir, cache_dir=tmp_path / "c")
    (split,) = dm.splits()
    assert split.train.tolist() == list(range(20))
    assert split.val.tolist() == list(range(20, 30))
    assert split.test.tolist() == list(range(30, 40))


def test_pubmed_is_a_planetoid_name() -> None:
    assert PlanetoidDataModule("pubmed").name == "pubmed"
    with pytest.raises(ValueError, match="PubMed"):
        PlanetoidDataModule("Pubmedx")


def test_missing_files_without_download_list_them(tmp_path) -> None:
    dm = WikiCSDataModule(data_dir=tmp_path / "none", cache_dir=tmp_path / "c")
    with pytest.raises(DatasetNotFoundError, match=r"raw/data\.json") as err:
        dm.setup()
    assert str(tmp_path / "none" / "WikiCS") in str(err.value)


# ------------------------------------------------------------------------------------ OGB
def test_ogbn_products_from_a_placed_folder_with_the_evaluator(data_dir, tmp_path) -> None:
    need_ogb()
    from graphssl.data.ogb_datasets import OGBNodeDataModule

    parts = ogbn_zip(tmp_path / "products.zip", "products", "sales_ranking", extra_year=False)
    unzip_to(tmp_path / "products.zip", data_dir / "OGB" / "ogbn_products")
    read_only(data_dir)
    dm = OGBNodeDataModule("ogbn-products", data_dir=data_dir, cache_dir=tmp_path / "c")
    (split,) = dm.splits()
    assert split.test.tolist() == parts["test"].tolist()
    # OGB's own reader adds the inverse edges of products
    from torch_geometric.utils import is_undirected

    assert is_undirected(dm.data.edge_index)
    assert dm.ogb_metric == "acc"
    evaluate = dm.ogb_evaluator()
    y = dm.data.y
    assert evaluate(y[split.test], y[split.test]) == 1.0
    wrong = (y[split.test] + 1) % 4
    assert evaluate(y[split.test].view(-1, 1), wrong.view(-1, 1)) == 0.0
    half = y[split.test].clone()
    half[: half.numel() // 2] = (half[: half.numel() // 2] + 1) % 4
    assert evaluate(y[split.test], half) == pytest.approx(1 - (half.numel() // 2) / half.numel())


def test_ogbg_molhiv_rocauc_evaluator(data_dir, tmp_path) -> None:
    need_ogb()
    from graphssl.data.ogb_datasets import OGBGraphDataModule

    ogbg_zip(tmp_path / "hiv.zip", num_graphs=12)
    unzip_to(tmp_path / "hiv.zip", data_dir / "OGB" / "ogbg_molhiv")
    dm = OGBGraphDataModule(data_dir=data_dir, cache_dir=tmp_path / "c")
    dm.setup()
    assert dm.ogb_metric == "rocauc"
    evaluate = dm.ogb_evaluator()
    y = dm.labels
    assert evaluate(y, y.float()) == 1.0
    assert evaluate(y, 1.0 - y.float()) == 0.0
    stats = dm.graph_stats()
    assert stats["data/num_graphs"] == 12 and stats["data/num_nodes"] == 48
    folds = OGBGraphDataModule(
        data_dir=data_dir, cache_dir=tmp_path / "c", split="kfold", num_folds=3
    )
    assert len(folds.splits()) == 3


def test_ogb_missing_folder_without_download(tmp_path) -> None:
    need_ogb()
    from graphssl.data.ogb_datasets import OGBNodeDataModule

    dm = OGBNodeDataModule("ogbn-arxiv", data_dir=tmp_path, cache_dir=tmp_path / "c")
    with pytest.raises(DatasetNotFoundError) as err:
        dm.setup()
    msg = str(err.value)
    assert str(tmp_path / "OGB" / "ogbn_arxiv") in msg
    assert "raw/edge.csv.gz" in msg and "raw/node_year.csv.gz" in msg


def test_ogb_names_are_checked() -> None:
    from graphssl.data.ogb_datasets import OGBGraphDataModule, OGBNodeDataModule

    with pytest.raises(ValueError, match="ogbn-"):
        OGBNodeDataModule("ogbg-molhiv")
    with pytest.raises(ValueError, match="scaffold"):
        OGBGraphDataModule(split="time")


# ------------------------------------------------------------------------- unknown keys
def test_unknown_key_names_the_key_and_the_accepted_ones() -> None:
    from graphssl.data.graph import TUDataModule

    with pytest.raises(TypeError) as err:
        TUDataModule("MUTAG", normalize_features=True, split_index=None)
    msg = str(err.value)
    assert "TUDataModule got unknown argument(s) 'normalize_features', 'split_index'" in msg
    assert "accepts" in msg and "use_node_attr" in msg and "num_folds" in msg
    with pytest.raises(TypeError, match=r"'num_blocks'.*accepts.*normalize_features"):
        PlanetoidDataModule("Cora", num_blocks=3)


def test_overridden_target_keeps_no_foreign_keys() -> None:
    """Overriding ``dataset._target_`` keeps the old YAML's keys: a key the new class does not
    take fails by name instead of a bare TypeError deep inside."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(
        {
            "_target_": "graphssl.data.graph.SyntheticGraphsDataModule",
            "name": "x",
            "normalize_features": True,
        }
    )
    with pytest.raises(InstantiationException, match="'normalize_features'"):
        instantiate(cfg)
