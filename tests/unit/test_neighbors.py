"""Exhaustive top-k search with faiss and with torch (graphssl.neighbors)."""

from __future__ import annotations

import pytest
import torch

from graphssl import neighbors
from graphssl.neighbors import NeighborIndex, knn_search

needs_faiss = pytest.mark.skipif(
    not neighbors.faiss_available(), reason="faiss is not installed (pip install faiss-cpu)"
)


def _points(n: int, d: int, seed: int) -> torch.Tensor:
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("metric", ["ip", "l2"])
def test_torch_search_matches_brute_force(metric: str) -> None:
    ref, query = _points(300, 12, 0), _points(40, 12, 1)
    sims, idx = knn_search(query, ref, 7, metric, backend="torch", chunk_size=9)  # type: ignore[arg-type]
    full = query @ ref.T if metric == "ip" else -torch.cdist(query, ref).square()
    expected = full.topk(7, dim=1)
    assert torch.equal(idx, expected.indices)
    torch.testing.assert_close(sims, expected.values, atol=1e-4, rtol=1e-5)


@needs_faiss
@pytest.mark.parametrize("metric", ["ip", "l2"])
def test_faiss_and_torch_return_the_same_neighbours(metric: str) -> None:
    ref, query = _points(2000, 32, 2), _points(300, 32, 3)  # continuous: no ties
    s_f, i_f = knn_search(query, ref, 10, metric, backend="faiss", chunk_size=128)  # type: ignore[arg-type]
    s_t, i_t = knn_search(query, ref, 10, metric, backend="torch")  # type: ignore[arg-type]
    assert s_f.dtype == s_t.dtype == torch.float32 and i_f.dtype == i_t.dtype == torch.long
    assert torch.equal(i_f, i_t)
    torch.testing.assert_close(s_f, s_t, atol=1e-4, rtol=1e-5)


def test_auto_resolves_to_faiss_only_where_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    ref = _points(50, 4, 0)
    expected = "faiss" if neighbors.faiss_available() else "torch"
    assert NeighborIndex(ref).backend == expected
    monkeypatch.setattr(neighbors, "faiss_available", lambda: False)
    assert NeighborIndex(ref).backend == "torch"
    with pytest.raises(ImportError, match="pip install faiss-cpu"):
        NeighborIndex(ref, backend="faiss")


def test_torch_search_keeps_float64() -> None:
    ref = _points(30, 5, 0).double()
    sims, _ = NeighborIndex(ref, backend="torch").search(ref, 3)
    assert sims.dtype == torch.float64


def test_bad_arguments_are_refused() -> None:
    ref = _points(20, 3, 0)
    with pytest.raises(ValueError, match="backend must be one of"):
        NeighborIndex(ref, backend="hnsw")
    with pytest.raises(ValueError, match="metric must be"):
        NeighborIndex(ref, metric="cosine")  # type: ignore[arg-type]
    index = NeighborIndex(ref, backend="torch")
    with pytest.raises(ValueError, match=r"k must be in \[1, 20\]"):
        index.search(ref, 21)
    with pytest.raises(ValueError, match=r"query must be an \(M, 3\) matrix"):
        index.search(_points(4, 5, 1), 2)
