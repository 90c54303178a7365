"""The logistic-regression probe's early stop of its walk down the L2 grid: it ends after
``early_stop`` consecutive values scoring below the best validation metric so far, and with the
default it selects the same L2 strength, with the same test accuracy, as the whole grid on
Cora embeddings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from graphssl.evaluation import logreg_probe as linear_probe
from graphssl.evaluation.logreg_probe import (
    DEFAULT_EARLY_STOP,
    DEFAULT_WEIGHT_DECAYS,
    LogRegProbe,
)
from graphssl.tasks.components import (
    build_datamodule,
    build_evaluation,
    build_method,
    resolve_config,
)
from graphssl.utils import seed_everything

CONF = Path(__file__).resolve().parents[3] / "conf"


def _scripted(monkeypatch: pytest.MonkeyPatch, scores: list[float]) -> list[float]:
    """Make each validation score of the walk the next of ``scores``; returns the scores
    handed out."""
    given: list[float] = []
    it: Iterator[float] = iter(scores)

    def metric(self: Any, x: Any, rows: Any, target: Any) -> float:
        given.append(next(it))
        return given[-1]

    monkeypatch.setattr(LogRegProbe, "_metric", metric)
    return given


def test_the_walk_ends_after_k_values_below_the_best(monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.randn(60, 4, generator=torch.Generator().manual_seed(0))
    y = torch.arange(60) % 3
    train, val = torch.arange(0, 40), torch.arange(40, 60)
    # below the best (0.6) at the 3rd, 4th and 5th values; a score equal to the best (7th)
    # ends the run
    scores = [0.5, 0.6, 0.55, 0.5, 0.45, 0.7, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2]
    given = _scripted(monkeypatch, scores)
    probe = LogRegProbe(early_stop=3).fit(x, y, train, val)
    assert given == scores[:5] and probe.weight_decay_ == DEFAULT_WEIGHT_DECAYS[1]
    assert list(probe.val_metrics_per_weight_decay_) == list(DEFAULT_WEIGHT_DECAYS[:5])
    given = _scripted(monkeypatch, scores)
    probe = LogRegProbe(early_stop=4).fit(x, y, train, val)
    assert given == scores[:11] and probe.weight_decay_ == DEFAULT_WEIGHT_DECAYS[5]
    given = _scripted(monkeypatch, scores)
    probe = LogRegProbe(early_stop=None).fit(x, y, train, val)
    assert given == scores and probe.weight_decay_ == DEFAULT_WEIGHT_DECAYS[5]
    # below the best without falling each time (0.6, 0.65, 0.6): still three in a row
    wavy = [0.5, 0.7, 0.6, 0.65, 0.6, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8]
    given = _scripted(monkeypatch, wavy)
    probe = LogRegProbe(early_stop=3).fit(x, y, train, val)
    assert given == wavy[:5] and probe.weight_decay_ == DEFAULT_WEIGHT_DECAYS[1]


def test_early_stop_is_a_checked_parameter() -> None:
    assert LogRegProbe().early_stop is None and DEFAULT_EARLY_STOP == 3  # off unless asked
    assert LogRegProbe(early_stop=2).clone().early_stop == 2
    assert LogRegProbe(early_stop=None).clone(max_iter=10).early_stop is None
    assert "early_stop=None" in repr(LogRegProbe(early_stop=None))
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="early_stop must be a positive integer"):
            LogRegProbe(early_stop=bad)  # type: ignore[arg-type]


def _cora_embeddings(data_dir: Path, tmp_path: Path) -> dict[str, Any]:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = resolve_config(
            compose(
                config_name="train",
                overrides=[
                    "dataset=cora",
                    "model=dgi",
                    "trainer.epochs=20",
                    "trainer.patience=null",
                    "trainer.progress=false",
                    f"paths.data_dir={data_dir}",
                    f"paths.outputs_dir={tmp_path}",
                ],
            )
        )
    dm = build_datamodule(cfg)
    evaluation = build_evaluation(cfg)
    seed_everything(0)
    method = build_method(cfg, dm)
    untrained, y = evaluation.extract(method, dm)
    instantiate(cfg.trainer, callbacks=[], checkpoint_every=None).fit(method, dm)
    trained, _ = evaluation.extract(method, dm)
    return {
        "y": y,
        "split": dm.splits()[0],
        "raw": dm.data.x,
        "untrained": untrained,
        "dgi_20_epochs": trained,
    }


def test_the_default_selects_as_the_whole_grid_on_cora(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        data = _cora_embeddings(data_dir, tmp_path)
        split, y = data["split"], data["y"]
        fits: list[int] = []
        original = linear_probe._minimize_lbfgs

        def counting(objective: Any, theta0: Any, max_iter: int) -> Any:
            fits.append(1)
            return original(objective, theta0, max_iter)

        monkeypatch.setattr(linear_probe, "_minimize_lbfgs", counting)
        for name in ("raw", "untrained", "dgi_20_epochs"):
            z = data[name]
            whole = LogRegProbe(early_stop=None)
            full = whole.evaluate(z, y, split.train, split.val, split.test)
            fits.clear()
            early = LogRegProbe(early_stop=DEFAULT_EARLY_STOP)
            out = early.evaluate(z, y, split.train, split.val, split.test)
            assert out["weight_decay"] == full["weight_decay"], name
            assert out["test_acc"] == full["test_acc"], name
            assert out == full, name
            assert (
                len(fits) == len(early.val_metrics_per_weight_decay_) <= len(DEFAULT_WEIGHT_DECAYS)
            )
            curve = whole.val_metrics_per_weight_decay_
            assert early.val_metrics_per_weight_decay_ == {
                lam: curve[lam] for lam in early.val_metrics_per_weight_decay_
            }
    finally:
        torch.set_num_threads(prev)
