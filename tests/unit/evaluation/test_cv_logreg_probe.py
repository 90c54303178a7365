"""CVLogRegProbe: GRACE's evaluation (unit-norm rows, one-vs-rest liblinear, C by CV)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphssl.evaluation.cv_logreg_probe import GRACE_C_GRID, CVLogRegProbe


def _directions(n: int = 300, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Three classes that differ only in *direction*: each row is its class's unit vector plus
    noise, scaled by a random norm spanning three orders of magnitude."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 3
    centres = torch.eye(3, 8)
    x = centres[y] + 0.35 * torch.randn(n, 8, generator=g)
    scale = 10.0 ** (3 * torch.rand(n, 1, generator=g) - 1.5)
    return x * scale, y


def _splits(n: int = 300) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(1))
    return perm[:60], perm[60:120], perm[120:]


def test_unit_norm_rows_recover_classes_that_differ_in_direction() -> None:
    x, y = _directions()
    train, val, test = _splits()
    normalized = CVLogRegProbe().evaluate(x, y, train, val, test)
    assert normalized["test_acc"] > 0.9
    assert normalized["C"] in GRACE_C_GRID and 0.8 < normalized["cv_acc"] <= 1.0
    assert set(normalized) == {"train_acc", "val_acc", "test_acc", "cv_acc", "C"}


def test_normalize_false_keeps_the_norm() -> None:
    """Two classes along the same direction that differ only in norm: raw rows separate them,
    unit-norm rows cannot."""
    g = torch.Generator().manual_seed(0)
    y = torch.arange(300) % 2
    x = (torch.eye(1, 8) + 0.05 * torch.randn(300, 8, generator=g)) * (1.0 + 9.0 * y)[:, None]
    train, val, test = _splits()
    raw = CVLogRegProbe(normalize=False).evaluate(x, y, train, val, test)
    normalized = CVLogRegProbe().evaluate(x, y, train, val, test)
    assert raw["test_acc"] > 0.95 and normalized["test_acc"] < 0.75


def test_invariant_to_the_scale_of_each_row() -> None:
    x, y = _directions(seed=3)
    train, val, test = _splits()
    scale = torch.linspace(0.01, 100.0, x.shape[0]).unsqueeze(1)
    a = CVLogRegProbe(seed=2).evaluate(x, y, train, val, test)
    b = CVLogRegProbe(seed=2).evaluate(x * scale, y, train, val, test)
    assert a == pytest.approx(b)


def test_matches_sklearn_on_the_training_rows() -> None:
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV, StratifiedKFold
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.preprocessing import normalize

    x, y = _directions(seed=4)
    train, val, test = _splits()
    grid = [0.01, 1.0, 100.0]
    ours = CVLogRegProbe(C=grid, seed=5).evaluate(x, y, train, val, test)
    xn = normalize(x.numpy().astype(np.float64))
    ref = GridSearchCV(
        OneVsRestClassifier(LogisticRegression(solver="liblinear")),
        {"estimator__C": grid},
        cv=StratifiedKFold(5, shuffle=True, random_state=5),
    ).fit(xn[train.numpy()], y.numpy()[train.numpy()])
    assert ours["C"] == ref.best_params_["estimator__C"]
    assert ours["cv_acc"] == pytest.approx(ref.best_score_)
    expected = float(np.mean(ref.predict(xn[test.numpy()]) == y.numpy()[test.numpy()]))
    assert ours["test_acc"] == pytest.approx(expected)


def test_fewer_folds_when_a_class_is_rare_and_an_error_below_two() -> None:
    x, y = _directions()
    train = torch.cat([torch.nonzero(y == c).flatten()[:k] for c, k in ((0, 20), (1, 20), (2, 3))])
    rest = torch.tensor(sorted(set(range(300)) - set(train.tolist())))
    out = CVLogRegProbe(C=[0.1, 10.0]).evaluate(x, y, train, rest[:50], rest[50:])
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV, StratifiedKFold
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.preprocessing import normalize

    three_folds = GridSearchCV(  # the rarest class has 3 rows: 3 folds, not 5
        OneVsRestClassifier(LogisticRegression(solver="liblinear")),
        {"estimator__C": [0.1, 10.0]},
        cv=StratifiedKFold(3, shuffle=True, random_state=0),
    ).fit(normalize(x.numpy().astype(np.float64))[train.numpy()], y.numpy()[train.numpy()])
    assert out["cv_acc"] == pytest.approx(three_folds.best_score_)
    lone = torch.cat([train[:40], torch.nonzero(y == 2).flatten()[:1]])
    with pytest.raises(ValueError, match="rarest class has 1"):
        CVLogRegProbe().evaluate(x, y, lone, rest[:50], rest[50:])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"C": []}, ValueError, "C must be a non-empty list"),
        ({"C": [1.0, 0.0]}, ValueError, r"0\.0"),
        ({"inner_folds": 1}, ValueError, "inner_folds"),
        ({"normalize": "l2"}, ValueError, "'l2'"),
    ],
)
def test_bad_settings_name_the_value(kwargs: dict, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        CVLogRegProbe(**kwargs)
