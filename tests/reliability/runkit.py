"""Helpers for the fault tests: read runs back from a store, wait for a run to be training."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from mlflow.tracking import MlflowClient

#: a small, fast configuration (SBM graph, one-layer encoder, no figures or embeddings)
FAST = (
    "dataset=sbm",
    "encoder.hidden_channels=16",
    "encoder.num_layers=1",
    "eval.figures=false",
    "eval.probes.knn=null",
    "logger.log_embeddings=false",
)


def store_client(outputs_or_uri: Path | str) -> MlflowClient:
    uri = (
        outputs_or_uri
        if isinstance(outputs_or_uri, str)
        else f"sqlite:///{outputs_or_uri / 'mlflow.db'}"
    )
    return MlflowClient(tracking_uri=uri)


def all_runs(client: MlflowClient) -> list[Any]:
    exp = client.get_experiment_by_name("graphssl")
    return client.search_runs([exp.experiment_id], max_results=1000) if exp else []


def wait_for_run(
    client: MlflowClient,
    proc: subprocess.Popen[str],
    epochs: str,
    journal_step: int = 0,
    outputs: Path | None = None,
    timeout: float = 300,
) -> Any:
    """The RUNNING run with ``trainer.epochs=epochs`` once it trains (its journal under
    ``outputs`` holds a ``train/loss`` point at step >= ``journal_step``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"ended early (rc {proc.returncode}):\n{_stderr(proc)}")
        for run in all_runs(client):
            if run.info.status != "RUNNING" or run.data.params.get("trainer.epochs") != epochs:
                continue
            if journal_step <= 0 and outputs is None:
                return run
            chash = run.data.tags.get("graphssl.config_hash")
            if outputs is not None and chash and last_journal_step(outputs, chash) >= journal_step:
                return run
        time.sleep(0.2)
    raise AssertionError(f"no run with trainer.epochs={epochs} trained within {timeout} s")


def last_journal_step(outputs: Path, chash: str) -> int:
    """The last ``train/loss`` step in the journals of configuration ``chash`` (one per run)."""
    journals = sorted((outputs / "checkpoints" / chash).glob("metrics-*.jsonl"))
    last = -1
    lines = [line for j in journals if j.is_file() for line in j.read_text().splitlines()]
    for line in lines:
        if '"k":"train/loss"' in line:
            try:
                last = max(last, int(line.split('"s":', 1)[1].split(",", 1)[0]))
            except (IndexError, ValueError):
                continue
    return last


def _stderr(proc: subprocess.Popen[str]) -> str:
    try:
        return (proc.communicate(timeout=30)[1] or "")[-3000:]
    except Exception:
        return ""


def assert_one_paragraph(stderr: str) -> None:
    """No Python traceback reached the user."""
    assert "Traceback (most recent call last)" not in stderr, stderr[-4000:]
