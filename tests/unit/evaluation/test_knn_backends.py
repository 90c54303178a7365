"""The kNN probe's float32 screening on faiss and on torch: the same neighbours either way."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphssl import neighbors
from graphssl.evaluation.knn_probe import KNNProbe

needs_faiss = pytest.mark.skipif(
    not neighbors.faiss_available(), reason="faiss is not installed (pip install faiss-cpu)"
)


def _problem(n: int = 900, d: int = 24, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)  # continuous features: no tied similarities
    centres = rng.normal(size=(4, d))
    y = rng.integers(0, 4, n)
    return torch.from_numpy(centres[y] + 1.5 * rng.normal(size=(n, d))), torch.from_numpy(y)


@needs_faiss
@pytest.mark.parametrize("weighting", ["exp", "uniform"])
def test_faiss_and_torch_find_the_same_neighbours(weighting: str) -> None:
    x, y = _problem()
    train = torch.zeros(900, dtype=torch.bool)
    train[:600] = True
    val, test = torch.zeros_like(train), torch.zeros_like(train)
    val[600:750], test[750:] = True, True
    on_faiss = KNNProbe(k=15, weighting=weighting, chunk_size=128, backend="faiss")  # type: ignore[arg-type]
    on_torch = KNNProbe(k=15, weighting=weighting, chunk_size=100, backend="torch")  # type: ignore[arg-type]
    sims_f, nbrs_f = on_faiss.fit(x, y, train).kneighbors(x[~train])
    sims_t, nbrs_t = on_torch.fit(x, y, train).kneighbors(x[~train])
    assert on_faiss._search == "faiss" and on_torch._search == "torch"
    assert torch.equal(nbrs_f, nbrs_t) and torch.equal(sims_f, sims_t)
    assert on_faiss.evaluate(x, y, train, val, test) == on_torch.evaluate(x, y, train, val, test)


@needs_faiss
def test_faiss_screening_keeps_the_float64_certificate() -> None:
    # near-duplicate training rows: float32 cannot order them, the float64 re-screen does
    rng = np.random.default_rng(4)
    base = rng.normal(size=(1, 8))
    train = torch.from_numpy(
        np.concatenate([base + 1e-9 * rng.normal(size=(60, 8)), rng.normal(size=(40, 8))])
    )
    labels = torch.from_numpy(rng.integers(0, 3, 100))
    query = torch.from_numpy(base + 1e-3 * rng.normal(size=(5, 8)))
    results = [
        KNNProbe(k=3, backend=b).fit(train, labels).kneighbors(query)  # type: ignore[arg-type]
        for b in ("faiss", "torch")
    ]
    assert all(torch.equal(a, b) for a, b in zip(*results))


def test_auto_uses_torch_without_faiss(monkeypatch: pytest.MonkeyPatch) -> None:
    x, y = _problem(n=200)
    monkeypatch.setattr(neighbors, "faiss_available", lambda: False)
    probe = KNNProbe(k=5).fit(x, y)
    assert probe.backend == "auto" and probe._search == "torch"
    with pytest.raises(ImportError, match="faiss-cpu"):
        KNNProbe(k=5, backend="faiss").fit(x, y)


def test_backend_is_validated_and_shown() -> None:
    with pytest.raises(ValueError, match="backend must be one of auto, faiss, torch"):
        KNNProbe(backend="annoy")  # type: ignore[arg-type]
    assert "backend='torch'" in repr(KNNProbe(backend="torch"))
