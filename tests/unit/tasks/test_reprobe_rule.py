"""The re-probe rule of the evaluate task: which stored embeddings may be probed again under the
config composed now (same training; probes, diagnostics, figures, logging and paths may differ)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig, OmegaConf

from graphssl.tasks.evaluate import (
    EvaluationRefused,
    config_differences,
    stored_run_of,
    training_config,
)
from graphssl.tracking import artifacts
from graphssl.tracking.store import TrackingStore

CONF = Path(__file__).resolve().parents[3] / "conf"


def _train_cfg(*overrides: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="train", overrides=["experiment=dgi_citeseer", *overrides])


def test_probes_diagnostics_logging_and_paths_are_free() -> None:
    base = training_config(_train_cfg())
    free = training_config(
        _train_cfg(
            "eval.probes.logreg.weight_decay=[1.0]",
            "eval.diagnostics.enabled=false",
            "eval.figures=false",
            "logger.run_name=other",
            "paths.outputs_dir=/tmp/elsewhere",
            "trainer.progress=false",
        )
    )
    assert free == base
    assert not any(k.startswith(("eval.probes.", "logger.", "paths.")) for k in base)
    assert "model.optimizer.lr" in base  # a training key decides the embeddings


def test_a_training_key_and_the_selection_probe_are_not_free() -> None:
    base = training_config(_train_cfg())
    changed = training_config(_train_cfg("model.optimizer.lr=0.5"))
    assert config_differences(base, changed) == [
        f"model.optimizer.lr: {base['model.optimizer.lr']!r} -> 0.5"
    ]
    # the probe callbacks.selection picks the weights with shapes the embeddings: it is kept
    selecting = training_config(_train_cfg("callbacks.selection.every=2"))
    other = training_config(
        _train_cfg("callbacks.selection.every=2", "eval.probes.logreg.weight_decay=[1.0]")
    )
    assert any(k.startswith("eval.probes.logreg.") for k in selecting)
    assert any("eval.probes.logreg.weight_decay" in d for d in config_differences(selecting, other))


def test_config_differences_name_absent_keys() -> None:
    assert config_differences({"a": 1, "b": 2}, {"a": 1, "c": 3}) == [
        "b: 2 -> '<absent>'",
        "c: '<absent>' -> 3",
    ]
    assert config_differences({"a": 1}, {"a": 1}) == []


@pytest.fixture
def store(outputs_dir: Path, monkeypatch: pytest.MonkeyPatch) -> TrackingStore:
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    return TrackingStore(f"sqlite:///{outputs_dir / 'mlflow.db'}", "reprobe")


def _stored_run(store: TrackingStore, tmp: Path, cfg: DictConfig, name: str) -> str:
    """A finished run that logged ``cfg`` as its ``config.yaml``."""
    client = MlflowClient(store.tracking_uri)
    exp = client.get_experiment_by_name("reprobe")
    exp_id = (
        exp.experiment_id
        if exp is not None
        else client.create_experiment("reprobe", artifact_location=(tmp / "art").as_uri())
    )
    rid = client.create_run(exp_id, run_name=name).info.run_id
    folder = tmp / rid
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    client.log_artifact(rid, str(folder / "config.yaml"))
    client.set_terminated(rid, "FINISHED")
    return rid


def test_stored_run_of_takes_the_newest_run_of_the_same_training(
    store: TrackingStore, tmp_path: Path
) -> None:
    three = _stored_run(store, tmp_path, _train_cfg("trainer.epochs=3"), "dgi")
    six = _stored_run(store, tmp_path, _train_cfg("trainer.epochs=6"), "dgi")
    newest_first = [artifacts.get_run(store, r) for r in (six, three)]
    dl = tmp_path / "dl"
    dl.mkdir()
    now = _train_cfg("trainer.epochs=3", "eval.probes.logreg.weight_decay=[1.0]")
    assert stored_run_of(store, newest_first, now, dl).run_id == three
    assert stored_run_of(store, newest_first, _train_cfg("trainer.epochs=6"), dl).run_id == six

    with pytest.raises(EvaluationRefused) as err:
        stored_run_of(store, newest_first, _train_cfg("trainer.epochs=9"), dl)
    message = str(err.value)
    assert "none of the 2 stored runs 'dgi'" in message and six in message
    assert "trainer.epochs: 6 -> 9" in message  # the newest run's differences
    with pytest.raises(EvaluationRefused, match="no stored run"):
        stored_run_of(store, [], now, dl)
    assert os.listdir(dl)  # the stored configs were read from the store
