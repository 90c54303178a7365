"""Tests of the probes: logistic regression, ridge regression, kNN and result aggregation.

Each probe is checked against a known answer and a reference implementation (scikit-learn or a
naive numpy solve), and every input error is checked to name the value received.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import average_precision_score
from sklearn.neighbors import KNeighborsClassifier
from sklearn.preprocessing import StandardScaler
from torch import Tensor

from graphssl.evaluation import logreg_probe as linear_probe
from graphssl.evaluation.aggregate import mean_std
from graphssl.evaluation.knn_probe import KNNProbe
from graphssl.evaluation.logreg_probe import (
    DEFAULT_WEIGHT_DECAYS,
    SPEC_WEIGHT_DECAYS,
    LogRegProbe,
    average_precision,
)
from graphssl.evaluation.ridge_probe import DEFAULT_RIDGE_WEIGHT_DECAYS, RidgeProbe


@pytest.fixture(autouse=True, scope="module")
def _single_thread() -> Iterator[None]:
    """The problems are tiny: one thread avoids OpenMP oversubscription on shared runners."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---------------------------------------------------------------------------- test data
def _blobs(
    n: int = 300, d: int = 8, c: int = 3, noise: float = 1.5, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centers = 2.0 * rng.normal(size=(c, d))
    y = rng.integers(0, c, n)
    return centers[y] + noise * rng.normal(size=(n, d)), y


def _split_masks(n: int, frac: tuple[float, float] = (0.5, 0.25)) -> tuple[Tensor, Tensor, Tensor]:
    pos = torch.arange(n)
    n_train, n_val = int(frac[0] * n), int(frac[1] * n)
    return pos < n_train, (pos >= n_train) & (pos < n_train + n_val), pos >= n_train + n_val


def _problem(**kwargs: Any) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    x, y = _blobs(**kwargs)
    return (torch.from_numpy(x), torch.from_numpy(y), *_split_masks(len(y)))


# ---------------------------------------------------------------------- LogRegProbe
def test_logreg_defaults_match_the_spec() -> None:
    assert DEFAULT_WEIGHT_DECAYS == (100, 30, 10, 3, 1, 0.3, 0.1, 1e-2, 1e-3, 1e-4, 1e-5, 0)
    assert SPEC_WEIGHT_DECAYS == (1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 0.0)
    probe = LogRegProbe(weight_decay=[1e-3, 0.0, 1e-1, 1e-3])
    assert probe.weight_decays == (1e-1, 1e-3, 0.0)  # deduplicated, strongest first
    assert LogRegProbe().weight_decays == DEFAULT_WEIGHT_DECAYS


def test_logreg_separable_data_is_classified_perfectly() -> None:
    x, y, train, val, test = _problem(noise=0.05)
    result = LogRegProbe(weight_decay=SPEC_WEIGHT_DECAYS).evaluate(x, y, train, val, test)
    assert result["train_acc"] == result["val_acc"] == result["test_acc"] == 1.0
    assert set(result) == {"train_acc", "val_acc", "test_acc", "weight_decay", "converged"}
    assert isinstance(result["converged"], bool) and isinstance(result["weight_decay"], float)


@pytest.mark.parametrize("lam", [1e-1, 1e-3, 0.0])
@pytest.mark.parametrize("grad_tol", ["default", "tight"])
def test_logreg_matches_sklearn_at_matched_weight_decay(
    lam: float, grad_tol: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same objective as sklearn with C = 1 / (λ n_train): the same optimum."""
    if grad_tol == "tight":  # stop on the loss change (1e-9) only, to compare optima closely
        monkeypatch.setattr(linear_probe, "_GRAD_TOL", 0.0)
    x, y, train, val, test = _problem(n=400, d=6, c=4, noise=3.0)
    probe = LogRegProbe(weight_decay=lam).fit(x, y, train, val)
    x_np, y_np = x.numpy(), y.numpy()
    scaler = StandardScaler().fit(x_np[train])
    n_train = int(train.sum())
    reference = LogisticRegression(
        C=np.inf if lam == 0 else 1.0 / (lam * n_train), tol=1e-10, max_iter=10_000
    ).fit(scaler.transform(x_np[train]), y_np[train])
    assert probe.converged_
    np.testing.assert_array_equal(
        probe.predict(x[test]).numpy(), reference.predict(scaler.transform(x_np[test]))
    )
    ours = torch.softmax(probe.decision_function(x[test]), dim=1).numpy()
    atol = 1e-4 if grad_tol == "tight" else 5e-3
    expected = reference.predict_proba(scaler.transform(x_np[test]))
    np.testing.assert_allclose(ours, expected, atol=atol)
    np.testing.assert_allclose(probe.coef_.numpy(), reference.coef_.T, atol=10 * atol)


def test_logreg_selects_the_best_validation_metric_and_strongest_on_ties() -> None:
    x, y, train, val, _ = _problem(n=400, noise=2.5, seed=3)
    probe = LogRegProbe(early_stop=None).fit(x, y, train, val)  # the whole grid
    scores = probe.val_metrics_per_weight_decay_
    assert list(scores) == list(DEFAULT_WEIGHT_DECAYS)
    best = max(scores.values())
    assert probe.weight_decay_ == next(lam for lam, s in scores.items() if s == best)
    # Separable data: every strength reaches 1.0 on validation -> the strongest is kept.
    x, y, train, val, _ = _problem(noise=0.05)
    probe = LogRegProbe(weight_decay=[1e-4, 1e-2, 0.0]).fit(x, y, train, val)
    assert set(probe.val_metrics_per_weight_decay_.values()) == {1.0}
    assert probe.weight_decay_ == 1e-2


def test_logreg_warns_when_the_strongest_weight_decay_wins() -> None:
    x, y, train, val, _ = _problem(noise=0.05)  # every strength is perfect: the strongest wins
    with pytest.warns(
        UserWarning, match=r"strongest weight decay of its grid \(1 of \[1\.0, 0\.0\]"
    ):
        LogRegProbe(weight_decay=[1.0, 0.0]).fit(x, y, train, val)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: a single value, or the weakest (0) winning
        LogRegProbe(weight_decay=1.0).fit(x, y, train, val)
        LogRegProbe(weight_decay=[0.0]).fit(x, y, train, val)


def test_logreg_is_deterministic_and_warm_start_reaches_the_cold_optimum() -> None:
    x, y, train, val, test = _problem(n=300, noise=2.0, seed=1)
    grid = (1e-1, 1e-2, 1e-3)
    first = LogRegProbe(weight_decay=grid)
    second = LogRegProbe(weight_decay=grid)
    assert first.evaluate(x, y, train, val, test) == second.evaluate(x, y, train, val, test)
    assert torch.equal(first.coef_, second.coef_)
    assert torch.equal(first.intercept_, second.intercept_)
    # Warm-started fit at λ = 1e-3 vs a fit from zero at the same λ (the objective is convex).
    warm = LogRegProbe(weight_decay=grid).fit(x, y, train, val)
    lam = warm.weight_decay_
    cold = LogRegProbe(weight_decay=lam).fit(x, y, train, val)
    torch.testing.assert_close(warm.coef_, cold.coef_, atol=1e-3, rtol=0)


def test_logreg_accepts_index_splits_float32_numpy_and_column_labels() -> None:
    x, y, train, val, test = _problem()
    reference = LogRegProbe(weight_decay=1e-2).evaluate(x, y, train, val, test)
    as_index = [m.nonzero().view(-1) for m in (train, val, test)]
    assert LogRegProbe(weight_decay=1e-2).evaluate(x, y, *as_index) == reference
    assert (
        LogRegProbe(weight_decay=1e-2).evaluate(
            x.numpy(), y.numpy()[:, None], train.numpy(), val.numpy(), test.numpy()
        )
        == reference
    )
    single = LogRegProbe(weight_decay=1e-2).evaluate(x.float(), y, train, val, test)
    assert single["test_acc"] == pytest.approx(reference["test_acc"], abs=0.02)


def test_logreg_reports_non_convergence() -> None:
    x, y, train, val, test = _problem(noise=2.0)
    result = LogRegProbe(weight_decay=0.0, max_iter=2).evaluate(x, y, train, val, test)
    assert result["converged"] is False


def test_logreg_classes_absent_from_training_are_never_predicted() -> None:
    x, y, train, val, test = _problem(c=3)
    y = torch.where(test & (y == 0), torch.full_like(y, 7), y)  # class 7 only in test
    probe = LogRegProbe(weight_decay=1e-2)
    result = probe.evaluate(x, y, train, val, test)
    assert probe.classes_.tolist() == [0, 1, 2]
    assert result["test_acc"] < 1.0


# ---------------------------------------------------------------- multilabel + AP (OGB)
def test_average_precision_known_answer_and_ties_match_sklearn() -> None:
    y, s = [0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]
    assert average_precision(y, s) == pytest.approx(0.8333333333333333, abs=1e-12)
    rng = np.random.default_rng(0)
    yt = rng.integers(0, 2, 200).astype(float)
    ys = rng.integers(0, 5, 200).astype(float)  # many tied scores
    assert average_precision(yt, ys) == pytest.approx(average_precision_score(yt, ys), abs=1e-12)


def test_average_precision_masks_nan_and_skips_one_class_tasks_like_ogb() -> None:
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, (60, 4)).astype(float)
    y[rng.random((60, 4)) < 0.3] = np.nan
    y[:, 3] = np.where(np.isnan(y[:, 3]), np.nan, 1.0)  # no negatives: skipped
    s = rng.normal(size=(60, 4))
    expected = np.mean(
        [
            average_precision_score(y[~np.isnan(y[:, t]), t], s[~np.isnan(y[:, t]), t])
            for t in range(3)
        ]
    )
    assert average_precision(torch.from_numpy(y), torch.from_numpy(s)) == pytest.approx(expected)
    with pytest.raises(ValueError, match="none of the 1 tasks"):
        average_precision(np.ones((5, 1)), np.zeros((5, 1)))


def test_logreg_multilabel_with_missing_labels() -> None:
    rng = np.random.default_rng(2)
    n, d, t = 300, 6, 3
    x = rng.normal(size=(n, d))
    y = (x[:, :t] + 0.3 * rng.normal(size=(n, t)) > 0).astype(float)
    y[rng.random((n, t)) < 0.2] = np.nan
    x_t, y_t = torch.from_numpy(x), torch.from_numpy(y)
    train, val, test = _split_masks(n)
    probe = LogRegProbe(multilabel=True)
    result = probe.evaluate(x_t, y_t, train, val, test)
    assert set(result) == {"train_ap", "val_ap", "test_ap", "weight_decay", "converged"}
    assert result["test_ap"] > 0.9
    logits = probe.decision_function(x_t[test]).numpy()
    y_test = y[test.numpy()]
    expected = np.mean(
        [
            average_precision_score(
                y_test[~np.isnan(y_test[:, j]), j], logits[~np.isnan(y_test[:, j]), j]
            )
            for j in range(t)
        ]
    )
    assert result["test_ap"] == pytest.approx(expected, abs=1e-12)
    with pytest.raises(ValueError, match="must be 0, 1 or NaN"):
        LogRegProbe(multilabel=True).evaluate(x_t, y_t * 2, train, val, test)


# ----------------------------------------------------------------------- RidgeProbe
def _ridge_reference(x: np.ndarray, y: np.ndarray, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """Naive normal-equations ridge on standardised, centred training rows."""
    mean, std = x.mean(0), x.std(0)
    xc = (x - mean) / std
    n, d = xc.shape
    coef = np.linalg.solve(xc.T @ xc / n + lam * np.eye(d), xc.T @ (y - y.mean(0)) / n)
    return coef, y.mean(0)


def test_ridge_defaults_match_the_spec() -> None:
    assert DEFAULT_RIDGE_WEIGHT_DECAYS == (1e2, 1e1, 1.0, 1e-1, 1e-2, 1e-3, 0.0)


@pytest.mark.parametrize("lam", [10.0, 1e-2])
def test_ridge_matches_a_naive_solve(lam: float) -> None:
    rng = np.random.default_rng(0)
    x = 3.0 + 2.0 * rng.normal(size=(120, 5))
    y = x @ rng.normal(size=(5, 2)) + 0.5 * rng.normal(size=(120, 2))
    train, val, _ = _split_masks(120)
    probe = RidgeProbe(weight_decay=lam).fit(torch.from_numpy(x), torch.from_numpy(y), train, val)
    coef, intercept = _ridge_reference(x[train.numpy()], y[train.numpy()], lam)
    np.testing.assert_allclose(probe.coef_.numpy(), coef, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(probe.intercept_.numpy(), intercept, rtol=1e-12)


def test_ridge_without_penalty_is_the_minimum_norm_least_squares_solution() -> None:
    rng = np.random.default_rng(1)
    base = rng.normal(size=(50, 3))
    x = np.concatenate([base, base[:, :1]], axis=1)  # duplicated column: rank deficient
    y = rng.normal(size=50)
    train, val, test = _split_masks(50, (0.6, 0.2))
    probe = RidgeProbe(weight_decay=0.0, standardize=False)
    probe.fit(torch.from_numpy(x), torch.from_numpy(y), train, val)
    xt, yt = x[train.numpy()], y[train.numpy()]
    xc = xt - xt.mean(0)
    expected = np.linalg.lstsq(xc, yt - yt.mean(), rcond=None)[0]
    np.testing.assert_allclose(probe.coef_[:, 0].numpy(), expected, atol=1e-12)
    assert probe.coef_[0, 0] == pytest.approx(probe.coef_[3, 0])  # minimum norm splits evenly
    prediction = probe.predict(torch.from_numpy(x[test.numpy()]))
    assert prediction.shape == (int(test.sum()),)  # 1-D targets give 1-D predictions


def test_ridge_metrics_and_selection() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(200, 4))
    y = np.stack([x[:, 0] + 0.1 * rng.normal(size=200), 10 * x[:, 1]], axis=1)
    train, val, test = _split_masks(200)
    probe = RidgeProbe()
    result = probe.evaluate(torch.from_numpy(x), torch.from_numpy(y), train, val, test)
    assert set(result) == {
        "train_mae",
        "val_mae",
        "test_mae",
        "train_rmse",
        "val_rmse",
        "test_rmse",
        "weight_decay",
    }
    err = probe.predict(torch.from_numpy(x[test.numpy()])).numpy() - y[test.numpy()]
    assert result["test_mae"] == pytest.approx(np.abs(err).mean())
    assert result["test_rmse"] == pytest.approx(np.sqrt((err**2).mean(0)).mean())
    scores = probe.val_metrics_per_weight_decay_
    assert result["weight_decay"] == min(scores, key=lambda lam: (scores[lam], -lam))
    # A constant target is fitted exactly by every strength -> ties -> the strongest.
    constant = torch.full((200,), 3.0, dtype=torch.float64)
    tied = RidgeProbe().evaluate(torch.from_numpy(x), constant, train, val, test)
    assert tied["weight_decay"] == DEFAULT_RIDGE_WEIGHT_DECAYS[0] and tied["test_mae"] == 0.0


# ------------------------------------------------------------------------- KNNProbe
def test_knn_uniform_matches_sklearn() -> None:
    x, y, train, _, test = _problem(n=1500, d=16, c=5, noise=3.0)
    probe = KNNProbe(k=15, weighting="uniform", chunk_size=256).fit(x, y, train)
    reference = KNeighborsClassifier(15, metric="cosine", algorithm="brute").fit(x[train], y[train])
    np.testing.assert_array_equal(probe.predict(x[test]).numpy(), reference.predict(x[test]))
    distances, neighbours = reference.kneighbors(x[test].numpy())
    sims, ours = probe.kneighbors(x[test])
    train_rows = train.nonzero().view(-1).numpy()
    assert all(set(a) == set(b) for a, b in zip(train_rows[ours.numpy()], train_rows[neighbours]))
    np.testing.assert_allclose(sims.numpy(), 1.0 - distances, atol=1e-12)


def test_knn_exp_weighting_and_ties_known_answers() -> None:
    # Query (1, 0). Class 5: one neighbour at similarity 0.99; class 2: two at 0.8.
    def unit(cosine: float) -> list[float]:
        return [cosine, (1 - cosine * cosine) ** 0.5]

    train = torch.tensor([unit(0.99), unit(0.8), unit(0.8), [-1.0, 0.0]], dtype=torch.float64)
    labels = torch.tensor([5, 2, 2, 9])
    query = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    exp = KNNProbe(k=3).fit(train, labels)
    uniform = KNNProbe(k=3, weighting="uniform").fit(train, labels)
    # exp(0.99 / 0.07) > 2 exp(0.8 / 0.07): the close neighbour wins; a majority vote does not.
    assert exp.predict(query).tolist() == [5]
    assert uniform.predict(query).tolist() == [2]
    # One vote each for classes 9 and 5 -> the smallest class id.
    tie = KNNProbe(k=2, weighting="uniform").fit(train[[0, 3]], torch.tensor([9, 5]))
    assert tie.predict(query).tolist() == [5]


def test_knn_predictions_do_not_depend_on_chunk_size() -> None:
    x, y, train, val, test = _problem(n=600, d=16, c=4, noise=3.0)
    big = KNNProbe(k=10, chunk_size=100_000).fit(x, y, train)
    one = KNNProbe(k=10, chunk_size=1).fit(x, y, train)
    for a, b in zip(big.kneighbors(x[test]), one.kneighbors(x[test])):
        assert torch.equal(a, b)
    assert KNNProbe(k=10, chunk_size=7).evaluate(x, y, train, val, test) == big.evaluate(
        x, y, train, val, test
    )


def test_knn_near_duplicate_training_rows_take_the_exact_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(4)
    base = rng.normal(size=(1, 8))
    train = torch.from_numpy(
        np.concatenate([base + 1e-9 * rng.normal(size=(60, 8)), rng.normal(size=(40, 8))])
    )
    labels = torch.from_numpy(rng.integers(0, 3, 100))
    query = torch.from_numpy(base + 1e-3 * rng.normal(size=(5, 8)))
    calls: list[int] = []
    original = KNNProbe._rescore

    def spy(self: KNNProbe, q: Tensor, cand: Tensor) -> tuple[Tensor, Tensor]:
        calls.append(q.shape[0])
        return original(self, q, cand)

    monkeypatch.setattr(KNNProbe, "_rescore", spy)
    sims, _ = KNNProbe(k=3, chunk_size=64).fit(train, labels).kneighbors(query)
    assert calls == [5, 5]  # screening not conclusive: every row re-screened in float64
    unit = train / train.norm(dim=1, keepdim=True)
    reference = (query / query.norm(dim=1, keepdim=True)) @ unit.T
    torch.testing.assert_close(sims, reference.topk(3, dim=1).values, atol=1e-15, rtol=0)


# --------------------------------------------------------------------------- aggregate
def test_mean_std() -> None:
    runs = [
        {"test_acc": 0.5, "converged": True, "k": 20, "name": "a"},
        {"test_acc": 1.0, "converged": False, "k": 20, "name": "b"},
    ]
    assert mean_std(runs) == {
        "test_acc": 0.75,
        "test_acc_std": 0.25,
        "converged": 0.5,
        "converged_std": 0.5,
        "k": 20.0,
        "k_std": 0.0,
    }
    assert mean_std(runs, ddof=1)["test_acc_std"] == pytest.approx(np.std([0.5, 1.0], ddof=1))
    assert mean_std([{"acc": torch.tensor(0.5)}, {"acc": np.float32(0.25)}])["acc"] == 0.375
    with pytest.raises(ValueError, match="non-empty"):
        mean_std([])
    with pytest.raises(ValueError, match="'test_acc' is missing from runs \\[1\\]"):
        mean_std([{"test_acc": 0.5}, {"val_acc": 0.5}])


# -------------------------------------------------------------------- validation errors
def _evaluators() -> list[Callable[[], Any]]:
    return [
        lambda: LogRegProbe(weight_decay=1e-2),
        lambda: RidgeProbe(weight_decay=1e-2),
        lambda: KNNProbe(k=3),
    ]


@pytest.fixture(params=["logreg", "ridge", "knn"])
def make_probe(request: pytest.FixtureRequest) -> Callable[[], Any]:
    return dict(zip(["logreg", "ridge", "knn"], _evaluators()))[request.param]


def _inputs() -> dict[str, Any]:
    x, y, train, val, test = _problem(n=40, d=4, c=2)
    return {"embeddings": x, "labels": y, "train_mask": train, "val_mask": val, "test_mask": test}


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        (
            lambda a: a["embeddings"].index_fill_(0, torch.tensor([3]), float("nan")),
            ValueError,
            "1 of 40 rows with NaN or Inf",
        ),
        (
            lambda a: a["embeddings"].index_fill_(0, torch.tensor([5]), float("inf")),
            ValueError,
            "NaN or Inf",
        ),
        (lambda a: a.update(embeddings=a["embeddings"][:, 0]), ValueError, "got 1-D"),
        (lambda a: a.update(embeddings=a["embeddings"][:, :, None]), ValueError, "got 3-D"),
        (lambda a: a.update(embeddings=a["embeddings"].long()), TypeError, "floating dtype"),
        (
            lambda a: a.update(test_mask=torch.zeros(40, dtype=torch.bool)),
            ValueError,
            "test_mask split is empty",
        ),
        (lambda a: a.update(labels=None), ValueError, "labels absent"),
        (
            lambda a: a.update(labels=a["labels"][:30]),
            ValueError,
            "embeddings have 40 rows but labels have 30",
        ),
    ],
)
def test_input_errors_name_the_value(
    make_probe: Callable[[], Any],
    change: Callable[[dict[str, Any]], Any],
    error: type,
    match: str,
) -> None:
    args = _inputs()
    change(args)
    with pytest.raises(error, match=match):
        make_probe().evaluate(**args)


@pytest.mark.parametrize("probe", [LogRegProbe, KNNProbe])
def test_classification_label_errors(probe: Callable[[], Any]) -> None:
    args = _inputs()
    labels = args["labels"].double()
    labels[2] = float("nan")
    with pytest.raises(ValueError, match="labels have 1 NaN values"):
        probe().evaluate(**{**args, "labels": labels})
    one_class = torch.where(args["train_mask"], 1, args["labels"])
    with pytest.raises(ValueError, match=r"training split has 1 class \(\[1\]\).*at least 2"):
        probe().evaluate(**{**args, "labels": one_class})
    with pytest.raises(ValueError, match="found 1 negative"):
        probe().evaluate(
            **{**args, "labels": torch.where(torch.arange(40) == 0, -1, args["labels"])}
        )


def test_constructor_errors() -> None:
    with pytest.raises(ValueError, match=r"weight_decay must be one or more values >= 0, got -0.1"):
        LogRegProbe(weight_decay=-0.1)
    with pytest.raises(ValueError, match=r"weight_decay must be .* got \[0.1, -1.0\]"):
        RidgeProbe(weight_decay=[0.1, -1.0])
    with pytest.raises(ValueError, match=r"weight_decay must be .* got \[\]"):
        LogRegProbe(weight_decay=[])
    with pytest.raises(ValueError, match=r"weight_decay must be .* got nan"):
        RidgeProbe(weight_decay=float("nan"))
    for max_iter in (0, -5):
        with pytest.raises(ValueError, match=f"max_iter must be > 0, got {max_iter}"):
            LogRegProbe(max_iter=max_iter)
    for chunk_size in (0, -1):
        with pytest.raises(ValueError, match=f"chunk_size must be > 0, got {chunk_size}"):
            KNNProbe(chunk_size=chunk_size)
    with pytest.raises(ValueError, match="k must be a positive integer, got 0"):
        KNNProbe(k=0)
    with pytest.raises(ValueError, match="Could not resolve weighting 'cosine' among choices"):
        KNNProbe(weighting="cosine")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="temperature must be a finite value > 0, got 0"):
        KNNProbe(temperature=0)


def test_knn_k_larger_than_the_training_split() -> None:
    args = _inputs()
    with pytest.raises(ValueError, match=r"k=21 is larger than the training split \(20 rows\)"):
        KNNProbe(k=21).evaluate(**args)


def test_ridge_rejects_nan_targets() -> None:
    args = _inputs()
    targets = args["labels"].double()
    targets[25] = float("nan")
    with pytest.raises(ValueError, match="targets have 1 NaN or Inf values"):
        RidgeProbe().evaluate(**{**args, "labels": targets})


def test_logreg_starts_at_the_zero_weight_optimum_and_warm_starts_save_iterations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    x, y, train, val, _ = _problem(n=600, noise=2.0, seed=2)
    # with a huge L2 term the weights stay ~0 and the bias is the start: log class frequencies
    huge = LogRegProbe(weight_decay=1e6).fit(x, y, train, val)
    counts = torch.bincount(y[train]).double()
    log_freq = torch.log(counts / counts.sum())
    torch.testing.assert_close(huge.intercept_, log_freq - log_freq.mean(), atol=1e-4, rtol=0)
    assert float(huge.coef_.abs().max()) < 1e-3
    iterations: list[int] = []
    original = linear_probe._minimize_lbfgs

    def counting(objective: Any, theta0: Tensor, max_iter: int) -> tuple[Tensor, int, bool]:
        out = original(objective, theta0, max_iter)
        iterations.append(out[1])
        return out

    monkeypatch.setattr(linear_probe, "_minimize_lbfgs", counting)
    warm = LogRegProbe(weight_decay=DEFAULT_WEIGHT_DECAYS).fit(x, y, train, val)
    warm_iterations = sum(iterations)
    iterations.clear()
    cold = LogRegProbe(weight_decay=DEFAULT_WEIGHT_DECAYS, warm_start=False)
    cold.fit(x, y, train, val)
    assert warm_iterations < sum(iterations)
    assert cold.val_metrics_per_weight_decay_.keys() == warm.val_metrics_per_weight_decay_.keys()
    assert "warm_start=False" in repr(cold)
