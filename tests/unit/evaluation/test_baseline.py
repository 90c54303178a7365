"""The untrained-encoder baseline: keys, gain, the methods without one, and a trained run that
is the same with the baseline on or off."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from hydra import compose, initialize_config_dir

from graphssl.evaluation import Evaluation
from graphssl.evaluation.evaluator import gains
from graphssl.methods.base import SSLMethod
from graphssl.methods.deepwalk import DeepWalk
from graphssl.methods.supervised import Supervised
from graphssl.tasks.components import (
    build_datamodule,
    build_evaluation,
    build_method,
    resolve_config,
)
from graphssl.tasks.train import summary_table, train

CONF = Path(__file__).resolve().parents[3] / "conf"


def _cfg(outputs: Path, *overrides: str) -> Any:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(
            config_name="train",
            overrides=[
                "dataset=sbm",
                "trainer.epochs=3",
                "trainer.progress=false",
                "eval.figures=false",
                "logger.log_embeddings=false",
                f"paths.outputs_dir={outputs}",
                *overrides,
            ],
        )


def test_gain_is_trained_minus_baseline_on_the_headline_metric() -> None:
    metrics = {
        "probe/logreg/test_acc": 0.8,
        "probe/logreg/baseline_test_acc": 0.7,
        "probe/logreg/val_acc": 0.9,  # not the headline
        "probe/logreg/baseline_val_acc": 0.1,
        "probe/ml/test_ap": 0.4,
        "probe/ml/baseline_test_ap": 0.5,
        "probe/ridge/test_mae": 0.3,
        "probe/ridge/baseline_test_mae": 0.5,
        "probe/knn/test_acc": 0.6,  # no baseline: no gain
        "diag/rankme": 3.0,
    }
    out = gains(metrics)
    assert set(out) == {"probe/logreg/gain", "probe/ml/gain", "probe/ridge/gain"}
    assert out["probe/logreg/gain"] == pytest.approx(0.1)
    assert out["probe/ml/gain"] == pytest.approx(-0.1)
    assert out["probe/ridge/gain"] == pytest.approx(0.2)  # lower error is a positive gain


def test_methods_without_a_baseline_are_decided_by_their_class() -> None:
    assert SSLMethod.has_untrained_baseline
    assert not Supervised.has_untrained_baseline and not DeepWalk.has_untrained_baseline


def untrained_baseline(cfg: Any, dm: Any, method: Any, trained: dict[str, float]) -> dict:
    """The run's evaluation's baseline of a fresh ``method`` of ``cfg``."""
    evaluation = build_evaluation(cfg)
    assert isinstance(evaluation, Evaluation)
    return evaluation.baseline(
        lambda: build_method(cfg, dm), dm, trained, seed=int(cfg.seed), device="cpu"
    )


def test_baseline_keys_rng_and_determinism(tmp_path: Path) -> None:
    cfg = resolve_config(_cfg(tmp_path))
    assert cfg.eval.baseline is True
    dm = build_datamodule(cfg)
    method = build_method(cfg, dm)
    assert build_evaluation(cfg).baseline_enabled and method.has_untrained_baseline
    torch.manual_seed(123)
    before = torch.get_rng_state()
    trained = {"probe/logreg/test_acc": 1.0}
    out = untrained_baseline(cfg, dm, method, trained)
    assert torch.equal(torch.get_rng_state(), before)  # the run's stream is untouched
    for p in ("logreg", "knn"):
        for key in ("val_acc", "test_acc"):
            assert 0.0 <= out[f"probe/{p}/baseline_{key}"] <= 1.0
    assert "probe/logreg/baseline_weight_decay" in out
    assert out["probe/logreg/gain"] == pytest.approx(1.0 - out["probe/logreg/baseline_test_acc"])
    assert "probe/knn/gain" not in out  # no trained knn metric given
    assert math.isfinite(out["diag_baseline/rankme"]) and "diag_baseline/mean_cosine" in out
    assert out["time/baseline_seconds"] >= 0
    again = untrained_baseline(cfg, dm, method, trained)
    same = {k: v for k, v in out.items() if not k.startswith(("time/", "mem/"))}
    assert same == {k: v for k, v in again.items() if not k.startswith(("time/", "mem/"))}

    off = resolve_config(_cfg(tmp_path, "eval.baseline=false"))
    assert untrained_baseline(off, dm, method, trained) == {}


def test_trained_metrics_are_the_same_with_the_baseline_on_or_off(
    outputs_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    # a sampled extraction and augmentations: every random draw would show
    on = train(_cfg(outputs_dir, "model=grace", "eval.extraction.mini_batch=true"))
    table = capsys.readouterr().out
    off = train(
        _cfg(outputs_dir, "model=grace", "eval.extraction.mini_batch=true", "eval.baseline=false")
    )

    def trained(m: dict[str, float]) -> dict[str, float]:
        return {
            k: v
            for k, v in m.items()
            if not k.startswith(("time/", "mem/", "diag_baseline/"))
            and "/baseline_" not in k
            and not k.endswith("/gain")
        }

    assert trained(on) == trained(off)
    assert not any("baseline" in k or k.endswith("/gain") for k in off)
    assert on["probe/logreg/gain"] == pytest.approx(
        on["probe/logreg/test_acc"] - on["probe/logreg/baseline_test_acc"]
    )
    assert "probe/knn/baseline_test_acc" in on and "diag_baseline/stable_rank" in on
    assert "probe/logreg/gain" in table and "probe/logreg/baseline_test_acc" in table
    assert "probe/logreg/gain" in summary_table(on, "h")


def test_baseline_under_a_row_cap(tmp_path: Path) -> None:
    """With eval.max_rows the probes also report the cap (eval/max_rows); the baseline probes
    run under the same cap and keep only their probe metrics."""
    cfg = resolve_config(_cfg(tmp_path, "eval.max_rows=50"))
    dm = build_datamodule(cfg)
    method = build_method(cfg, dm)
    out = untrained_baseline(cfg, dm, method, {"probe/logreg/test_acc": 1.0})
    assert 0.0 <= out["probe/logreg/baseline_test_acc"] <= 1.0
    assert not any(k.startswith("eval/") or "baseline_max_rows" in k for k in out)
