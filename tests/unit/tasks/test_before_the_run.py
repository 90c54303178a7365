"""What the train task refuses or adjusts before it opens an MLflow run: a dataset that cannot be
loaded, a value of the wrong type, a kNN ``k`` larger than the training split. A refusal leaves
no run in the store (none marked FAILED); an adjustment is logged and the run trains."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from mlflow.tracking import MlflowClient

from graphssl.data.node import KarateClubDataModule
from graphssl.data.paths import DatasetNotFoundError
from graphssl.evaluation import Evaluation
from graphssl.evaluation.knn_probe import KNNProbe
from graphssl.evaluation.logreg_probe import LogRegProbe
from graphssl.tasks.train import train
from graphssl.tasks.validate import ConfigError

CONF = Path(__file__).resolve().parents[3] / "conf"
FAST = (
    "trainer.epochs=1",
    "trainer.progress=false",
    "eval.figures=false",
    "eval.baseline=false",
    "logger.log_embeddings=false",
    "logger.log_model=false",
)


def compose_with(outputs: Path, *overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(
            config_name="train",
            overrides=[f"paths.outputs_dir={outputs}", "paths.download=false", *overrides],
        )


def runs(outputs: Path) -> list[str]:
    client = MlflowClient(tracking_uri=f"sqlite:///{outputs / 'mlflow.db'}")
    exp = client.get_experiment_by_name("graphssl")
    return [r.info.status for r in client.search_runs([exp.experiment_id])] if exp else []


@pytest.fixture(autouse=True)
def _own_store(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def test_missing_dataset_opens_no_run(outputs_dir: Path, tmp_path: Path) -> None:
    cfg = compose_with(outputs_dir, "dataset=citeseer", f"paths.data_dir={tmp_path / 'none'}")
    with pytest.raises(DatasetNotFoundError, match="dataset 'CiteSeer'"):
        train(cfg)
    assert runs(outputs_dir) == []


def test_text_for_an_integer_is_refused_before_the_run(outputs_dir: Path) -> None:
    cfg = compose_with(outputs_dir, "dataset=sbm", "trainer.epochs=abc")
    with pytest.raises(ConfigError) as err:
        train(cfg)
    assert str(err.value) == (
        "trainer.epochs must be an integer, got 'abc' (str); expected an integer at most 10000000"
    )
    assert runs(outputs_dir) == []


def test_knn_k_is_capped_at_the_training_split(caplog: pytest.LogCaptureFixture) -> None:
    dm = KarateClubDataModule()
    dm.setup()
    n_train = int(dm.splits()[0].train.numel())
    assert n_train == 17
    evaluation = Evaluation(
        probes={"knn": KNNProbe(k=20), "small": KNNProbe(k=5), "lr": LogRegProbe()}
    )
    with caplog.at_level(logging.WARNING, logger="graphssl.evaluation.evaluator"):
        evaluation.check(dm)
    assert evaluation.probes["knn"].k == 17 and evaluation.probes["small"].k == 5
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("eval.probes.knn.k=20 is larger than the training split of ")
    assert "(17 rows)" in line and "uses k=17" in line
    # a row cap the probe applies is part of what it is fitted on
    capped = Evaluation(probes={"knn": KNNProbe(k=20, max_rows=8)})
    capped.check(dm)
    assert capped.probes["knn"].k == 8
    z = torch.randn(int(dm.data.num_nodes), 4)
    out = evaluation.probe_metrics(dm, z, dm.labels, seed=0)
    assert out["probe/knn/k"] == 17


def test_karate_trains_with_the_default_probes(outputs_dir: Path) -> None:
    metrics = train(compose_with(outputs_dir, "dataset=karate", *FAST))
    assert metrics["probe/knn/k"] == 17
    assert runs(outputs_dir) == ["FINISHED"]
