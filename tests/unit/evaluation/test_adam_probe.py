"""The papers' Adam linear probe (graphssl.evaluation.adam_probe)."""

from __future__ import annotations

import pytest
import torch

from graphssl.evaluation.adam_probe import AdamLinearProbe


def _blobs(n: int = 300, d: int = 8, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 3
    centers = 3.0 * torch.randn(3, d, generator=g)
    return centers[y] + torch.randn(n, d, generator=g), y


def test_separable_blobs_and_early_stopping_on_validation() -> None:
    x, y = _blobs()
    idx = torch.randperm(300, generator=torch.Generator().manual_seed(1))
    train, val, test = idx[:60], idx[60:120], idx[120:]
    out = AdamLinearProbe(epochs=100).evaluate(x, y, train, val, test)
    assert out["test_acc"] > 0.95 and out["val_acc"] > 0.95
    assert 0 <= out["best_epoch"] < 100
    # deterministic for a seed; labels 10/20/30 are encoded like 0/1/2
    again = AdamLinearProbe(epochs=100).evaluate(x, y * 10 + 10, train, val, test)
    assert again == out


def test_random_labels_stay_near_chance_and_bad_values_fail() -> None:
    x, _ = _blobs()
    y = torch.randint(0, 3, (300,), generator=torch.Generator().manual_seed(2))
    masks = torch.arange(100), torch.arange(100, 200), torch.arange(200, 300)
    assert AdamLinearProbe(epochs=50).evaluate(x, y, *masks)["test_acc"] < 0.55
    with pytest.raises(ValueError, match="epochs must be a positive integer, got 0"):
        AdamLinearProbe(epochs=0)
    with pytest.raises(ValueError, match="lr must be > 0"):
        AdamLinearProbe(lr=0.0)
    with pytest.raises(ValueError, match="labels absent"):
        AdamLinearProbe().evaluate(x, None, *masks)


def test_tiny_embeddings_collapse_to_the_majority_class_unless_standardized() -> None:
    """The papers' protocol is not scale-invariant: on embeddings with row norms of a few
    hundredths (GraphDINO on Cora_ML), 300 Adam steps fit the bias and little else."""
    x, _ = _blobs(d=16)
    y = torch.tensor([0, 0, 1, 2] * 75)  # class 0: half of the rows
    g = torch.Generator().manual_seed(3)
    centers = torch.randn(3, 16, generator=g)
    x = 1e-3 * (centers[y] + 0.3 * torch.randn(300, 16, generator=g))
    masks = torch.arange(100), torch.arange(100, 200), torch.arange(200, 300)
    raw = AdamLinearProbe().evaluate(x, y, *masks)
    assert raw["test_acc"] < 0.6  # the majority class is 0.5
    scaled = AdamLinearProbe(standardize=True).evaluate(x, y, *masks)
    assert scaled["test_acc"] > 0.95
    # standardising with the training rows' statistics makes the probe scale-invariant
    big = AdamLinearProbe(standardize=True).evaluate(1e3 * x, y, *masks)
    assert abs(big["test_acc"] - scaled["test_acc"]) <= 0.01
    assert "standardize=True" in repr(AdamLinearProbe(standardize=True))
