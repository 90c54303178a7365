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


class JobTimedOut(Exception):
    """What a scheduler's signal handler raises wherever the job happens to be (submitit's
    "timed-out" error at a time limit)."""


def test_error_raised_inside_a_store_call_reaches_the_run_as_itself(
    store, tmp_path, monkeypatch
) -> None:
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    def timed_out(*_: Any, **__: Any) -> None:
        raise JobTimedOut("Job not requeued because: timed-out too many times.")

    with store.start_run("r") as tracker:
        sink = BufferedRun(tracker, tmp_path / "ck" / "metrics.jsonl")
        sink.log_metrics({"train/loss": 1.0}, step=0)
        monkeypatch.setattr(SqlAlchemyStore, "_log_metrics", timed_out)
        # MLflow wraps it as MlflowException(INTERNAL_ERROR): not an outage to retry
        with pytest.raises(JobTimedOut, match="timed-out"):
            sink.flush()
        assert not sink.in_outage
        with pytest.raises(JobTimedOut):
            sink.drain(wait_s=60)
        monkeypatch.undo()
        assert sink.flush(), "the point is still pending and goes out on the next flush"
    assert history(store, tracker.run_id)["train/loss"] == [(0, 1.0)]


def test_store_errors_stay_outages_or_bad_requests() -> None:
    import sqlite3

    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import (
        INTERNAL_ERROR,
        INVALID_PARAMETER_VALUE,
        RESOURCE_DOES_NOT_EXIST,
    )
    from sqlalchemy.exc import OperationalError

    from graphssl.tracking.buffer import is_store_outage, unwrap

    def wrapped(cause: BaseException, code: int) -> MlflowException:
        try:
            raise cause
        except BaseException as err:
            try:
                raise MlflowException(str(err), error_code=code) from err
            except MlflowException as outer:
                return outer

    locked = wrapped(
        OperationalError("INSERT", {}, Exception("database is locked")), INTERNAL_ERROR
    )
    assert is_store_outage(locked) and unwrap(locked) is locked
    assert is_store_outage(wrapped(ConnectionError("refused"), INTERNAL_ERROR))
    assert is_store_outage(wrapped(sqlite3.OperationalError("disk I/O error"), INTERNAL_ERROR))
    assert not is_store_outage(MlflowException("bad key", error_code=INVALID_PARAMETER_VALUE))
    foreign = wrapped(JobTimedOut("timed-out"), INTERNAL_ERROR)
    assert not is_store_outage(foreign) and isinstance(unwrap(foreign), JobTimedOut)
    # only MLflow's wrapper of unknown errors is unwrapped
    gone = wrapped(KeyError("run"), RESOURCE_DOES_NOT_EXIST)
    assert unwrap(gone) is gone


def _journaled_run(store: TrackingStore, tmp_path: Path, sent: int, journaled: int) -> str:
    """A run left RUNNING whose journal holds epochs ``0..journaled-1``, of which the store
    got ``0..sent-1`` (its process was killed between a checkpoint and the next flush)."""
    from graphssl.tracking.buffer import JOURNAL_TAG

    journal = tmp_path / "ck" / "metrics.jsonl"
    tracker = store.start_run("r", tags={JOURNAL_TAG: str(journal)})
    tracker.__enter__()
    sink = BufferedRun(tracker, journal)
    for epoch in range(sent):
        sink.log_metrics({"train/loss": float(epoch)}, step=epoch)
    sink.flush()
    for epoch in range(sent, journaled):
        sink.log_metrics({"train/loss": float(epoch)}, step=epoch)
    sink.set_tags({"graphssl.collapse_alarm": "none"})
    sink.sync()
    return tracker.run_id


def test_marking_a_dead_run_killed_sends_what_it_journaled(store, tmp_path) -> None:
    from graphssl.tracking.stale import mark_killed

    run_id = _journaled_run(store, tmp_path, sent=3, journaled=7)
    assert len(history(store, run_id)["train/loss"]) == 3
    mark_killed(store.client, store.client.get_run(run_id), "process gone")
    run = store.client.get_run(run_id)
    assert run.info.status == "KILLED"
    assert history(store, run_id)["train/loss"] == [(e, float(e)) for e in range(7)]
    assert run.data.tags["graphssl.collapse_alarm"] == "none"
    assert run.data.tags["error"].startswith("process gone")
    assert "the 4 metric points it had journaled but not sent were sent" in run.data.tags["error"]
    # marking again (another start finds it) sends nothing twice
    mark_killed(store.client, store.client.get_run(run_id), "process gone")
    assert len(history(store, run_id)["train/loss"]) == 7


def test_a_journal_taken_over_by_a_later_run_is_left_alone(store, tmp_path) -> None:
    from graphssl.tracking.stale import mark_killed

    run_id = _journaled_run(store, tmp_path, sent=2, journaled=5)
    with store.start_run("later") as later:  # the same configuration started afresh
        BufferedRun(later, tmp_path / "ck" / "metrics.jsonl").close()
    mark_killed(store.client, store.client.get_run(run_id), "process gone")
    assert len(history(store, run_id)["train/loss"]) == 2
    assert store.client.get_run(run_id).data.tags["error"] == "process gone"


def test_a_journal_that_cannot_be_sent_does_not_keep_the_run_running(store, tmp_path) -> None:
    from graphssl.tracking.buffer import JOURNAL_TAG
    from graphssl.tracking.stale import mark_killed

    run_id = _journaled_run(store, tmp_path, sent=1, journaled=3)
    journal = Path(store.client.get_run(run_id).data.tags[JOURNAL_TAG])
    with journal.open("a") as fh:  # a record no store accepts
        fh.write('{"t":"m","kind":"epoch","k":"train/loss","v":"not a number","s":3,"ts":1}\n')
    mark_killed(store.client, store.client.get_run(run_id), "process gone")
    run = store.client.get_run(run_id)
    assert run.info.status == "KILLED"
    assert "its metric journal could not be sent" in run.data.tags["error"]
