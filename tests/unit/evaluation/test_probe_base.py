"""The probe base class: one evaluate() for every probe, the task, the estimator contract."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor

from graphssl.evaluation.adam_probe import AdamLinearProbe
from graphssl.evaluation.cv_logreg_probe import CVLogRegProbe
from graphssl.evaluation.knn_probe import KNNProbe
from graphssl.evaluation.logreg_probe import LogRegProbe
from graphssl.evaluation.probe import SPLITS, Probe, Task
from graphssl.evaluation.ridge_probe import RidgeProbe
from graphssl.evaluation.svc_probe import SVCProbe


def _problem() -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    g = torch.Generator().manual_seed(0)
    y = torch.arange(240) % 3
    x = 2.0 * torch.randn(3, 8, generator=g)[y] + torch.randn(240, 8, generator=g)
    perm = torch.randperm(240, generator=g)
    return x, y, perm[:90], perm[90:150], perm[150:]


@pytest.mark.parametrize(
    ("probe", "task"),
    [
        (LogRegProbe(), "classification"),
        (LogRegProbe(multilabel=True), "multilabel"),
        (KNNProbe(), "classification"),
        (AdamLinearProbe(), "classification"),
        (SVCProbe(), "classification"),
        (CVLogRegProbe(), "classification"),
        (RidgeProbe(), "regression"),
    ],
)
def test_every_probe_is_a_probe_with_its_task(probe: Probe, task: Task) -> None:
    assert isinstance(probe, Probe)
    assert probe.task == task


def test_adam_fit_keeps_the_best_validation_epoch() -> None:
    x, y, train, val, test = _problem()
    out = AdamLinearProbe(epochs=40).evaluate(x, y, train, val, test)
    probe = AdamLinearProbe(epochs=40).fit(x, y, train, val)
    assert isinstance(probe, AdamLinearProbe)
    assert probe.best_epoch_ == out["best_epoch"]
    for split, rows in zip(SPLITS, (train, val, test), strict=True):
        acc = float((probe.predict(x[rows]) == y[rows]).float().mean())
        assert acc == pytest.approx(out[f"{split}_acc"], abs=1e-7)


@pytest.mark.parametrize("cls", [SVCProbe, CVLogRegProbe])
def test_grid_search_probes_fit_what_evaluate_reports(cls: type[Probe]) -> None:
    x, y, train, val, test = _problem()
    probe: Any = cls(C=[0.1, 10.0])  # type: ignore[call-arg]
    out = probe.evaluate(x, y, train, val, test)
    fitted = cls(C=[0.1, 10.0])  # type: ignore[call-arg]
    if cls is SVCProbe:
        fitted = fitted.fit(x, y, train, val)  # type: ignore[attr-defined]
        assert fitted.cv_acc_ == out["val_acc"]
    else:
        fitted = fitted.fit(x, y, train)  # type: ignore[attr-defined]
        assert fitted.cv_acc_ == out["cv_acc"]
    assert out["C"] == fitted.C_
    acc = float((torch.as_tensor(fitted.predict(x[test])) == y[test]).double().mean())
    assert acc == out["test_acc"]
    with pytest.raises(RuntimeError, match="not fitted"):
        cls().predict(x)  # type: ignore[attr-defined]


class _MeanProbe(Probe):
    """Predicts the training mean: what a subclass receives from evaluate()."""

    def __init__(self, task: Task = "regression") -> None:
        self._task = task

    @property
    def task(self) -> Task:
        return self._task

    def _evaluate(self, x: Tensor, targets: Tensor, rows: dict[str, Tensor]) -> dict[str, Any]:
        assert list(rows) == list(SPLITS) and x.dtype == torch.float64
        mean = targets[rows["train"]].mean()
        return {f"{s}_mae": float((targets[r] - mean).abs().mean()) for s, r in rows.items()}


def test_a_new_probe_gets_validated_inputs_for_its_task() -> None:
    x, _, train, val, test = _problem()
    target = torch.arange(240, dtype=torch.float32)
    out = _MeanProbe().evaluate(x, target, train, val, test)
    assert set(out) == {"train_mae", "val_mae", "test_mae"}
    target[test[0]] = float("nan")
    with pytest.raises(ValueError, match="targets have 1 NaN or Inf values"):
        _MeanProbe().evaluate(x, target, train, val, test)
    with pytest.raises(ValueError, match="labels absent"):
        _MeanProbe().evaluate(x, None, train, val, test)
    with pytest.raises(ValueError, match="task must be one of"):
        _MeanProbe(task="ranking").evaluate(x, target, train, val, test)  # type: ignore[arg-type]
