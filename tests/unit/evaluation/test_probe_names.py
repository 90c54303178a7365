"""One name per probe across classes, files and config keys; the names before the rename keep
working for one release, each use with a DeprecationWarning."""

from __future__ import annotations

import importlib

import pytest
from hydra.utils import instantiate

from graphssl.evaluation import KNNProbe, LogRegProbe, RidgeProbe
from graphssl.evaluation.adam_probe import AdamLinearProbe
from graphssl.evaluation.cv_logreg_probe import CVLogRegProbe
from graphssl.evaluation.svc_probe import SVCProbe

OLD = [
    ("graphssl.evaluation.knn", "KNNEvaluator", KNNProbe),
    ("graphssl.evaluation.linear_probe", "LogRegEvaluator", LogRegProbe),
    ("graphssl.evaluation.regression_probe", "RidgeEvaluator", RidgeProbe),
    ("graphssl.evaluation.cv_logreg_probe", "CVLogRegEvaluator", CVLogRegProbe),
    ("graphssl.evaluation.svc_probe", "SVCEvaluator", SVCProbe),
    ("graphssl.evaluation.adam_probe", "AdamLinearEvaluator", AdamLinearProbe),
    ("graphssl.evaluation", "LogRegEvaluator", LogRegProbe),
]


@pytest.mark.parametrize(("module", "name", "new"), OLD)
def test_an_old_name_warns_and_is_the_new_class(module: str, name: str, new: type) -> None:
    with pytest.warns(DeprecationWarning, match=rf"{name} is deprecated.*{new.__name__}"):
        old = getattr(importlib.import_module(module), name)
    assert old is new


def test_a_stored_config_naming_an_old_target_still_builds() -> None:
    with pytest.warns(DeprecationWarning):
        probe = instantiate({"_target_": "graphssl.evaluation.knn.KNNEvaluator", "k": 3})
    assert isinstance(probe, KNNProbe) and probe.k == 3


def test_an_old_module_forwards_its_other_names_and_refuses_unknown_ones() -> None:
    import graphssl.evaluation.linear_probe as old

    with pytest.warns(DeprecationWarning, match="logreg_probe.DEFAULT_WEIGHT_DECAYS"):
        grid = old.DEFAULT_WEIGHT_DECAYS
    assert grid == importlib.import_module("graphssl.evaluation.logreg_probe").DEFAULT_WEIGHT_DECAYS
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = old.Nope


@pytest.mark.parametrize("cls", [LogRegProbe, KNNProbe, RidgeProbe, CVLogRegProbe, SVCProbe])
def test_every_probe_is_named_probe_in_a_probe_module(cls: type) -> None:
    assert cls.__name__.endswith("Probe") and cls.__module__.endswith("_probe")
    assert cls().clone().get_params() == cls().get_params()
