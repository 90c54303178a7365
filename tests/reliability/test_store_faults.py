"""Faults of the local MLflow store: a full disk while a fresh store is created, a store left
half-migrated by an earlier failure, and a tracking URI that names a directory.

Each ends in an error naming the file that the CLI prints as one paragraph (a user error of
``graphssl.cli``: no traceback), leaves no run ``RUNNING`` and does not block the next start
once the cause is gone. The train task runs in-process (the ``tasks`` fixture); the failed
MLflow migration that leaves a store half-made runs in a process of its own, as it would.
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import faultkit
import pytest
from faultkit import fill, run_statuses
from mlflow.tracking import MlflowClient

from graphssl.tracking import mlflow_store

FAST = [
    "dataset=sbm",
    "encoder.hidden_channels=16",
    "encoder.num_layers=1",
    "trainer.epochs=2",
    "eval.figures=false",
    "eval.probes.knn=null",
    "logger.log_embeddings=false",
]


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with faultkit.small_disk(tmp_path) as where:
        yield where


def refusal(tasks, *overrides: str) -> str:
    """The train task's error for ``overrides``: one the CLI prints as one paragraph."""
    from graphssl.cli import USER_ERRORS, _is_user_error

    with pytest.raises(Exception) as info:
        tasks.train(*FAST, *overrides)
    assert _is_user_error(info.value, USER_ERRORS), repr(info.value)
    return str(info.value)


@pytest.mark.integration
@pytest.mark.slow
def test_disk_full_while_a_fresh_store_is_created(
    tasks, disk, monkeypatch, graphssl_cmd, cli_env
) -> None:
    outputs = disk / "outputs"
    db = outputs / "mlflow.db"
    monkeypatch.setenv("GRAPHSSL_OUTPUTS", str(outputs))
    filler = fill(disk, leave=256 * 1024)  # a fresh store needs ~0.9 MiB

    msg = refusal(tasks)
    assert str(db) in msg and "is full" in msg and "Free space" in msg, msg
    assert not db.exists(), "a failed creation must not leave a half-migrated store"
    assert not list(outputs.glob(".mlflow.db.tmp-*")), "the temporary store must be removed"

    # space freed: the next start (a new process, with none of this one's MLflow engines)
    # creates the store and runs to the end
    filler.unlink()
    env = dict(cli_env, GRAPHSSL_OUTPUTS=str(outputs))
    res = subprocess.run(
        [*graphssl_cmd, *FAST], env=env, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert run_statuses(db) == ["FINISHED"]


@pytest.mark.slow
def test_half_migrated_store_without_runs_is_created_again(
    tasks, cli_env, disk, monkeypatch, caplog
) -> None:
    outputs = disk / "outputs"
    outputs.mkdir()
    db = outputs / "mlflow.db"
    filler = fill(disk, leave=256 * 1024)
    # MLflow's own first use migrates in place: a full disk leaves a half-migrated store
    half = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from mlflow.tracking import MlflowClient; "
            f"MlflowClient(tracking_uri='sqlite:///{db}').search_experiments()",
        ],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert half.returncode != 0 and db.stat().st_size > 0, half.stderr[-2000:]
    filler.unlink()

    monkeypatch.setenv("GRAPHSSL_OUTPUTS", str(outputs))
    with caplog.at_level(logging.WARNING):
        tasks.train(*FAST)
    assert f"the MLflow store {db} cannot be opened" in caplog.text
    assert run_statuses(db) == ["FINISHED"]


def test_broken_store_with_runs_is_refused_with_the_fix(tmp_path, _mlflow_template) -> None:
    # the run is made through another file: this process then holds no MLflow engine on ``db``,
    # as a new start would not
    made = tmp_path / "made.db"
    made.write_bytes(_mlflow_template.read_bytes())
    client = MlflowClient(tracking_uri=f"sqlite:///{made}")
    exp = client.create_experiment("graphssl")
    client.set_terminated(client.create_run(exp).info.run_id)
    db = tmp_path / "mlflow.db"
    shutil.copyfile(made, db)
    with sqlite3.connect(db) as con:  # a schema this MLflow cannot open
        con.execute("UPDATE alembic_version SET version_num = 'deadbeef0000'")
    before = db.read_bytes()
    with pytest.raises(mlflow_store.StoreError) as info:
        mlflow_store.client(f"sqlite:///{db}")
    msg = str(info.value)
    assert str(db) in msg and "holds 1 runs" in msg and f"mv {db} {db}.bak" in msg, msg
    assert db.read_bytes() == before, "a store holding runs must be left as it is"


def test_tracking_uri_naming_a_directory(tasks, outputs_dir, tmp_path, _mlflow_template) -> None:
    folder = tmp_path / "a-folder"
    folder.mkdir()
    msg = refusal(tasks, f"logger.tracking_uri=sqlite:///{folder}")
    assert f"names the directory {folder}, not a database file" in msg, msg
    assert f"sqlite:///{folder / 'mlflow.db'}" in msg
    # refused before any MLflow call: no store lock beside it, nothing inside it
    assert not Path(f"{folder}.lock").exists()
    assert list(folder.iterdir()) == []
    assert "RUNNING" not in run_statuses(outputs_dir / "mlflow.db")
    # the next start with a file path works
    shutil.copyfile(_mlflow_template, folder / "m.db")
    tasks.train(*FAST, f"logger.tracking_uri=sqlite:///{folder / 'm.db'}")
    assert run_statuses(folder / "m.db") == ["FINISHED"]


def test_tracking_uri_naming_a_file_that_is_not_a_database(tmp_path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database\n")
    with pytest.raises(mlflow_store.StoreError, match="is not an SQLite database"):
        mlflow_store.client(f"sqlite:///{notes}")
    assert notes.read_text() == "not a database\n"
