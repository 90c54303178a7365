"""The run object: one entry opens a run from the logger settings and named values, and owns
identity, resume, masking, params, tags, the journal and the artifacts. A real SQLite store."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from mlflow.tracking import MlflowClient

from graphssl.tracking import Launch, RunIdentity, TrackedRun, open_run
from graphssl.tracking.buffer import JOURNAL_TAG
from graphssl.tracking.identity import RunBusyError
from graphssl.tracking.stale import HASH_TAG

RECORD: dict[str, Any] = {
    "seed": 0,
    "db": {"password": "hunter2-secret", "url": "postgresql://u:pear71@db/x"},
    "model": {"_target_": "m.M", "encoder": {"hidden": 8}},
    "encoder": {"hidden": 8},
}


def _logger(outputs: Path, **extra: Any) -> dict[str, Any]:
    return {
        "experiment_name": "session",
        "tracking_uri": f"sqlite:///{outputs / 'mlflow.db'}",
        "store_wait_s": 1,
        **extra,
    }


def _identity(outputs: Path, **extra: Any) -> RunIdentity:
    values: dict[str, Any] = {"name": "dgi-Cora", "config_hash": "abc123", **extra}
    return RunIdentity(outputs_dir=outputs, **values)


def _runs(outputs: Path) -> list[Any]:
    client = MlflowClient(f"sqlite:///{outputs / 'mlflow.db'}")
    exp = client.get_experiment_by_name("session")
    return client.search_runs([exp.experiment_id]) if exp else []


def test_a_run_logs_masked_params_tags_and_finishes(outputs_dir: Path) -> None:
    with open_run(_logger(outputs_dir), _identity(outputs_dir), RECORD) as run:
        assert isinstance(run, TrackedRun) and not run.resumed and run.resume_state is None
        assert run.checkpoint_path == outputs_dir / "checkpoints" / "abc123" / "last.pt"
        run.sink.log_metrics({"train/loss": 1.0}, step=0)
        run.log_results({"probe/logreg/test_acc": 0.5, "probe/logreg/weight_decay": 0.1})
        run.log_metrics({"mem/peak_rss_gb": 0.2})
    [stored] = _runs(outputs_dir)
    assert stored.info.status == "FINISHED" and stored.info.run_name == "dgi-Cora"
    params, tags, metrics = stored.data.params, stored.data.tags, stored.data.metrics
    assert params["db.password"] == "***" and "hunter2" not in str(params)
    assert "pear71" not in params["db.url"]
    assert "model.encoder.hidden" not in params and params["encoder.hidden"] == "8"
    assert tags[HASH_TAG] == "abc123" and tags[JOURNAL_TAG] == str(
        outputs_dir / "checkpoints" / "abc123" / f"metrics-{stored.info.run_id}.jsonl"
    )
    assert tags["probe/logreg/weight_decay"] == "0.1"  # a probe's choice is a tag
    assert set(metrics) >= {"train/loss", "probe/logreg/test_acc", "mem/peak_rss_gb"}
    assert "graphssl.role" not in tags  # not launched by Hydra


def test_the_run_ends_failed_on_an_error_and_killed_on_ctrl_c(outputs_dir: Path) -> None:
    with pytest.raises(RuntimeError), open_run(_logger(outputs_dir), _identity(outputs_dir), {}):
        raise RuntimeError("diverged")
    with (
        pytest.raises(KeyboardInterrupt),
        open_run(_logger(outputs_dir), _identity(outputs_dir, config_hash="other"), {}),
    ):
        raise KeyboardInterrupt
    statuses = sorted(r.info.status for r in _runs(outputs_dir))
    assert statuses == ["FAILED", "KILLED"]


def test_a_sweep_job_is_tagged_with_its_launch(outputs_dir: Path, tmp_path: Path) -> None:
    hydra_dir = tmp_path / "job" / ".hydra"
    hydra_dir.mkdir(parents=True)
    (hydra_dir / "overrides.yaml").write_text("- db.password=hunter2-secret\n")
    launch = Launch(
        overrides=("model=grace",), output_dir=str(tmp_path / "job"), config_dir=hydra_dir
    )
    with open_run(_logger(outputs_dir), _identity(outputs_dir, launch=launch), RECORD) as run:
        run_id = run.run_id
    client = MlflowClient(f"sqlite:///{outputs_dir / 'mlflow.db'}")
    tags = client.get_run(run_id).data.tags
    assert tags["graphssl.overrides"] == "model=grace" and tags["graphssl.role"] == "run"
    names = {a.path for a in client.list_artifacts(run_id, ".hydra")}
    assert names == {".hydra/overrides.yaml"}
    local = client.download_artifacts(run_id, ".hydra/overrides.yaml", str(tmp_path))
    assert "hunter2" not in Path(local).read_text()


def test_switches_turn_model_and_embeddings_off(outputs_dir: Path) -> None:
    logger = _logger(outputs_dir, log_model=False, log_embeddings=False)
    with open_run(logger, _identity(outputs_dir), {}) as run:
        run.log_model(torch.nn.Linear(2, 2), {"_target_": "torch.nn.Linear"})
        run.log_embeddings(torch.zeros(3, 2), None)
        run_id = run.run_id
    client = MlflowClient(f"sqlite:///{outputs_dir / 'mlflow.db'}")
    assert [a.path for a in client.list_artifacts(run_id)] == ["config.yaml"]


def test_an_invalid_secret_pattern_fails_before_the_store(tmp_path: Path) -> None:
    outputs = tmp_path / "never"
    record = {"logger": {"secret_patterns": ["(unclosed"]}}
    with pytest.raises(ValueError, match="secret_patterns"):
        open_run(_logger(outputs), _identity(outputs), record)
    assert not (outputs / "mlflow.db").exists()


def test_a_read_only_artifact_folder_is_named_before_any_run(
    outputs_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from graphssl.tracking import store

    artifacts = outputs_dir / "mlartifacts"
    artifacts.mkdir()
    artifacts.chmod(0o555)  # read-only for a user; root writes anyway, so access is asked too
    real_access = os.access
    asked: list[Path] = []

    def access(path: Any, mode: int) -> bool:
        asked.append(Path(path))
        return False if Path(path) == artifacts else real_access(path, mode)

    monkeypatch.setattr(store.os, "access", access)
    try:
        with (
            pytest.raises(PermissionError, match=r"mlartifacts .*not writable"),
            open_run(_logger(outputs_dir), _identity(outputs_dir), {}),
        ):
            pass
    finally:
        artifacts.chmod(0o755)
    assert artifacts in asked
    assert _runs(outputs_dir) == []  # refused before the run was created


def test_a_second_resume_of_a_live_run_is_refused(outputs_dir: Path) -> None:
    from graphssl.training.checkpoint import save_checkpoint

    identity = _identity(outputs_dir, resume=True)
    with open_run(_logger(outputs_dir), identity, {}) as first:
        identity.checkpoint_path.parent.mkdir(parents=True, exist_ok=True)
        payload = {"mlflow_run_id": first.run_id, "config_hash": "abc123"}
        save_checkpoint(identity.checkpoint_path, payload)
        with (
            pytest.raises(RunBusyError, match=rf"run {first.run_id} .* still running"),
            open_run(_logger(outputs_dir), identity, {}),
        ):
            pass
    assert [r.info.status for r in _runs(outputs_dir)] == ["FINISHED"]


def test_the_run_is_not_usable_before_it_is_entered(outputs_dir: Path) -> None:
    run = open_run(_logger(outputs_dir), _identity(outputs_dir), {})
    with pytest.raises(RuntimeError, match="not started"):
        _ = run.sink
    assert "not started" in repr(run)
