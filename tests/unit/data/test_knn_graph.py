"""ε/kNN graphs from pixels (the sparsification study's MNIST/CIFAR graphs), the search backends
and the Fashion-MNIST DataModule with its edge cache."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
import torch
from torch import Tensor

from graphssl import neighbors
from graphssl.data import knn_graph
from graphssl.data.knn_graph import (
    FashionMNISTKNNGraphDataModule,
    Metric,
    epsilon_graph,
    load_edge_cache,
)
from graphssl.data.paths import DatasetNotFoundError
from graphssl.neighbors import faiss_available


def _check_graph(edge_index: torch.Tensor, n: int, target: float) -> None:
    assert edge_index.dtype == torch.long and edge_index.shape[0] == 2
    assert not bool((edge_index[0] == edge_index[1]).any()), "self-loops"
    fwd = set(map(tuple, edge_index.t().tolist()))
    assert fwd == {(j, i) for i, j in fwd}, "not symmetric"
    assert len(fwd) == edge_index.shape[1], "duplicate edges"
    avg = edge_index.shape[1] / 2 / n
    assert abs(avg - target) <= 0.1 * target


@pytest.mark.parametrize("metric", ["cosine", "l2"])
def test_epsilon_graph_on_random_points(metric: Metric) -> None:
    x = torch.randn(300, 5, generator=torch.Generator().manual_seed(0))
    ei = epsilon_graph(x, avg_degree=4.0, metric=metric, chunk_size=64)
    _check_graph(ei, 300, 4.0)
    # the kept pairs are the closest ones: the global nearest pair is an edge
    d = (
        torch.cdist(x, x)
        if metric == "l2"
        else -torch.nn.functional.normalize(x) @ torch.nn.functional.normalize(x).T
    )
    d.fill_diagonal_(float("inf"))
    i, j = divmod(int(d.argmin()), 300)
    assert (ei[0] == i).logical_and(ei[1] == j).any()


def test_epsilon_graph_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="avg_degree"):
        epsilon_graph(torch.randn(10, 2), avg_degree=0.0)
    with pytest.raises(ValueError, match="metric"):
        epsilon_graph(torch.randn(10, 2), avg_degree=1.0, metric="manhattan")  # type: ignore[arg-type]


def test_missing_raw_files_fail_clearly(tmp_path: Path) -> None:
    dm = FashionMNISTKNNGraphDataModule(data_dir=tmp_path, cache_dir=tmp_path, num_nodes=100, k=5)
    with pytest.raises(DatasetNotFoundError, match="FashionMNIST"):
        dm.setup()


def test_fashion_mnist_knn_graph(data_dir: Path) -> None:
    if not (data_dir / "FashionMNIST" / "raw" / "train-images-idx3-ubyte").is_file():
        pytest.skip(f"Fashion-MNIST raw files not in {data_dir / 'FashionMNIST' / 'raw'}")
    kwargs = {"include_test": False, "split": "random", "cache_graph": False}
    dm = FashionMNISTKNNGraphDataModule(data_dir=data_dir, num_nodes=2000, k=20.0, seed=0, **kwargs)
    dm.setup()
    data = dm.data
    assert data.x.shape == (2000, 784) and float(data.x.max()) <= 1.0
    assert data.y.shape == (2000,) and dm.num_classes == 10
    _check_graph(data.edge_index, 2000, 20.0)
    assert dm.graph_stats()["data/avg_degree"] == pytest.approx(20.0, rel=0.1)
    split = dm.splits()[0]
    assert split.train.numel() == 200 and split.val.numel() == 200
    again = FashionMNISTKNNGraphDataModule(
        data_dir=data_dir, num_nodes=2000, k=20.0, seed=0, **kwargs
    )
    again.setup()
    assert torch.equal(again.data.edge_index, data.edge_index)


# ------------------------------------------------------------------ search backends, exactness
needs_faiss = pytest.mark.skipif(
    not faiss_available(), reason="faiss is not installed (pip install faiss-cpu)"
)


def _clustered(n: int, dim: int, seed: int, duplicates: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    centres = 3 * torch.randn(6, dim, generator=gen)
    x = centres[torch.randint(0, 6, (n,), generator=gen)] + torch.randn(n, dim, generator=gen)
    if duplicates:
        x[:duplicates] = x[0]  # exact ties: more near-equal candidates than the slack
    return x


@needs_faiss
@pytest.mark.parametrize("metric", ["cosine", "l2"])
def test_faiss_and_torch_searches_give_identical_edges(metric: Metric) -> None:
    x = _clustered(1500, 24, seed=1)
    torch_edges = epsilon_graph(x, avg_degree=8.0, metric=metric, chunk_size=200, backend="torch")
    faiss_edges = epsilon_graph(x, avg_degree=8.0, metric=metric, chunk_size=512, backend="faiss")
    _check_graph(torch_edges, 1500, 8.0)
    assert torch.equal(torch_edges, faiss_edges)


@pytest.mark.parametrize("metric", ["cosine", "l2"])
def test_edges_do_not_depend_on_chunk_size(metric: Metric) -> None:
    x = _clustered(600, 10, seed=2)
    one = epsilon_graph(x, avg_degree=5.0, metric=metric, chunk_size=600, backend="torch")
    assert torch.equal(one, epsilon_graph(x, 5.0, metric, chunk_size=37, backend="torch"))


def test_without_faiss_the_torch_search_gives_the_same_edges(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    x = _clustered(500, 8, seed=3)
    expected = epsilon_graph(x, avg_degree=4.0, backend="torch")
    monkeypatch.setattr(neighbors, "faiss_available", lambda: False)
    assert neighbors.NeighborIndex(x).backend == "torch"
    assert torch.equal(epsilon_graph(x, avg_degree=4.0), expected)  # backend="auto"
    with pytest.raises(ImportError, match="faiss-cpu"):
        epsilon_graph(x, avg_degree=4.0, backend="faiss")


def test_exact_pair_scores_are_symmetric_and_batch_independent() -> None:
    x = torch.nn.functional.normalize(_clustered(3000, 33, seed=4), dim=1)
    gen = torch.Generator().manual_seed(0)
    i, j = torch.randint(0, 3000, (2, 2500), generator=gen)
    for metric in ("cosine", "l2"):
        scorer = knn_graph._PairScores(x, metric)  # type: ignore[arg-type]
        together = scorer.exact(i, j)
        assert torch.equal(together, scorer.exact(j, i))
        alone = torch.cat([scorer.exact(i[t : t + 1], j[t : t + 1]) for t in range(0, 2500, 97)])
        assert torch.equal(alone, together[::97])


@pytest.mark.parametrize("backend", ["torch", pytest.param("faiss", marks=needs_faiss)])
def test_rows_with_many_near_ties_are_searched_in_float64(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = _clustered(400, 6, seed=5, duplicates=40)
    calls: list[int] = []
    original = knn_graph._PairScores.exact_rows

    def spy(self: knn_graph._PairScores, rows: Tensor, k: int) -> Tensor:
        calls.append(rows.numel())
        return original(self, rows, k)

    monkeypatch.setattr(knn_graph._PairScores, "exact_rows", spy)
    ei = epsilon_graph(x, avg_degree=2.0, backend=backend)
    assert calls and calls[0] >= 40  # every duplicate's 39 twins tie beyond the slack
    _check_graph(ei, 400, 2.0)
    assert torch.equal(ei, epsilon_graph(x, avg_degree=2.0, backend="torch", chunk_size=50))


# ------------------------------------------------------------------ DataModule, cache, splits
def _write_idx(path: Path, data: torch.Tensor) -> None:
    dims = list(data.shape)
    header = struct.pack(">HBB", 0, 0x08, len(dims)) + struct.pack(f">{len(dims)}I", *dims)
    path.write_bytes(header + data.to(torch.uint8).numpy().tobytes())


def _fake_fashion_mnist(root: Path, n_train: int = 240, n_test: int = 60) -> Path:
    """Small IDX files in torchvision's layout: clustered 28×28 images of 10 classes."""
    raw = root / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    gen = torch.Generator().manual_seed(0)
    n = n_train + n_test
    labels = torch.randint(0, 10, (n,), generator=gen)
    protos = torch.randint(0, 256, (10, 28, 28), generator=gen).float()
    noise = 40 * torch.randn(n, 28, 28, generator=gen)
    images = (protos[labels] + noise).clamp(0, 255).round()
    _write_idx(raw / "train-images-idx3-ubyte", images[:n_train])
    _write_idx(raw / "train-labels-idx1-ubyte", labels[:n_train])
    _write_idx(raw / "t10k-images-idx3-ubyte", images[n_train:])
    _write_idx(raw / "t10k-labels-idx1-ubyte", labels[n_train:])
    return root


def _module(root: Path, cache: Path, **kwargs: object) -> FashionMNISTKNNGraphDataModule:
    kwargs.setdefault("k", 6.0)
    return FashionMNISTKNNGraphDataModule(data_dir=root, cache_dir=cache, **kwargs)  # type: ignore[arg-type]


def test_include_test_makes_the_test_images_the_test_split(tmp_path: Path) -> None:
    root = _fake_fashion_mnist(tmp_path / "data")
    dm = _module(root, tmp_path / "cache")
    dm.setup()
    assert dm.data.num_nodes == 300 and dm.data.x.shape == (300, 784)
    _check_graph(dm.data.edge_index, 300, 6.0)
    split = dm.splits()[0]
    assert torch.equal(split.test, torch.arange(240, 300))
    assert split.val.numel() == 24 and split.train.numel() == 216
    assert int(split.val.max()) < 240 and int(split.train.max()) < 240
    assert not set(split.train.tolist()) & set(split.val.tolist())
    only_train = _module(root, tmp_path / "cache", include_test=False)
    only_train.setup()
    assert only_train.data.num_nodes == 240
    random = only_train.splits()[0]  # seeded random fractions of all nodes
    assert (random.train.numel(), random.val.numel(), random.test.numel()) == (24, 24, 192)


def test_second_setup_loads_the_cached_graph(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, cache = _fake_fashion_mnist(tmp_path / "data"), tmp_path / "cache"
    first = _module(root, cache)
    first.setup()
    files = sorted((cache / "knn_graph").glob("*.pt"))
    assert len(files) == 1 and not list((cache / "knn_graph").glob("*.tmp"))

    def no_build(*args: object, **kwargs: object) -> Tensor:
        raise AssertionError("the graph was rebuilt instead of loaded from the cache")

    monkeypatch.setattr(knn_graph, "epsilon_graph", no_build)
    second = _module(root, cache, chunk_size=7, backend="torch")  # not part of the key
    second.setup()
    assert torch.equal(second.data.edge_index, first.data.edge_index)
    assert second.data.edge_index.dtype == torch.long


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage"])
def test_a_damaged_cache_file_is_rebuilt_not_trusted(tmp_path: Path, damage: str) -> None:
    root, cache = _fake_fashion_mnist(tmp_path / "data"), tmp_path / "cache"
    first = _module(root, cache)
    first.setup()
    (path,) = (cache / "knn_graph").glob("*.pt")
    blob = bytearray(path.read_bytes())
    if damage == "truncate":
        blob = blob[: len(blob) // 2]
    elif damage == "flip":  # inside the edge tensor's bytes: the archive still reads
        payload = torch.load(path, weights_only=True)
        raw = payload["edge_index"].numpy().tobytes()
        at = bytes(blob).index(raw[:64]) + len(raw) // 2
        blob[at] ^= 0xFF
    else:
        blob = bytearray(b"not a torch file")
    path.write_bytes(bytes(blob))
    again = _module(root, cache)
    with pytest.warns(UserWarning, match="ignoring the cached graph"):
        again.setup()
    assert torch.equal(again.data.edge_index, first.data.edge_index)
    assert load_edge_cache(path, 300) is not None  # rewritten, valid again


def test_the_cache_key_covers_parameters_and_raw_files(tmp_path: Path) -> None:
    root, cache = _fake_fashion_mnist(tmp_path / "data"), tmp_path / "cache"
    raw = root / "FashionMNIST" / "raw"
    base = _module(root, cache).cache_path(raw, subset=False)
    assert base == _module(root, cache, chunk_size=3, backend="torch").cache_path(raw, False)
    others = [
        _module(root, cache, k=7.0).cache_path(raw, False),
        _module(root, cache, metric="l2").cache_path(raw, False),
        _module(root, cache, include_test=False).cache_path(raw, False),
        _module(root, cache, num_nodes=100, seed=1).cache_path(raw, True),
        _module(root, cache, num_nodes=100, seed=2).cache_path(raw, True),
    ]
    assert len({base, *others}) == 6
    images = raw / "t10k-images-idx3-ubyte"
    blob = bytearray(images.read_bytes())
    blob[-1] ^= 1
    images.write_bytes(bytes(blob))
    assert _module(root, cache).cache_path(raw, subset=False) != base


def test_cache_graph_false_writes_nothing(tmp_path: Path) -> None:
    root, cache = _fake_fashion_mnist(tmp_path / "data"), tmp_path / "cache"
    dm = _module(root, cache, cache_graph=False)
    dm.setup()
    assert not (cache / "knn_graph").exists()
    _check_graph(dm.data.edge_index, 300, 6.0)
