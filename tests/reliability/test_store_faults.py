"""Faults of the local MLflow store: a full disk while a fresh store is created, a store left
half-migrated by an earlier failure, and a tracking URI that names a directory.

Each ends in a one-paragraph error naming the file (no traceback), leaves no run ``RUNNING``
and does not block the next start once the cause is gone.
"""

from __future__ import annotations

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


def cli(cmd, env, *args, timeout=600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, timeout=timeout)


def error_paragraph(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.startswith("graphssl: error:")]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


def test_disk_full_while_a_fresh_store_is_created(graphssl_cmd, cli_env, disk) -> None:
    outputs = disk / "outputs"
    db = outputs / "mlflow.db"
    env = dict(cli_env, GRAPHSSL_OUTPUTS=str(outputs))
    filler = fill(disk, leave=256 * 1024)  # a fresh store needs ~0.9 MiB

    res = cli(graphssl_cmd, env, *FAST)
    assert res.returncode != 0
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    msg = error_paragraph(res.stderr)
    assert str(db) in msg and "is full" in msg and "Free space" in msg, msg
    assert not db.exists(), "a failed creation must not leave a half-migrated store"
    assert not list(outputs.glob(".mlflow.db.tmp-*")), "the temporary store must be removed"

    filler.unlink()  # space freed: the next start creates the store and runs to the end
    res = cli(graphssl_cmd, env, *FAST)
    assert res.returncode == 0, res.stderr[-3000:]
    assert run_statuses(db) == ["FINISHED"]


def test_half_migrated_store_without_runs_is_created_again(graphssl_cmd, cli_env, disk) -> None:
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

    env = dict(cli_env, GRAPHSSL_OUTPUTS=str(outputs))
    res = cli(graphssl_cmd, env, *FAST)
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"the MLflow store {db} cannot be opened" in res.stdout + res.stderr
    assert run_statuses(db) == ["FINISHED"]


def test_broken_store_with_runs_is_refused_with_the_fix(
    cli_env, tmp_path, _mlflow_template
) -> None:
    db = tmp_path / "mlflow.db"
    db.write_bytes(_mlflow_template.read_bytes())
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    exp = client.create_experiment("graphssl")
    client.set_terminated(client.create_run(exp).info.run_id)
    with sqlite3.connect(db) as con:  # a schema this MLflow cannot open
        con.execute("UPDATE alembic_version SET version_num = 'deadbeef0000'")
    before = db.read_bytes()
    res = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from graphssl.tracking import mlflow_store; mlflow_store.client('sqlite:///{db}')",
        ],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode != 0
    msg = res.stderr.strip().splitlines()[-1]
    assert msg.startswith("graphssl.tracking.mlflow_store.StoreError:"), res.stderr[-3000:]
    assert str(db) in msg and "holds 1 runs" in msg and f"mv {db} {db}.bak" in msg, msg
    assert db.read_bytes() == before, "a store holding runs must be left as it is"


def test_tracking_uri_naming_a_directory(
    graphssl_cmd, cli_env, outputs_dir, tmp_path, _mlflow_template
) -> None:
    folder = tmp_path / "a-folder"
    folder.mkdir()
    res = cli(graphssl_cmd, cli_env, *FAST, f"logger.tracking_uri=sqlite:///{folder}", timeout=300)
    assert res.returncode != 0
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    msg = error_paragraph(res.stderr)
    assert f"names the directory {folder}, not a database file" in msg, msg
    assert f"sqlite:///{folder / 'mlflow.db'}" in msg
    # refused before any MLflow call: no store lock beside it, nothing inside it
    assert not Path(f"{folder}.lock").exists()
    assert list(folder.iterdir()) == []
    assert "RUNNING" not in run_statuses(outputs_dir)
    # the next start with a file path works
    shutil.copyfile(_mlflow_template, folder / "m.db")
    res = cli(graphssl_cmd, cli_env, *FAST, f"logger.tracking_uri=sqlite:///{folder / 'm.db'}")
    assert res.returncode == 0, res.stderr[-3000:]
    assert run_statuses(folder / "m.db") == ["FINISHED"]


def test_tracking_uri_naming_a_file_that_is_not_a_database(tmp_path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database\n")
    with pytest.raises(mlflow_store.StoreError, match="is not an SQLite database"):
        mlflow_store.client(f"sqlite:///{notes}")
    assert notes.read_text() == "not a database\n"
