"""The bad-input table of docs/reliability.md: each input gives a one-paragraph error naming the
value and what was expected, exits non-zero, and leaves no MLflow run marked FINISHED.

The commands run in this process (the ``commands`` fixture): what is tested is what the command
prints, its exit code and what it leaves in the store, not the interpreter around it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from graphssl.data.base import Split
from graphssl.evaluation.knn_probe import KNNProbe
from graphssl.evaluation.logreg_probe import LogRegProbe
from graphssl.evaluation.runner import run_probes

FAST = ["dataset=sbm", "trainer.epochs=2", "eval.figures=false", "logger.log_embeddings=false"]


def statuses(outputs: Path) -> list[str]:
    db = outputs / "mlflow.db"
    if not db.exists():
        return []
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    exp = client.get_experiment_by_name("graphssl")
    return [r.info.status for r in client.search_runs([exp.experiment_id])] if exp else []


def assert_clean_failure(res, outputs: Path, *needles: str) -> None:
    assert res.returncode != 0
    for needle in needles:
        assert needle in res.stderr, f"{needle!r} not in stderr:\n{res.stderr[-2000:]}"
    assert "FINISHED" not in statuses(outputs)


def test_unknown_config_option(commands, cli_env, outputs_dir) -> None:
    res = commands.run("graphssl", "model=dgii")
    assert_clean_failure(
        res, outputs_dir, "Could not find 'model/dgii'", "Available options in 'model'"
    )


def test_unknown_key(commands, cli_env, outputs_dir) -> None:
    res = commands.run("graphssl", "trainer.epochz=3")
    assert_clean_failure(res, outputs_dir, "trainer.epochz")


def test_wrong_value_type(commands, cli_env, outputs_dir) -> None:
    res = commands.run("graphssl", *FAST, "trainer.epochs=abc")
    assert_clean_failure(res, outputs_dir, "trainer.epochs must be an integer, got 'abc'")
    assert "Traceback" not in res.stderr
    assert statuses(outputs_dir) == []  # refused before the run is opened


def test_dataset_folder_missing(commands, cli_env, outputs_dir, tmp_path) -> None:
    env = dict(cli_env, GRAPHSSL_DATA_DIR=str(tmp_path / "missing"))
    # Cora loads the copy packaged with graphssl; CiteSeer has none
    res = commands.run("graphssl", "dataset=citeseer", "trainer.epochs=1", env=env)
    assert_clean_failure(
        res, outputs_dir, "dataset 'CiteSeer'", str(tmp_path / "missing"), "ind.citeseer.x"
    )
    assert statuses(outputs_dir) == []  # the data is loaded before the run is opened


def test_corrupt_raw_file(commands, cli_env, outputs_dir, tmp_path, data_dir) -> None:
    root = tmp_path / "data"
    # only the raw files: a processed/ folder an earlier run left must not decide the result
    shutil.copytree(
        data_dir / "Planetoid" / "Cora",
        root / "Planetoid" / "Cora",
        ignore=shutil.ignore_patterns("processed"),
    )
    allx = root / "Planetoid" / "Cora" / "raw" / "ind.cora.allx"
    allx.write_bytes(allx.read_bytes()[:1000])  # truncated download
    env = dict(cli_env, GRAPHSSL_DATA_DIR=str(root))
    res = commands.run("graphssl", "trainer.epochs=1", env=env)
    assert_clean_failure(
        res, outputs_dir, "DatasetCorruptError", "dataset 'Cora'", "could not read its raw files"
    )


def test_k_larger_than_training_set(commands, cli_env, outputs_dir) -> None:
    """Recovered from before training: k becomes the training split's size, with a warning."""
    res = commands.run("graphssl", *FAST, "eval.probes.knn.k=5000")
    assert res.returncode == 0, res.stderr[-2000:]
    shown = res.stdout + res.stderr  # the warning is a log line (Hydra's console log is stdout)
    assert "eval.probes.knn.k=5000 is larger than the training split of" in shown
    assert "the kNN probe uses k=" in shown
    assert statuses(outputs_dir) == ["FINISHED"]


def test_empty_split(commands, cli_env, outputs_dir) -> None:
    res = commands.run("graphssl", *FAST, "dataset.val_frac=0.0")
    assert_clean_failure(res, outputs_dir, "split is empty")
    assert statuses(outputs_dir) == ["FAILED"]


def test_selection_on_an_unconfigured_probe(commands, cli_env, outputs_dir) -> None:
    res = commands.run(
        "graphssl", *FAST, "callbacks.selection.every=1", "callbacks.selection.probe=svm"
    )
    assert_clean_failure(res, outputs_dir, "callbacks.selection.probe='svm'", "['knn', 'logreg']")


def test_unwritable_output_folder(commands, cli_env, tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    env = dict(cli_env, GRAPHSSL_OUTPUTS=str(blocker / "outputs"))
    res = commands.run("graphssl", *FAST, env=env)
    assert res.returncode != 0
    assert str(blocker) in res.stderr


def test_unreachable_tracking_server(commands, cli_env, outputs_dir) -> None:
    env = dict(cli_env, MLFLOW_TRACKING_URI="http://127.0.0.1:9", no_proxy="*")
    # the default logger.store_wait_s (120 s): a server that never answered is refused at the
    # first contact, without MLflow's HTTP retries (the retries of an outage: test_store_faults)
    res = commands.run("graphssl", *FAST, env=env)
    assert_clean_failure(res, outputs_dir, "http://127.0.0.1:9", "unreachable")
    assert "Retrying" not in res.stderr and "urllib3" not in res.stderr


def test_embeddings_with_nan() -> None:
    z = torch.randn(20, 4)
    z[3] = float("nan")
    y = torch.arange(20) % 2
    with pytest.raises(ValueError, match="1 of 20 rows with NaN or Inf"):
        LogRegProbe().evaluate(z, y, torch.arange(10), torch.arange(10, 15), torch.arange(15, 20))


def test_labels_absent_for_a_probe() -> None:
    split = Split(torch.arange(5), torch.arange(5, 8), torch.arange(8, 10))
    with pytest.raises(ValueError, match="need labels, but the dataset has none"):
        run_probes(torch.randn(10, 3), None, [split], {"knn": KNNProbe(k=2)})
