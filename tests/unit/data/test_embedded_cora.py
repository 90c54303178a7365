"""Cora's public split ships inside the package: where the raw files are missing and downloads
are off or fail, the Planetoid DataModule loads the packaged copy, which is the same graph as
PyG's Planetoid Cora read from the raw files."""

from __future__ import annotations

import logging
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch
from dataset_files import closed_port_url

from graphssl.data.embedded import EMBEDDED, embedded_path, load_embedded
from graphssl.data.node import PlanetoidDataModule
from graphssl.data.paths import DatasetNotFoundError

REPO = Path(__file__).resolve().parents[3]
KEYS = ("x", "edge_index", "y", "train_mask", "val_mask", "test_mask")


def test_packaged_cora_equals_pyg_planetoid_cora(data_dir, tmp_path, caplog) -> None:
    real = PlanetoidDataModule("Cora", data_dir=data_dir, cache_dir=tmp_path / "c1")
    real.setup()
    with caplog.at_level(logging.WARNING, logger="graphssl.data.node"):
        packaged = PlanetoidDataModule(
            "Cora", data_dir=tmp_path / "empty", cache_dir=tmp_path / "c2", download=False
        )
        packaged.setup()
    assert sorted(packaged.data.keys()) == sorted(real.data.keys()) == sorted(KEYS)
    for key in KEYS:
        a, b = getattr(real.data, key), getattr(packaged.data, key)
        assert a.dtype == b.dtype and a.shape == b.shape, key
        assert torch.equal(a, b), key
    (split,) = packaged.splits()
    assert (split.train.numel(), split.val.numel(), split.test.numel()) == (140, 500, 1000)
    lines = [r.getMessage() for r in caplog.records if "packaged with graphssl" in r.message]
    assert len(lines) == 1
    assert str(tmp_path / "empty" / "Planetoid") in lines[0] and "downloads are off" in lines[0]


def test_failed_download_falls_back_to_the_packaged_copy(tmp_path, monkeypatch, caplog) -> None:
    from torch_geometric.datasets import Planetoid

    monkeypatch.setattr(Planetoid, "url", closed_port_url())
    dm = PlanetoidDataModule(
        "Cora",
        data_dir=tmp_path / "data",
        cache_dir=tmp_path / "cache",
        download=True,
        download_timeout=0.5,
    )
    with caplog.at_level(logging.WARNING, logger="graphssl.data.node"):
        dm.setup()
    assert dm.data.num_nodes == 2708 and dm.num_classes == 7
    assert any("could not be downloaded" in r.getMessage() for r in caplog.records)


def test_geom_gcn_split_and_other_datasets_still_need_their_files(tmp_path) -> None:
    for name, split in (("Cora", "geom-gcn"), ("CiteSeer", "public")):
        dm = PlanetoidDataModule(name, data_dir=tmp_path / "empty", cache_dir=tmp_path, split=split)
        with pytest.raises(DatasetNotFoundError, match=f"dataset '{name}'"):
            dm.setup()


def test_packaged_file_is_small_code_free_and_declared_as_package_data() -> None:
    path = embedded_path("Cora")
    assert path is not None and path.stat().st_size < 120 * 1024
    with np.load(path, allow_pickle=False) as npz:  # object arrays would need pickle
        assert all(npz[k].dtype != object for k in npz.files)
    data = load_embedded(path)
    assert data.x.shape == (2708, 1433) and data.edge_index.shape == (2, 10556)
    # the wheel carries the file: pyproject declares it as package data of graphssl.data
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = pyproject["tool"]["setuptools"]["package-data"]["graphssl.data"]
    package = REPO / "graphssl" / "data"
    for file in EMBEDDED.values():
        assert any((package / "_embedded" / file) in package.glob(p) for p in patterns)
