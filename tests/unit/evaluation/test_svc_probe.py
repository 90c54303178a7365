"""SVCProbe: the graph papers' SVM with C chosen by inner cross-validation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphssl.evaluation.svc_probe import SVCProbe


def _rings(n: int = 240, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Two concentric rings in 2-D plus 6 noise dims: not linearly separable, RBF-separable."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 2
    angle = torch.rand(n, generator=g) * 2 * torch.pi
    radius = 1.0 + 2.0 * y + 0.1 * torch.randn(n, generator=g)
    ring = torch.stack([radius * angle.cos(), radius * angle.sin()], dim=1)
    return torch.cat([ring, 0.1 * torch.randn(n, 6, generator=g)], dim=1), y


def test_rbf_separates_rings_a_linear_kernel_cannot() -> None:
    x, y = _rings()
    perm = torch.randperm(240, generator=torch.Generator().manual_seed(1))
    train, val, test = perm[:150], perm[150:180], perm[180:]
    rbf = SVCProbe().evaluate(x, y, train, val, test)
    linear = SVCProbe(kernel="linear").evaluate(x, y, train, val, test)
    assert rbf["test_acc"] > 0.95 and linear["test_acc"] < 0.75
    assert rbf["C"] in SVCProbe().C and 0.9 < rbf["val_acc"] <= 1.0
    assert rbf["train_acc"] >= rbf["test_acc"] - 0.05


def test_matches_sklearn_grid_search_on_the_training_fold() -> None:
    from sklearn.model_selection import GridSearchCV, StratifiedKFold
    from sklearn.svm import SVC

    x, y = _rings(seed=2)
    train, val, test = torch.arange(0, 120), torch.arange(120, 160), torch.arange(160, 240)
    ours = SVCProbe(C=[0.01, 1.0, 100.0], seed=3).evaluate(x, y, train, val, test)
    fit = np.arange(160)
    ref = GridSearchCV(
        SVC(), {"C": [0.01, 1.0, 100.0]}, cv=StratifiedKFold(5, shuffle=True, random_state=3)
    ).fit(x.numpy()[fit].astype(np.float64), y.numpy()[fit])
    assert ours["C"] == ref.best_params_["C"]
    assert ours["val_acc"] == pytest.approx(ref.best_score_)
    expected = float(np.mean(ref.predict(x.numpy()[160:].astype(np.float64)) == y.numpy()[160:]))
    assert ours["test_acc"] == pytest.approx(expected)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"C": []}, "C must be a non-empty list"),
        ({"C": [1.0, -2.0]}, r"-2\.0"),
        ({"kernel": "cubic"}, "'cubic'"),
        ({"inner_folds": 1}, "inner_folds"),
    ],
)
def test_bad_settings_name_the_value(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SVCProbe(**kwargs)


def test_a_class_with_one_training_row_is_a_clear_error() -> None:
    x = torch.randn(10, 3)
    y = torch.tensor([0, 0, 0, 0, 0, 1, 0, 0, 1, 1])
    with pytest.raises(ValueError, match="rarest class has 1"):
        SVCProbe().evaluate(x, y, torch.arange(6), torch.arange(6, 7), torch.arange(7, 10))
