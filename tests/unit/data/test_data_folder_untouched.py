"""The data folder is only read, whatever the dataset route: loading writes PyG's processed
files (and any download) under the outputs folder and creates nothing in the data folder."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from dataset_files import closed_port_url, shchur_npz
from hydra.utils import instantiate

from graphssl.data.paths import DatasetDownloadError


def listing(folder: Path) -> list[tuple[str, int]]:
    """Every file and folder under ``folder`` with its size (0 for folders)."""
    return sorted(
        (p.relative_to(folder).as_posix(), p.stat().st_size if p.is_file() else 0)
        for p in folder.rglob("*")
    )


@pytest.fixture
def writable_data(tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A writable data folder holding CiteSeer's raw files (copied from the shared data), so a
    loader that wrote into it would not be stopped by permissions."""
    data = tmp_path / "data"
    shutil.copytree(data_dir / "Planetoid" / "CiteSeer" / "raw", data / "Planetoid/CiteSeer/raw")
    monkeypatch.setenv("GRAPHSSL_DATA_DIR", str(data))
    return data


@pytest.mark.parametrize(
    "route",
    [
        ("dataset=pyg", "dataset.cls=Planetoid", "+dataset.kwargs.name=CiteSeer"),
        ("dataset=citeseer",),
    ],
    ids=["pyg", "citeseer"],
)
def test_loading_leaves_the_data_folder_unchanged(tasks, writable_data, route) -> None:
    before = listing(writable_data)
    cfg = tasks.compose("train", *route, "debug=fast")
    dm = instantiate(cfg.dataset)
    dm.setup()
    assert dm.data.num_nodes == 3327
    assert listing(writable_data) == before
    processed = list((tasks.outputs / "cache").rglob("processed"))
    assert processed, "PyG's processed files belong in the outputs folder's cache"
    # a second load reads the cache and still writes nothing into the data folder
    instantiate(cfg.dataset).setup()
    assert listing(writable_data) == before


def test_a_failed_pyg_download_creates_no_folder(tasks, tmp_path, monkeypatch) -> None:
    """``dataset=pyg dataset.cls=Amazon`` with downloads on and the server away: the error
    names the dataset and the data folder stays as it was (no empty ``Amazon/Photo/raw/``)."""
    from torch_geometric.datasets import Amazon

    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setenv("GRAPHSSL_DATA_DIR", str(data))
    monkeypatch.setenv("GRAPHSSL_DOWNLOAD", "true")
    monkeypatch.setenv("no_proxy", "*")
    monkeypatch.setattr(Amazon, "url", closed_port_url() + "/")
    cfg = tasks.compose("train", "dataset=pyg", "dataset.cls=Amazon", "+dataset.kwargs.name=Photo")
    with pytest.raises(DatasetDownloadError, match="dataset 'Photo'"):
        instantiate(cfg.dataset).setup()
    assert list(data.iterdir()) == []


def test_a_download_lands_in_the_cache_and_is_found_there(tmp_path, monkeypatch) -> None:
    """Amazon's file is downloaded into ``<cache>/downloads/``; the next load finds it there
    with downloads off, and the (writable) data folder is never created."""
    from dataset_files import http_server
    from torch_geometric.datasets import Amazon

    from graphssl.data.node import AmazonDataModule

    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("no_proxy", "*")
    served = tmp_path / "srv"
    shchur_npz(served / "amazon_electronics_photo.npz", n=30)
    data, cache = tmp_path / "data", tmp_path / "cache"
    with http_server(served) as (base, requests):
        monkeypatch.setattr(Amazon, "url", base + "/")
        AmazonDataModule("Photo", data_dir=data, cache_dir=cache, download=True).setup()
    assert requests == ["/amazon_electronics_photo.npz"]
    assert not data.exists()
    assert (cache / "downloads/Amazon/Photo/raw/amazon_electronics_photo.npz").is_file()
    again = AmazonDataModule("Photo", data_dir=data, cache_dir=cache, download=False)
    again.setup()
    assert again.data.num_nodes == 30 and not data.exists()
