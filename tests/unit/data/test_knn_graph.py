"""ε/kNN graphs from pixels (S0 §4.2's MNIST/CIFAR graphs) and the Fashion-MNIST DataModule."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from graphssl.data.knn_graph import FashionMNISTKNNGraphDataModule, Metric, epsilon_graph
from graphssl.data.paths import DatasetNotFoundError


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
    dm = FashionMNISTKNNGraphDataModule(data_dir=tmp_path, num_nodes=100, k=5)
    with pytest.raises(DatasetNotFoundError, match="FashionMNIST"):
        dm.setup()


def test_fashion_mnist_knn_graph(data_dir: Path) -> None:
    if not (data_dir / "FashionMNIST" / "raw" / "train-images-idx3-ubyte").is_file():
        pytest.skip(f"Fashion-MNIST raw files not in {data_dir / 'FashionMNIST' / 'raw'}")
    dm = FashionMNISTKNNGraphDataModule(data_dir=data_dir, num_nodes=2000, k=20.0, seed=0)
    dm.setup()
    data = dm.data
    assert data.x.shape == (2000, 784) and float(data.x.max()) <= 1.0
    assert data.y.shape == (2000,) and dm.num_classes == 10
    _check_graph(data.edge_index, 2000, 20.0)
    assert dm.graph_stats()["data/avg_degree"] == pytest.approx(20.0, rel=0.1)
    split = dm.splits()[0]
    assert split.train.numel() == 200 and split.val.numel() == 200
    again = FashionMNISTKNNGraphDataModule(data_dir=data_dir, num_nodes=2000, k=20.0, seed=0)
    again.setup()
    assert torch.equal(again.data.edge_index, data.edge_index)
