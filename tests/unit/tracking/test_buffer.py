"""The metrics journal: nothing lost while the store is away, nothing logged twice on resume.

A real SQLite MLflow store; the outage is a client wrapper that refuses every call while
``down`` is set, as a stopped server does."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from graphssl.tracking.buffer import FINAL, BufferedRun, StoreUnavailableError, read_journal
from graphssl.tracking.store import TrackingStore


class FlakyClient:
    """An ``MlflowClient`` that raises ``ConnectionError`` on every call while ``down``."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.down = False
        self.refused = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.down:
                self.refused += 1
                raise ConnectionError("Connection refused (store stopped)")
            return attr(*args, **kwargs)

        return call


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(tmp_path: Path, _mlflow_template: Path) -> TrackingStore:
    shutil.copyfile(_mlflow_template, tmp_path / "mlflow.db")
    return TrackingStore(f"sqlite:///{tmp_path / 'mlflow.db'}", "graphssl")


def history(store: TrackingStore, run_id: str) -> dict[str, list[tuple[int, float]]]:
    run = store.client.get_run(run_id)
    return {
        k: sorted((m.step, m.value) for m in store.client.get_metric_history(run_id, k))
        for k in run.data.metrics
    }


def test_outage_keeps_points_and_sends_them_once_back(store, tmp_path) -> None:
    clock = Clock()
    with store.start_run("r") as tracker:
        flaky = FlakyClient(tracker.client)
        tracker.client = flaky
        sink = BufferedRun(tracker, tmp_path / "ck" / "metrics.jsonl", clock=clock)
        sink.log_metrics({"train/loss": 1.0}, step=0)
        assert sink.flush()
        flaky.down = True
        for epoch in (1, 2, 3):
            sink.log_metrics({"train/loss": 1.0 / (epoch + 1)}, step=epoch)
            sink.flush()  # refused once, then held back by the backoff
        assert sink.in_outage and sink.pending == 3
        assert flaky.refused == 1, "a flush inside the backoff window must not call the store"
        clock.now = 100.0
        flaky.down = False
        assert sink.flush()
        assert not sink.in_outage and sink.pending == 0
        sink.close()
    steps = [s for s, _ in history(store, tracker.run_id)["train/loss"]]
    assert steps == [0, 1, 2, 3]
    run_id, records = read_journal(tmp_path / "ck" / "metrics.jsonl")
    assert run_id == tracker.run_id and len(records) == 4


def test_drain_gives_up_with_what_was_kept(store, tmp_path) -> None:
    with pytest.raises(StoreUnavailableError) as info, store.start_run("r") as tracker:
        flaky = FlakyClient(tracker.client)
        sink = BufferedRun(tracker, tmp_path / "ck" / "metrics.jsonl")
        tracker.client = flaky
        flaky.down = True
        sink.log_metrics({"train/loss": 0.5}, step=0)
        sink.drain(wait_s=0)
    text = str(info.value)
    assert "stayed unreachable" in text and "resume=true" in text
    assert str(tmp_path / "ck" / "metrics.jsonl") in text and "1 metric points" in text


def test_resume_logs_each_key_and_step_once(store, tmp_path) -> None:
    journal = tmp_path / "ck" / "metrics.jsonl"
    # attempt 1: epochs 0-9 journaled, only 0-4 reached the store; two of three final metrics
    # journaled (the kill came while they were being sent)
    with store.start_run("r") as tracker:
        run_id = tracker.run_id
        sink = BufferedRun(tracker, journal)
        for epoch in range(5):
            sink.log_metrics({"train/loss": float(epoch)}, step=epoch)
        sink.flush()
        for epoch in range(5, 10):
            sink.log_metrics({"train/loss": float(epoch)}, step=epoch)
        sink.log_metrics({"probe/acc": 0.8, "diag/rankme": 3.0}, kind=FINAL)
        tracker.client.update_run(run_id, status="KILLED")
    # attempt 2 resumes from the checkpoint of epoch 6 and logs 7-11 and all final metrics
    with store.start_run("r", run_id=run_id) as tracker:
        sink = BufferedRun(tracker, journal, resumed=True)
        for epoch in range(7, 12):
            sink.log_metrics({"train/loss": float(epoch) + 100.0}, step=epoch)
        sink.log_metrics({"probe/acc": 0.9, "diag/rankme": 3.0, "time/s": 1.0}, kind=FINAL)
        sink.drain(wait_s=0)
        sink.close()
    got = history(store, run_id)
    assert [s for s, _ in got["train/loss"]] == list(range(12)), "each epoch exactly once"
    # epochs 7-9 keep the values of the attempt that logged them first; 10-11 are new
    assert dict(got["train/loss"])[9] == 9.0 and dict(got["train/loss"])[10] == 110.0
    assert got["probe/acc"] == [(0, 0.8)], "a final metric is logged once"
    assert got["diag/rankme"] == [(0, 3.0)] and got["time/s"] == [(0, 1.0)]


def test_resume_without_journal_skips_steps_in_the_store(store, tmp_path) -> None:
    with store.start_run("r") as tracker:
        run_id = tracker.run_id
        tracker.log_points([("train/loss", float(e), e) for e in range(5)])
    with store.start_run("r", run_id=run_id) as tracker:
        sink = BufferedRun(tracker, tmp_path / "none" / "metrics.jsonl", resumed=True)
        for epoch in range(3, 8):
            sink.log_metrics({"train/loss": float(epoch)}, step=epoch)
        sink.drain(wait_s=0)
    assert [s for s, _ in history(store, run_id)["train/loss"]] == list(range(8))


def test_full_disk_journal_error_names_the_file(store, tmp_path, monkeypatch) -> None:
    import errno

    with store.start_run("r") as tracker:
        sink = BufferedRun(tracker, tmp_path / "ck" / "metrics.jsonl")

        def full(*_: Any) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(sink._fh, "write", full)
        with pytest.raises(OSError) as info:
            sink.log_metrics({"train/loss": 1.0}, step=0)
        monkeypatch.undo()
    assert info.value.errno == errno.ENOSPC
    assert "the disk is full" in str(info.value) and "metrics.jsonl" in str(info.value)
    assert "resume=true" in str(info.value)
