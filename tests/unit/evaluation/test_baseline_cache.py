"""The baseline cache: one computation per untrained encoder and evaluation, read back by the
next job of a sweep with exactly the metrics a fresh computation gives, and a new key whenever
anything that decides the untrained encoder changes."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from hydra import compose, initialize_config_dir
from mlflow.tracking import MlflowClient

from graphssl.evaluation.baseline_cache import BaselineCache, untrained_model_config
from graphssl.evaluation.evaluator import BASELINE_FROM, BASELINE_KEY
from graphssl.tasks.components import (
    baseline_key,
    build_datamodule,
    build_evaluation,
    build_method,
    resolve_config,
)
from graphssl.tasks.train import train
from graphssl.utils import seed_everything

CONF = Path(__file__).resolve().parents[3] / "conf"


def _cfg(outputs: Path, *overrides: str, model: str = "grace") -> Any:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(
            config_name="train",
            overrides=[
                "dataset=sbm",
                f"model={model}",
                "encoder.hidden_channels=32",
                "trainer.epochs=2",
                "trainer.progress=false",
                "eval.figures=false",
                "logger.log_embeddings=false",
                f"paths.outputs_dir={outputs}",
                *overrides,
            ],
        )


def _baseline_part(m: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in m.items() if "baseline" in k and not k.startswith("time/")}


def _same(a: dict[str, float], b: dict[str, float]) -> bool:
    """Equal keys and values, NaN equal to NaN."""
    return a.keys() == b.keys() and all(
        a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])) for k in a
    )


def _tags(outputs: Path) -> list[dict[str, str]]:
    """The tags of the runs in ``outputs``' store, oldest first."""
    client = MlflowClient(f"sqlite:///{outputs / 'mlflow.db'}")
    exp = client.get_experiment_by_name("graphssl")
    assert exp is not None
    runs = client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"])
    return [dict(r.data.tags) for r in runs]


def test_a_second_method_of_the_sweep_reuses_the_baseline_and_a_wider_encoder_does_not(
    outputs_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    folder = outputs_dir / "cache" / "baseline"
    first = train(_cfg(outputs_dir, "model.optimizer.lr=0.001", "model.tau=0.4"))
    (entry,) = folder.glob("*.json")
    # training-only hyperparameters and the epochs differ: the same untrained encoder
    second_overrides = ("model.optimizer.lr=0.01", "model.tau=0.7", "trainer.epochs=3")
    second = train(_cfg(outputs_dir, *second_overrides))
    assert sorted(folder.iterdir()) == [entry]  # nothing new written, no temporary left
    assert _same(_baseline_part(second), _baseline_part(first))
    assert "probe/logreg/baseline_test_acc" in second and "diag_baseline/stable_rank" in second
    assert second["probe/logreg/gain"] == (
        second["probe/logreg/test_acc"] - second["probe/logreg/baseline_test_acc"]
    )
    # exactly what a fresh computation of the second run gives
    fresh = train(_cfg(outputs_dir, *second_overrides, "eval.baseline_cache=false"))
    assert _same(_baseline_part(second), _baseline_part(fresh))
    assert {k for k in second if k.endswith("/gain")} == {k for k in fresh if k.endswith("/gain")}
    assert all(second[k] == fresh[k] for k in second if k.endswith("/gain"))

    # a wider encoder is another untrained encoder: a new entry, computed
    wider = train(_cfg(outputs_dir, "encoder.hidden_channels=48"))
    assert len(list(folder.glob("*.json"))) == 2
    assert _baseline_part(wider) != _baseline_part(first)

    tags = _tags(outputs_dir)
    key = entry.stem
    assert tags[0].get(BASELINE_KEY) == key and BASELINE_FROM not in tags[0]
    assert tags[1].get(BASELINE_FROM) == key and BASELINE_KEY not in tags[1]
    assert BASELINE_FROM not in tags[2] and BASELINE_KEY not in tags[2]  # cache off
    assert BASELINE_KEY in tags[3] and tags[3][BASELINE_KEY] != key
    stored = json.loads(entry.read_text())
    assert stored["key"] == key and stored["identity"]["seed"] == 0
    assert "optimizer" not in stored["identity"]["caller"]["model"]


def _key(outputs: Path, *overrides: str, model: str = "grace") -> str:
    cfg = resolve_config(_cfg(outputs, *overrides, model=model))
    dm = build_datamodule(cfg)
    evaluation = build_evaluation(cfg)
    identity = evaluation.baseline_identity(
        dm, baseline_key(cfg, dm), seed=int(cfg.seed), device=str(cfg.trainer.device)
    )
    assert identity is not None
    return BaselineCache.key(identity)


def test_the_key_changes_with_what_decides_the_baseline_only(tmp_path: Path) -> None:
    base = _key(tmp_path)
    for same in (
        "model.optimizer.lr=0.05",
        "model.tau=0.9",
        "trainer.epochs=7",
        "eval.figures=true",
        "callbacks.monitor.every=5",
        "logger.run_name=x",
    ):
        assert _key(tmp_path, same) == base, same
    for other in (
        "seed=1",
        "encoder.hidden_channels=64",
        "model.projection_dim=8",
        "dataset.p_in=0.2",
        "dataset.train_frac=0.4",
        "eval.max_rows=50",
        "eval.probes.logreg.max_iter=100",
        "eval.probes.knn.k=5",
        "eval.extraction.mini_batch=true",
    ):
        assert _key(tmp_path, other) != base, other
    assert _key(tmp_path, model="dgi") != base


def test_the_dropped_model_keys_leave_the_untrained_encoder_unchanged(tmp_path: Path) -> None:
    """The keys left out of the key (optimizer, scheduler, GRACE's tau) do not change the
    untrained embeddings."""

    def embeddings(*overrides: str) -> torch.Tensor:
        cfg = resolve_config(_cfg(tmp_path, *overrides))
        dm = build_datamodule(cfg)
        seed_everything(0)
        method = build_method(cfg, dm)
        return build_evaluation(cfg).extract(method, dm)[0]

    z = embeddings()
    assert torch.equal(z, embeddings("model.optimizer.lr=0.5", "model.tau=0.9"))
    assert torch.equal(
        z,
        embeddings(
            "model.scheduler={_target_:graphssl.training.schedules.CosineLR,_partial_:true}"
        ),
    )
    cfg = {"_target_": "graphssl.methods.grace.GRACE", "tau": 0.5, "optimizer": {}, "x": 1}
    assert untrained_model_config(cfg) == {"_target_": "graphssl.methods.grace.GRACE", "x": 1}
    own = {"_target_": "mypkg.Method", "tau": 0.5, "scheduler": None}
    assert untrained_model_config(own) == {"_target_": "mypkg.Method", "tau": 0.5}


def test_entries_round_trip_exactly_and_bad_entries_are_ignored(tmp_path: Path) -> None:
    cache = BaselineCache(tmp_path / "baseline")
    key = BaselineCache.key({"a": 1})
    assert cache.get(key) is None
    metrics = {"x": 0.1 + 0.2, "y": 1e-300, "z": float("nan"), "w": float("inf"), "v": 3.0}
    path = cache.put(key, metrics, {"a": 1})
    assert [p.name for p in path.parent.iterdir()] == [path.name]
    back = cache.get(key)
    assert back is not None and back.keys() == metrics.keys()
    assert all(back[k] == v or (math.isnan(v) and math.isnan(back[k])) for k, v in metrics.items())
    json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON {c}"))
    path.write_text("{not json")
    assert cache.get(key) is None
    path.write_text(json.dumps({"format": 1, "key": "0" * 64, "metrics": {}}))
    assert cache.get(key) is None  # another key's entry
    with pytest.raises(ValueError, match="64 hex"):
        cache.path("../escape")
    assert BaselineCache.key({"a": 1}) != BaselineCache.key({"a": 2})


def test_an_evaluation_built_in_code_keys_its_own_probes(tmp_path: Path) -> None:
    """Without a config naming them, the probes' parameters still reach the key."""
    from graphssl.evaluation import Evaluation
    from graphssl.evaluation.logreg_probe import LogRegProbe

    cfg = resolve_config(_cfg(tmp_path))
    dm = build_datamodule(cfg)

    def key(probe: LogRegProbe) -> str:
        identity = Evaluation(probes={"logreg": probe}).baseline_identity(
            dm, {"caller": "same"}, seed=0, device="cpu"
        )
        assert identity is not None
        return BaselineCache.key(identity)

    assert key(LogRegProbe(max_iter=100)) == key(LogRegProbe(max_iter=100))
    assert key(LogRegProbe(max_iter=100)) != key(LogRegProbe(max_iter=200))
