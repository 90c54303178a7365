"""graphssl-evaluate: stored runs probed and diagnosed again without training — into the same
run or a child run, selected by id, sweep parent or filter — and refused with one paragraph
when the stored embeddings cannot answer. The tasks run in-process; one test runs the
``graphssl-evaluate`` command, in this process too (the ``commands`` fixture), to see its
refusal printed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig

from graphssl.tasks.evaluate import EvaluationRefused, evaluate
from graphssl.tasks.train import train

CONF = Path(__file__).resolve().parents[2] / "conf"

TRAIN = [
    "dataset=sbm",
    "trainer.epochs=2",
    "trainer.progress=false",
    "eval.figures=false",
    "eval.diagnostics.enabled=false",
    "eval.probes.knn=null",
    "logger.experiment_name=evaluate-test",
]


@pytest.fixture
def store(outputs_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield outputs_dir
    torch.set_num_threads(threads)


def _compose(name: str, outputs: Path, *overrides: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name=name, overrides=[f"paths.outputs_dir={outputs}", *overrides])


def _client(outputs: Path) -> MlflowClient:
    return MlflowClient(f"sqlite:///{outputs / 'mlflow.db'}")


def _runs(outputs: Path) -> list:  # type: ignore[type-arg]
    client = _client(outputs)
    exp = client.get_experiment_by_name("evaluate-test")
    assert exp is not None
    return list(client.search_runs([exp.experiment_id]))


def _trained(outputs: Path, *overrides: str) -> tuple[str, dict[str, float]]:
    metrics = train(_compose("train", outputs, *TRAIN, *overrides))
    (run,) = [r for r in _runs(outputs) if r.data.tags.get("mlflow.runName") == "trained"]
    return run.info.run_id, metrics


def _evaluate(outputs: Path, *overrides: str):  # type: ignore[no-untyped-def]
    return evaluate(
        _compose("evaluate", outputs, "logger.experiment_name=evaluate-test", *overrides)
    )


def test_same_probes_reproduce_the_run_and_new_probes_log_into_it(store: Path) -> None:
    run_id, trained = _trained(store, "logger.run_name=trained")
    same = ["eval.probes.knn=null", "eval.diagnostics.enabled=false", "eval.figures=false"]

    (again,) = _evaluate(store, f"run_id={run_id}", *same)
    assert again.run_id == run_id and again.logged_to == run_id
    assert again.metrics["probe/logreg/test_acc"] == trained["probe/logreg/test_acc"]
    assert again.all_metrics["train/epochs"] == 2.0  # the stored run's training metrics
    assert len(_runs(store)) == 1  # nothing trained, no new run

    # under the probes and diagnostics configured now, logged into the same run
    (now,) = _evaluate(store, f"run_id={run_id}", "eval.figures=false")
    assert "probe/knn/test_acc" in now.metrics and "diag/rankme" in now.metrics
    run = _client(store).get_run(run_id)
    assert run.data.metrics["probe/knn/test_acc"] == now.metrics["probe/knn/test_acc"]
    assert "graphssl.evaluated" in run.data.tags
    assert len(_runs(store)) == 1


def test_a_child_run_by_filter(store: Path) -> None:
    run_id, _ = _trained(store, "logger.run_name=trained")
    (child,) = _evaluate(
        store,
        "filter=\"tags.mlflow.runName = 'trained'\"",
        "as_child=true",
        "eval.figures=false",
        "eval.probes.logreg.weight_decay=[1.0]",
    )
    assert child.run_id == run_id and child.logged_to not in (None, run_id)
    run = _client(store).get_run(str(child.logged_to))
    assert run.data.tags["mlflow.parentRunId"] == run_id
    assert run.data.tags["graphssl.role"] == "evaluate"
    assert run.data.params["eval.probes.logreg.weight_decay"] == "[1.0]"
    assert run.data.tags["probe/logreg/weight_decay"] == "1.0"  # a probe's choice: a tag
    # the child is not selected again as a run to evaluate
    (only,) = _evaluate(store, "filter=\"params.`dataset.name` = 'SBM'\"", "log=false")
    assert only.run_id == run_id and only.logged_to is None


def test_a_small_graph_gets_k_fitted_to_its_training_split(store: Path, caplog) -> None:
    """A kNN probe added at evaluation time on a graph smaller than the default k (karate: 17
    training rows, k=20) runs with k capped and says so, as a training run would."""
    run_id, _ = _trained(store, "dataset=karate", "logger.run_name=trained")
    with caplog.at_level("WARNING", logger="graphssl"):
        (now,) = _evaluate(store, f"run_id={run_id}", "eval.figures=false", "log=false")
    rows = int(now.metrics["probe/knn/k"])
    assert 0 < rows < 20 and "probe/knn/test_acc" in now.metrics
    assert any("eval.probes.knn.k=20" in r.getMessage() for r in caplog.records)


def test_refusals_say_why(store: Path) -> None:
    bare, _ = _trained(store, "logger.run_name=trained", "logger.log_embeddings=false")
    with pytest.raises(EvaluationRefused, match=r"has no embeddings\.pt artifact"):
        _evaluate(store, f"run_id={bare}")
    with pytest.raises(ValueError, match="selects runs with run_id"):
        _evaluate(store)

    # a run whose stored rows are not the dataset's: its config, other embeddings
    client = _client(store)
    exp_id = client.get_experiment_by_name("evaluate-test").experiment_id  # type: ignore[union-attr]
    odd = client.create_run(exp_id, run_name="odd").info.run_id
    config = Path(client.download_artifacts(bare, "config.yaml", str(store)))
    client.log_artifact(odd, str(config))
    path = store / "embeddings.pt"
    torch.save({"embeddings": torch.randn(7, 4), "labels": torch.zeros(7).long()}, path)
    client.log_artifact(odd, str(path))
    client.set_terminated(odd, "FINISHED")
    with pytest.raises(EvaluationRefused, match=r"stored 7 embedding rows but dataset 'SBM'"):
        _evaluate(store, f"run_id={odd}")

    # the dataset's rows, but no labels for the probes
    unlabelled = client.create_run(exp_id, run_name="unlabelled").info.run_id
    client.log_artifact(unlabelled, str(config))
    torch.save({"embeddings": torch.randn(200, 4)}, path)
    client.log_artifact(unlabelled, str(path))
    client.set_terminated(unlabelled, "FINISHED")
    with pytest.raises(EvaluationRefused, match=r"without labels, so the probes \['logreg'\]"):
        _evaluate(store, f"run_id={unlabelled}", "eval.probes.knn=null")
    (diagnosed,) = _evaluate(store, f"run_id={unlabelled}", "eval=diagnostics_only", "log=false")
    assert "diag/rankme" in diagnosed.metrics  # diagnostics need no labels


def _odd_run(store: Path) -> str:
    """A finished run with a trained SBM run's config but 7 stored rows, not SBM's."""
    bare, _ = _trained(store, "logger.run_name=trained", "logger.log_embeddings=false")
    client = _client(store)
    exp_id = client.get_experiment_by_name("evaluate-test").experiment_id  # type: ignore[union-attr]
    odd = client.create_run(exp_id, run_name="odd").info.run_id
    client.log_artifact(odd, client.download_artifacts(bare, "config.yaml", str(store)))
    path = store / "embeddings.pt"
    torch.save({"embeddings": torch.randn(7, 4), "labels": torch.zeros(7).long()}, path)
    client.log_artifact(odd, str(path))
    client.set_terminated(odd, "FINISHED")
    return odd


@pytest.mark.integration
def test_the_command_prints_a_refusal_as_one_paragraph(store: Path, commands) -> None:
    """``graphssl-evaluate`` end to end: the refusal as one paragraph, exit status 1."""
    odd = _odd_run(store)
    res = commands.run(
        "graphssl-evaluate",
        f"paths.outputs_dir={store}",
        "logger.experiment_name=evaluate-test",
        f"run_id={odd}",
    )
    assert res.returncode == 1, res.stderr[-2000:]
    assert "graphssl-evaluate: error: EvaluationRefused:" in res.stderr
    assert "stored 7 embedding rows but dataset 'SBM'" in res.stderr
    assert "Traceback" not in res.stderr
