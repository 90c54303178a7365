"""Downloads for real against a local HTTP server: PyG and OGB fetch the files they miss,
an unreachable or stalled server fails with the dataset, the folder and the URL, and
``download=False`` never sends a request."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch
from dataset_files import (
    closed_port_url,
    http_server,
    need_ogb,
    ogbg_zip,
    ogbn_zip,
    planetoid_files,
    shchur_npz,
    silent_server,
)

from graphssl.data.node import AmazonDataModule, PlanetoidDataModule
from graphssl.data.paths import DatasetDownloadError, DatasetNotFoundError


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests to the local server go direct even where a proxy is configured."""
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("no_proxy", "*")
    monkeypatch.setenv("NO_PROXY", "*")


def point_ogb_at(monkeypatch: pytest.MonkeyPatch, tmp: Path, kind: str, name: str, url: str):
    """Make OGB's ``master.csv`` (read beside its dataset module) list ``url`` for ``name``."""
    import importlib

    need_ogb()
    module = importlib.import_module(f"ogb.{kind}.dataset_pyg")
    master = pd.read_csv(
        Path(module.__file__).with_name("master.csv"), index_col=0, keep_default_na=False
    )
    master.loc["url", name] = url
    folder = tmp / f"ogb-{kind}"
    folder.mkdir()
    master.to_csv(folder / "master.csv")
    monkeypatch.setattr(module, "__file__", str(folder / "dataset_pyg.py"))


def test_amazon_downloads_its_npz_from_the_server(tmp_path, monkeypatch) -> None:
    from torch_geometric.datasets import Amazon

    served = tmp_path / "srv"
    shchur_npz(served / "amazon_electronics_computers.npz", n=40)
    with http_server(served) as (base, requests):
        monkeypatch.setattr(Amazon, "url", base + "/")
        dm = AmazonDataModule(
            "computers", data_dir=tmp_path / "data", cache_dir=tmp_path / "cache", download=True
        )
        dm.setup()
    assert requests == ["/amazon_electronics_computers.npz"]
    assert (
        tmp_path / "cache/downloads/Amazon/Computers/raw/amazon_electronics_computers.npz"
    ).is_file()
    assert not (tmp_path / "data").exists()
    assert dm.data.num_nodes == 40 and dm.num_classes == 3
    split = dm.splits()[0]
    assert (split.train.numel(), split.val.numel(), split.test.numel()) == (4, 4, 32)


def test_pubmed_downloads_its_planetoid_files(tmp_path, monkeypatch) -> None:
    from torch_geometric.datasets import Planetoid

    served = tmp_path / "srv"
    planetoid_files(served, "pubmed")
    with http_server(served) as (base, requests):
        monkeypatch.setattr(Planetoid, "url", base)
        dm = PlanetoidDataModule(
            "PubMed", data_dir=tmp_path / "data", cache_dir=tmp_path / "cache", download=True
        )
        dm.setup()
    assert {r.rsplit(".", 1)[-1] for r in requests} >= {"x", "tx", "allx", "graph", "index"}
    split = dm.splits()[0]  # public split: 20 training rows, the next 500 validate
    assert split.train.tolist() == list(range(20))
    assert split.val.tolist() == list(range(20, 520))
    assert split.test.numel() == 10


def test_ogbn_arxiv_downloads_its_zip_and_keeps_the_official_split(tmp_path, monkeypatch):
    from graphssl.data.ogb_datasets import OGBNodeDataModule

    served = tmp_path / "srv"
    parts = ogbn_zip(served / "arxiv.zip", "arxiv", "time", n=50)
    with http_server(served) as (base, requests):
        point_ogb_at(monkeypatch, tmp_path, "nodeproppred", "ogbn-arxiv", f"{base}/arxiv.zip")
        dm = OGBNodeDataModule(
            "ogbn-arxiv", data_dir=tmp_path / "data", cache_dir=tmp_path / "cache", download=True
        )
        dm.setup()
        again = OGBNodeDataModule(
            "ogbn-arxiv", data_dir=tmp_path / "data", cache_dir=tmp_path / "cache", download=True
        )
        again.setup()
    assert requests == ["/arxiv.zip"]  # the second DataModule reads the downloaded folder
    assert (tmp_path / "cache/OGB/downloads/ogbn_arxiv/RELEASE_v1.txt").is_file()
    assert not (tmp_path / "data").exists()  # the data folder is only read
    (split,) = dm.splits()
    assert torch.equal(split.train, torch.as_tensor(parts["train"]))
    assert torch.equal(split.val, torch.as_tensor(parts["valid"]))
    assert torch.equal(split.test, torch.as_tensor(parts["test"]))
    assert dm.data.y.shape == (50,) and dm.num_features == 3
    from torch_geometric.utils import is_undirected

    assert is_undirected(dm.data.edge_index)
    assert torch.equal(again.data.edge_index, dm.data.edge_index)


def test_ogbg_molhiv_downloads_and_uses_the_scaffold_split(tmp_path, monkeypatch) -> None:
    from graphssl.data.ogb_datasets import OGBGraphDataModule

    served = tmp_path / "srv"
    parts = ogbg_zip(served / "hiv.zip", num_graphs=12)
    with http_server(served) as (base, requests):
        point_ogb_at(monkeypatch, tmp_path, "graphproppred", "ogbg-molhiv", f"{base}/hiv.zip")
        dm = OGBGraphDataModule(
            "ogbg-molhiv", data_dir=tmp_path / "data", cache_dir=tmp_path / "cache", download=True
        )
        dm.setup()
    assert requests == ["/hiv.zip"]
    (split,) = dm.splits()
    assert split.train.tolist() == parts["train"].tolist()
    assert split.test.tolist() == parts["test"].tolist()
    assert dm.task == "classification" and dm.num_graphs == 12
    assert dm.labels.tolist() == [0, 1] * 6
    assert dm.graphs[0].x.dtype == torch.float32 and dm.num_features == 9


def test_closed_port_fails_at_once_naming_dataset_folder_and_url(tmp_path, monkeypatch):
    from torch_geometric.datasets import Amazon

    url = closed_port_url()
    monkeypatch.setattr(Amazon, "url", url + "/")
    dm = AmazonDataModule(
        "photo",
        data_dir=tmp_path / "data",
        cache_dir=tmp_path / "cache",
        download=True,
        download_timeout=0.5,
    )
    with pytest.raises(DatasetDownloadError) as err:
        dm.setup()
    msg = str(err.value)
    assert "dataset 'Photo'" in msg
    assert str(tmp_path / "data" / "Amazon") in msg
    assert f"{url}/amazon_electronics_photo.npz" in msg
    assert "amazon_electronics_photo.npz" in msg and "paths.download=false" in msg
    assert isinstance(err.value.__cause__, ConnectionError)


def test_stalled_server_times_out_after_download_timeout(tmp_path, monkeypatch) -> None:
    """The server accepts the connection and never answers: the read times out after
    ``download_timeout`` instead of hanging."""
    from torch_geometric.datasets import Planetoid

    with silent_server() as url:
        monkeypatch.setattr(Planetoid, "url", url)
        dm = PlanetoidDataModule(
            "PubMed",
            data_dir=tmp_path / "data",
            cache_dir=tmp_path / "cache",
            download=True,
            download_timeout=0.3,
        )
        with pytest.raises(DatasetDownloadError) as err:
            dm.setup()
    msg = str(err.value)
    assert "dataset 'PubMed'" in msg and f"{url}/ind.pubmed.x" in msg
    cause = err.value.__cause__
    assert isinstance(cause, TimeoutError) or "timed out" in str(cause)


def test_ogb_unreachable_fails_with_the_url(tmp_path, monkeypatch) -> None:
    from graphssl.data.ogb_datasets import OGBNodeDataModule

    url = closed_port_url() + "/products.zip"
    point_ogb_at(monkeypatch, tmp_path, "nodeproppred", "ogbn-products", url)
    dm = OGBNodeDataModule(
        "ogbn-products",
        data_dir=tmp_path / "data",
        cache_dir=tmp_path / "c",
        download=True,
        download_timeout=0.5,
    )
    with pytest.raises(DatasetDownloadError, match="ogbn-products") as err:
        dm.setup()
    assert url in str(err.value) and "raw/edge.csv.gz" in str(err.value)


def test_download_false_never_sends_a_request(tmp_path, monkeypatch) -> None:
    from torch_geometric.datasets import Amazon

    served = tmp_path / "srv"
    shchur_npz(served / "amazon_electronics_photo.npz")
    with http_server(served) as (base, requests):
        monkeypatch.setattr(Amazon, "url", base + "/")
        dm = AmazonDataModule("Photo", data_dir=tmp_path / "data", cache_dir=tmp_path / "cache")
        with pytest.raises(DatasetNotFoundError) as err:
            dm.setup()
    assert requests == []
    assert not isinstance(err.value, DatasetDownloadError)
    assert "Photo/raw/amazon_electronics_photo.npz" in str(err.value)
    assert "paths.download=false" in str(err.value)


def test_download_into_a_read_only_data_dir_goes_to_the_cache(tmp_path, monkeypatch) -> None:
    from torch_geometric.datasets import Amazon

    served = tmp_path / "srv"
    shchur_npz(served / "amazon_electronics_photo.npz", n=30)
    data_dir = tmp_path / "ro"
    data_dir.mkdir()
    data_dir.chmod(0o555)
    try:
        with http_server(served) as (base, _):
            monkeypatch.setattr(Amazon, "url", base + "/")
            dm = AmazonDataModule(
                "Photo", data_dir=data_dir, cache_dir=tmp_path / "cache", download=True
            )
            dm.setup()
    finally:
        data_dir.chmod(0o755)
    assert list(data_dir.iterdir()) == []
    assert (tmp_path / "cache/downloads/Amazon/Photo/raw/amazon_electronics_photo.npz").is_file()
    assert dm.data.num_nodes == 30


def test_stalled_server_times_out_for_urllib_downloads_too(tmp_path, monkeypatch) -> None:
    """Amazon downloads with urllib (Planetoid with fsspec): both honour the timeout."""
    from torch_geometric.datasets import Amazon

    with silent_server() as url:
        monkeypatch.setattr(Amazon, "url", url + "/")
        dm = AmazonDataModule(
            "Photo",
            data_dir=tmp_path / "data",
            cache_dir=tmp_path / "cache",
            download=True,
            download_timeout=0.3,
        )
        with pytest.raises(DatasetDownloadError, match=r"amazon_electronics_photo\.npz") as err:
            dm.setup()
    cause = err.value.__cause__
    assert isinstance(cause, TimeoutError) or "timed out" in str(cause)


def test_reachability_check_goes_to_the_proxy_when_one_applies(monkeypatch) -> None:
    """Behind a proxy, the pre-download check connects to the proxy, not the dataset's host
    (which only the proxy can reach); no connection is made here."""
    from graphssl.data.paths import _endpoint

    assert _endpoint("https://github.com/x.npz") == ("github.com", 443)
    monkeypatch.delenv("no_proxy")
    monkeypatch.delenv("NO_PROXY")
    monkeypatch.setenv("https_proxy", "http://proxy.example:3128")
    assert _endpoint("https://github.com/x.npz") == ("proxy.example", 3128)
    assert _endpoint("http://snap.stanford.edu:8080/a.zip") == ("snap.stanford.edu", 8080)
