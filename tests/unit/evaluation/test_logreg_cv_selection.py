"""LogRegProbe's two selections of the L2 strength: on the validation split (``"split"``) and by
stratified inner cross-validation on the training and validation rows (``"cv"``), and the
per-fold values an evaluation over k folds logs."""

from __future__ import annotations

import math
import re
import warnings

import numpy as np
import pytest
import torch

from graphssl.evaluation.logreg_probe import (
    LogRegProbe,
    _design,
    _minimize_lbfgs,
    _softmax_objective,
    initial_bias,
)
from graphssl.evaluation.probe_inputs import encode_classes, standardization
from graphssl.evaluation.runner import run_probes
from graphssl.evaluation.svc_probe import SVCProbe

#: strongest first; stops at 0.01, where every fit is strictly convex and unique enough that
#: scikit-learn's solver and the probe's predict the same held-out rows
GRID = (30.0, 3.0, 1.0, 0.3, 0.1, 0.03, 0.01)


def _blobs(seed: int, n: int = 180, d: int = 30, c: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """``c`` Gaussian classes whose centres are close in ``d`` noisy dimensions: with 150
    training rows a strong L2 term wins, and the accuracy curve over the grid has one peak."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % c
    centres = 0.35 * torch.randn(c, d, generator=g, dtype=torch.float64)
    return centres[y] + torch.randn(n, d, generator=g, dtype=torch.float64), y


def _split(seed: int, n: int = 180) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """An outer fold: 120 training, 15 validation and 45 test rows."""
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed + 100))
    return perm[:120], perm[120:135], perm[135:]


def _reference_cv_scores(
    x: torch.Tensor, y: torch.Tensor, fit_rows: torch.Tensor, seed: int, folds: int = 5
) -> tuple[dict[float, list[float]], float]:
    """The inner cross-validation written out: scikit-learn's ``StratifiedKFold`` on the outer
    training rows, the probe on every inner fold with its own validation-split selection (the
    held-out fold as validation rows), and the strength with the best mean accuracy, the
    strongest on ties."""
    from sklearn.model_selection import StratifiedKFold

    per_fold: dict[float, list[float]] = {lam: [] for lam in GRID}
    cv = StratifiedKFold(folds, shuffle=True, random_state=seed)
    for tr, va in cv.split(np.zeros((fit_rows.numel(), 1)), y[fit_rows].numpy()):
        probe = LogRegProbe(weight_decay=GRID)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the strongest value may win on an inner fold
            probe.fit(x, y, fit_rows[torch.as_tensor(tr)], fit_rows[torch.as_tensor(va)])
        for lam, score in probe.val_metrics_per_weight_decay_.items():
            per_fold[lam].append(score)
    best = None
    for lam in GRID:
        mean = math.fsum(per_fold[lam]) / folds
        if best is None or mean > best[0]:
            best = (mean, lam)
    assert best is not None
    return per_fold, best[1]


@pytest.mark.parametrize("seed", [1, 3, 5])
def test_inner_cv_matches_a_stratified_kfold_loop_over_the_probe(seed: int) -> None:
    x, y = _blobs(seed)
    train, val, test = _split(seed)
    fit_rows = torch.cat([train, val])
    probe = LogRegProbe(weight_decay=GRID, selection="cv", seed=seed)
    out = probe.evaluate(x, y, train, val, test)
    per_fold, chosen = _reference_cv_scores(x, y, fit_rows, seed)
    assert probe.fold_metrics_per_weight_decay_ == per_fold  # same folds, same path, same fits
    assert out["weight_decay"] == chosen == probe.weight_decay_
    assert out["val_acc"] == math.fsum(per_fold[chosen]) / 5
    assert out["inner_folds"] == 5


@pytest.mark.parametrize("seed", [1, 3, 5])
def test_inner_cv_picks_what_sklearn_logistic_regression_picks(seed: int) -> None:
    """The same selection with scikit-learn's own solver: ``LogisticRegression`` minimises
    ``C · Σ CE + ½‖W‖²``, the probe's objective ``mean CE + λ/2 ‖W‖²`` at ``C = 1 / (n λ)``."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold
    from sklearn.preprocessing import StandardScaler

    x, y = _blobs(seed)
    train, val, test = _split(seed)
    fit_rows = torch.cat([train, val])
    xr, yr = x[fit_rows].numpy(), y[fit_rows].numpy()
    scores: dict[float, list[float]] = {lam: [] for lam in GRID}
    for tr, va in StratifiedKFold(5, shuffle=True, random_state=seed).split(xr, yr):
        scaler = StandardScaler().fit(xr[tr])
        for lam in GRID:
            model = LogisticRegression(C=1.0 / (len(tr) * lam), max_iter=10_000, tol=1e-8)
            model.fit(scaler.transform(xr[tr]), yr[tr])
            scores[lam].append(float(np.mean(model.predict(scaler.transform(xr[va])) == yr[va])))
    means = [math.fsum(scores[lam]) / 5 for lam in GRID]
    reference = GRID[int(np.argmax(means))]  # the first maximum: the strongest on ties
    probe = LogRegProbe(weight_decay=GRID, selection="cv", seed=seed)
    out = probe.evaluate(x, y, train, val, test)
    assert out["weight_decay"] == reference
    for lam, mean in zip(GRID, means, strict=True):  # at most one held-out row apart per fold
        assert abs(probe.val_metrics_per_weight_decay_[lam] - mean) <= 1.0 / len(yr) + 1e-12


def test_the_refit_uses_every_outer_training_row_and_scores_the_test_rows() -> None:
    """Without warm starts the refit is one fit of the selected strength from the probe's
    deterministic start on the training and validation rows: a one-value probe fitted on them."""
    x, y = _blobs(3)
    train, val, test = _split(3)
    fit_rows = torch.cat([train, val])
    cv = LogRegProbe(weight_decay=GRID, selection="cv", seed=3, warm_start=False)
    out = cv.evaluate(x, y, train, val, test)
    single = LogRegProbe(weight_decay=out["weight_decay"]).fit(x, y, fit_rows, fit_rows)
    torch.testing.assert_close(cv.coef_, single.coef_, rtol=0, atol=0)
    assert torch.equal(cv.predict(x[test]), single.predict(x[test]))
    assert out["test_acc"] == float((single.predict(x[test]) == y[test]).double().mean())
    assert out["train_acc"] == float((single.predict(x[fit_rows]) == y[fit_rows]).double().mean())
    # with warm starts the refit walks the path down to the same strength: the same optimum
    warm = LogRegProbe(weight_decay=GRID, selection="cv", seed=3)
    assert warm.evaluate(x, y, train, val, test)["weight_decay"] == out["weight_decay"]
    torch.testing.assert_close(warm.coef_, single.coef_, rtol=0, atol=2e-3)


def test_the_inner_folds_follow_the_seed_and_the_rarest_class() -> None:
    x, y = _blobs(1)
    train, val, test = _split(1)
    a = LogRegProbe(weight_decay=GRID, selection="cv", seed=0).evaluate(x, y, train, val, test)
    b = LogRegProbe(weight_decay=GRID, selection="cv", seed=0).evaluate(x, y, train, val, test)
    assert a == b
    other = LogRegProbe(weight_decay=GRID, selection="cv", seed=7)
    other.evaluate(x, y, train, val, test)
    first = LogRegProbe(weight_decay=GRID, selection="cv", seed=0)
    first.evaluate(x, y, train, val, test)
    assert other.fold_metrics_per_weight_decay_ != first.fold_metrics_per_weight_decay_
    # a class with 3 training rows allows 3 stratified folds, not 5
    y_rare = y.clone()
    rare = torch.cat([train, val])[y[torch.cat([train, val])] == 2]
    y_rare[rare[3:]] = 1
    few = LogRegProbe(weight_decay=GRID, selection="cv", inner_folds=5)
    assert few.evaluate(x, y_rare, train, val, test)["inner_folds"] == 3
    y_single = y.clone()
    y_single[rare[1:]] = 1
    with pytest.raises(ValueError, match="at least 2 training rows of every class"):
        few.evaluate(x, y_single, train, val, test)


def test_early_stop_counts_drops_of_the_mean_inner_cv_accuracy() -> None:
    x, y = _blobs(3)
    train, val, test = _split(3)
    whole = LogRegProbe(weight_decay=GRID, selection="cv", seed=3)
    whole.evaluate(x, y, train, val, test)
    means = whole.val_metrics_per_weight_decay_
    stopped = LogRegProbe(weight_decay=GRID, selection="cv", seed=3, early_stop=1)
    out = stopped.evaluate(x, y, train, val, test)
    fitted = list(stopped.val_metrics_per_weight_decay_)
    assert fitted == list(GRID[: len(fitted)]) and len(fitted) < len(GRID)
    assert all(means[lam] == stopped.val_metrics_per_weight_decay_[lam] for lam in fitted)
    assert means[fitted[-1]] < means[out["weight_decay"]]  # it stopped after one drop
    assert out["weight_decay"] == whole.weight_decay_  # one peak: the same choice


def _split_reference(
    x: torch.Tensor,
    y: torch.Tensor,
    rows: dict[str, torch.Tensor],
    grid: tuple[float, ...],
) -> dict[str, float]:
    """The validation-split selection written out from the metrics spec (§11.1): standardise
    with the training rows' statistics, walk the grid from the strongest value with warm
    starts (the first from zero weights and the bias at its optimum for them), select the best
    validation accuracy (the strongest on ties) and report every split for it."""
    x_train = x[rows["train"]].to(torch.float64)
    mean, scale = standardization(x_train, True)
    xt = _design(x_train, mean, scale)
    classes, encoded = encode_classes(y[rows["train"]])
    theta = xt.new_zeros(x.shape[1] + 1, classes.numel())
    theta[-1] = initial_bias(encoded, classes.numel(), False)
    theta = theta.view(-1)

    def accuracy(w: torch.Tensor, split: str) -> float:
        r = rows[split]
        logits = ((x[r].to(torch.float64) - mean) / scale) @ w[:-1] + w[-1]
        return float((classes[logits.argmax(dim=1)] == y[r]).sum()) / r.numel()

    best: tuple[float, float, torch.Tensor, bool] | None = None
    for lam in grid:
        objective = _softmax_objective(xt, encoded, classes.numel(), lam)
        theta, _, converged = _minimize_lbfgs(objective, theta, 5000)
        w = theta.view(x.shape[1] + 1, classes.numel())
        score = accuracy(w, "val")
        if best is None or score > best[0]:
            best = (score, lam, w.clone(), converged)
    assert best is not None
    _, lam, w, converged = best
    out = {f"{split}_acc": accuracy(w, split) for split in ("train", "val", "test")}
    return {**out, "weight_decay": lam, "converged": converged}


@pytest.mark.parametrize("seed", [0, 3])
def test_split_selection_is_the_validation_split_protocol(seed: int) -> None:
    """``selection="split"`` (the default) is the selection the probe has always made: the
    written-out protocol gives the same numbers, bit for bit, and no inner-CV keys."""
    x, y = _blobs(seed)
    train, val, test = _split(seed)
    rows = {"train": train, "val": val, "test": test}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        explicit = LogRegProbe(weight_decay=GRID, selection="split").evaluate(
            x, y, train, val, test
        )
        default = LogRegProbe(weight_decay=GRID).evaluate(x, y, train, val, test)
    assert explicit == default == _split_reference(x, y, rows, GRID)
    assert LogRegProbe().per_split_keys == ()


def test_the_evaluation_logs_each_folds_selected_strength() -> None:
    """Over k folds, a CV-selecting probe logs every fold's selected strength beside the mean;
    the validation-split probe logs what it always did."""
    x, y = _blobs(5)
    splits = [_split(s) for s in range(3)]

    class Split:
        def __init__(self, train: torch.Tensor, val: torch.Tensor, test: torch.Tensor) -> None:
            self.train, self.val, self.test = train, val, test

    folds = [Split(*s) for s in splits]
    probes = {
        "cv": LogRegProbe(weight_decay=GRID, selection="cv", seed=5),
        "split": LogRegProbe(weight_decay=GRID),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = run_probes(x, y, folds, probes)
        each = [
            LogRegProbe(weight_decay=GRID, selection="cv", seed=5).evaluate(x, y, *s)
            for s in splits
        ]
    for i, result in enumerate(each):
        assert out[f"probe/cv/weight_decay_fold{i}"] == result["weight_decay"]
    assert "probe/cv/weight_decay_fold3" not in out
    assert out["probe/cv/weight_decay"] == pytest.approx(np.mean([r["weight_decay"] for r in each]))
    assert out["probe/cv/val_acc"] == pytest.approx(np.mean([r["val_acc"] for r in each]))
    assert out["probe/cv/inner_folds"] == 5.0
    assert not [k for k in out if k.startswith("probe/split/") and re.search(r"_fold\d", k)]
    assert "probe/split/inner_folds" not in out
    # one split: its value is the plain key, with nothing per fold
    single = run_probes(x, y, folds[:1], {"cv": probes["cv"]})
    assert single["probe/cv/weight_decay"] == each[0]["weight_decay"]
    assert not [k for k in single if re.search(r"_fold\d", k)]


def test_the_svm_logs_each_folds_selected_c() -> None:
    x, y = _blobs(5)
    splits = [_split(s) for s in range(2)]

    class Split:
        def __init__(self, train: torch.Tensor, val: torch.Tensor, test: torch.Tensor) -> None:
            self.train, self.val, self.test = train, val, test

    out = run_probes(x, y, [Split(*s) for s in splits], {"svc": SVCProbe(C=[0.1, 10.0])})
    for i, s in enumerate(splits):
        assert out[f"probe/svc/C_fold{i}"] == SVCProbe(C=[0.1, 10.0]).evaluate(x, y, *s)["C"]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"selection": "inner"}, ValueError, "'inner'"),
        ({"selection": "cv", "multilabel": True}, ValueError, "single-label"),
        ({"inner_folds": 1}, ValueError, "inner_folds"),
        ({"seed": 1.5}, TypeError, "seed"),
    ],
)
def test_bad_selection_settings_name_the_value(
    kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        LogRegProbe(**kwargs)  # type: ignore[arg-type]


def test_clone_keeps_the_selection() -> None:
    probe = LogRegProbe(selection="cv", inner_folds=4, seed=9)
    clone = probe.clone(weight_decay=0.1)
    assert (clone.selection, clone.inner_folds, clone.seed) == ("cv", 4, 9)
    assert "selection='cv'" in repr(clone)
