"""Metrics that survive a lost tracking store: an on-disk journal, flushed with backoff.

Every metric point and tag a run logs is first appended to an append-only JSON-lines journal
beside the run's checkpoint (``outputs/checkpoints/<config hash>/metrics-<run id>.jsonl``), then
sent to
the MLflow store in batches, never before the epoch's checkpoint is written (the trainer's
``on_epoch_complete`` hook). When the store cannot be reached (a stopped server, a full disk
under a SQLite store) training goes on: the points stay in the journal and in memory and each
later flush retries, waiting 1, 2, 4 … up to :attr:`BufferedRun.max_backoff_s` seconds between
attempts. At the end of the run :meth:`BufferedRun.drain` keeps retrying for
``logger.store_wait_s`` seconds before giving up with a :class:`StoreUnavailableError` that
says what was kept and how to continue.

Each point carries the timestamp it was journaled with, and MLflow ignores a point identical in
key, value, timestamp and step to one it has, so replaying a journal is idempotent. With
``resume=true`` the journal of the interrupted attempt is replayed first, and a point the
resumed attempt logs again — an epoch between the checkpoint and the kill, a final metric
logged before the kill — is skipped, so each (key, step) is logged exactly once.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar

from graphssl.tracking.mlflow_store import interrupt_deferred

if TYPE_CHECKING:
    from mlflow.entities import Run
    from mlflow.tracking import MlflowClient

__all__ = [
    "BufferedRun",
    "JournalWriteError",
    "RunSink",
    "StoreUnavailableError",
    "journal_path",
    "retry_store",
    "send_journal",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: a point logged by the training loop (step = epoch) or once at the end (``final``)
EPOCH, FINAL = "epoch", "final"
#: the run tag naming the run's journal, for whoever finds the run's process gone
JOURNAL_TAG = "graphssl.journal"
#: MLflow error codes that mean the request itself is wrong: retrying cannot help
_INVALID = frozenset({"INVALID_PARAMETER_VALUE", "BAD_REQUEST", "RESOURCE_ALREADY_EXISTS"})


class StoreUnavailableError(ConnectionError):
    """The tracking store stayed unreachable; the message says what was kept on disk."""


class JournalWriteError(OSError):
    """The metrics journal could not be written (e.g. the disk is full)."""


def journal_path(checkpoint: str | os.PathLike[str], run_id: str | None = None) -> Path:
    """The journal of run ``run_id`` beside its checkpoint file (``metrics-<run id>.jsonl``:
    two runs of one configuration never share a journal); ``metrics.jsonl`` without an id."""
    name = f"metrics-{run_id}.jsonl" if run_id else "metrics.jsonl"
    return Path(checkpoint).parent / name


#: modules whose errors are a store's transport or database failing (drivers included, for an
#: error that reaches graphssl unwrapped)
_IO_MODULES = ("requests", "urllib3", "sqlalchemy", "sqlite3", "psycopg2", "pymysql")


def _is_io_error(err: BaseException) -> bool:
    """A transport or storage failure that may pass; a refused permission or a read-only file
    system never does, so it is not one."""
    if isinstance(err, PermissionError) or (
        isinstance(err, OSError) and err.errno in (errno.EACCES, errno.EPERM, errno.EROFS)
    ):
        return False
    return isinstance(err, (OSError, ConnectionError, TimeoutError)) or type(
        err
    ).__module__.startswith(_IO_MODULES)


def unwrap(err: BaseException) -> BaseException:
    """The error MLflow wrapped in ``err``, when it is not the store's own.

    MLflow's SQL store turns *any* exception raised inside a store call into an
    ``MlflowException(INTERNAL_ERROR)`` — also one a signal handler raised there, such as
    submitit's "timed-out" error at a job's time limit. Such an error is not the store's; it
    must reach the run as itself, not be retried as an outage.
    """
    from mlflow.exceptions import MlflowException

    if not isinstance(err, MlflowException) or str(err.error_code) != "INTERNAL_ERROR":
        return err
    cause = err.__cause__ or err.__context__  # MLflow wraps with and without ``from``
    if cause is None or isinstance(cause, MlflowException) or _is_io_error(cause):
        return err
    return cause


def is_store_outage(err: BaseException) -> bool:
    """``True`` when ``err`` says the store is unreachable or cannot write, not that the
    request was wrong (retrying a wrong request would never succeed) nor that something
    other than the store failed during the call (:func:`unwrap`)."""
    from mlflow.exceptions import MlflowException

    if unwrap(err) is not err:
        return False
    if isinstance(err, MlflowException):
        return str(getattr(err, "error_code", "")) not in _INVALID
    return _is_io_error(err)


def reraise(err: BaseException) -> NoReturn:
    """Raise ``err`` — or the foreign error it wraps (:func:`unwrap`), as itself."""
    inner = unwrap(err)
    if inner is err:
        raise err
    raise inner from None


def retry_store(fn: Callable[[], T], wait_s: float, max_backoff_s: float = 30.0) -> T:
    """``fn()``, retried with backoff (1, 2, 4 … s) while the store is unreachable, for up to
    ``wait_s`` seconds; the last error is raised after that (``wait_s=0``: no retry). A Ctrl-C
    during a call is delivered once the call has ended (:func:`interrupt_deferred`)."""
    deadline = time.monotonic() + max(0.0, wait_s)
    delay, warned = 1.0, False
    while True:
        try:
            with interrupt_deferred():
                return fn()
        except Exception as err:
            if not is_store_outage(err):
                reraise(err)
            if time.monotonic() + delay > deadline:
                raise
            if not warned:
                log.warning(
                    "tracking store unreachable (%s); retrying for %.0f s", _short(err), wait_s
                )
                warned = True
            time.sleep(delay)
            delay = min(max_backoff_s, delay * 2)


def _short(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:300]}{'…' if len(text) > 300 else ''}"


def read_journal(path: Path) -> tuple[str | None, list[dict[str, Any]]]:
    """The run id and records of a journal; a truncated last line (a kill mid-write) is
    dropped."""
    if not path.is_file():
        return None, []
    run_id: str | None = None
    records: list[dict[str, Any]] = []
    with path.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(rec, dict):
                continue
            if "run_id" in rec and "t" not in rec:
                run_id = str(rec["run_id"])
            elif rec.get("t") in ("m", "tag"):
                records.append(rec)
    return run_id, records


def points_in_store(client: MlflowClient, run_id: str) -> set[tuple[str, int, int]]:
    """``(key, step, timestamp)`` of every metric point the store holds for ``run_id``."""
    keys = list(client.get_run(run_id).data.metrics)
    return {
        (k, int(m.step), int(m.timestamp))
        for k in keys
        for m in client.get_metric_history(run_id, k)
    }


def unsent(
    records: list[dict[str, Any]], present: set[tuple[str, int, int]]
) -> tuple[list[tuple[str, float, int, int]], dict[str, str]]:
    """The journal's points the store lacks (``(key, value, timestamp, step)``) and its tags."""
    points: list[tuple[str, float, int, int]] = []
    tags: dict[str, str] = {}
    for rec in records:
        if rec["t"] == "tag":
            tags[str(rec["k"])] = str(rec["v"])
            continue
        key, step, ts = str(rec["k"]), int(rec["s"]), int(rec["ts"])
        if (key, step, ts) not in present:
            points.append((key, float(rec["v"]), ts, step))
    return points, tags


def send_journal(client: MlflowClient, run: Run) -> int:
    """Send what a run whose process is gone journaled but never sent; how many points.

    A process killed outright (SIGKILL, a node lost) between an epoch's checkpoint and the
    next flush leaves points in its journal (tag ``graphssl.journal``) that the store lacks;
    whoever marks the run ``KILLED`` sends them first, so the store agrees with the
    checkpoint even when the run is never resumed. A journal that now belongs to another run
    (a later start of the same configuration) is left alone.
    """
    from graphssl.tracking.mlflow_store import log_timed_metrics, set_tags

    path = run.data.tags.get(JOURNAL_TAG)
    if not path:
        return 0
    owner, records = read_journal(Path(path))
    if owner != run.info.run_id:
        return 0
    points, tags = unsent(records, points_in_store(client, run.info.run_id))
    log_timed_metrics(client, run.info.run_id, points)
    set_tags(client, run.info.run_id, tags)
    if points:
        log.warning(
            "run %s: sent %d metric points its process had journaled in %s but not sent",
            run.info.run_id,
            len(points),
            path,
        )
    return len(points)


class RunSink(Protocol):
    """What :class:`BufferedRun` sends to: an entered :class:`~graphssl.tracking.run.RunTracker`."""

    run_id: str
    tracking_uri: str
    client: MlflowClient

    def log_timed_points(self, points: list[tuple[str, float, int, int]]) -> None: ...

    def set_tags(self, tags: Mapping[str, Any]) -> None: ...


class BufferedRun:
    """The metrics sink of a run: journal on disk first, then the MLflow store.

    Args:
        tracker: the entered :class:`~graphssl.tracking.run.RunTracker`.
        path: the journal file (:func:`journal_path` of the checkpoint).
        resumed: the run continues an interrupted attempt: replay its journal and skip what it
            already logged.
        max_backoff_s: longest wait between two retries while the store is unreachable.
        clock: monotonic clock (tests pass a fake one).
    """

    def __init__(
        self,
        tracker: RunSink,
        path: str | os.PathLike[str],
        resumed: bool = False,
        max_backoff_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tracker = tracker
        self.path = Path(path)
        self.max_backoff_s = max_backoff_s
        self.clock = clock
        self._pending_points: list[tuple[str, float, int, int]] = []
        self._pending_tags: dict[str, str] = {}
        self._logged: set[tuple[str, str, int]] = set()  # (kind, key, step) journaled
        self._failures = 0
        self._next_try = 0.0
        self.outage_error: str | None = None
        self.journaled_points = 0
        self._fh: IO[str] | None = None
        self._open(resumed)

    # ------------------------------------------------------------------ journal
    def _open(self, resumed: bool) -> None:
        run_id, records = read_journal(self.path) if resumed else (None, [])
        replay = run_id == self.tracker.run_id
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if replay:
                self._fh = self.path.open("a", encoding="utf-8")
            else:
                self._fh = self.path.open("w", encoding="utf-8")
                self._write([{"run_id": self.tracker.run_id}], sync=True)
        except OSError as err:
            raise self._journal_error(err) from err
        if not replay:
            if resumed:  # no journal of that attempt: what the store holds was logged
                self._logged = {(EPOCH, k, step) for k, step, _ in self._points_in_store()}
            return
        self._logged = {
            (str(r.get("kind", EPOCH)), str(r["k"]), int(r["s"])) for r in records if r["t"] == "m"
        }
        self._pending_points, self._pending_tags = unsent(records, self._points_in_store())
        if self._pending_points or self._pending_tags:
            log.info(
                "replaying %d metric points from %s into run %s",
                len(self._pending_points),
                self.path,
                self.tracker.run_id,
            )

    def _points_in_store(self) -> set[tuple[str, int, int]]:
        try:
            return points_in_store(self.tracker.client, self.tracker.run_id)
        except Exception as err:
            if not is_store_outage(err):
                reraise(err)
            return set()

    def _journal_error(self, err: OSError) -> JournalWriteError:
        reason = "the disk is full" if err.errno == errno.ENOSPC else (err.strerror or str(err))
        return JournalWriteError(
            err.errno or errno.EIO,
            f"cannot write the metrics journal {self.path} ({reason}); the last checkpoint in "
            f"{self.path.parent} is kept — free space (or fix the folder) and run the same "
            f"command with resume=true to continue from it",
        )

    def _write(self, records: list[dict[str, Any]], sync: bool = False) -> None:
        assert self._fh is not None
        try:
            self._fh.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))
            self._fh.flush()
            if sync:
                os.fsync(self._fh.fileno())
        except OSError as err:
            raise self._journal_error(err) from err

    def sync(self) -> None:
        """Make the journal durable (``fsync``): called before a checkpoint vouches for it."""
        self._write([], sync=True)

    # ------------------------------------------------------------------ sink API
    def log_metrics(self, metrics: Mapping[str, float], step: int = 0, kind: str = EPOCH) -> None:
        """Journal ``metrics`` at ``step`` and queue them for the store."""
        self.log_points([(k, float(v), int(step)) for k, v in metrics.items()], kind=kind)

    def log_points(self, points: list[tuple[str, float, int]], kind: str = EPOCH) -> None:
        now = int(time.time() * 1000)
        fresh = [(k, v, s) for k, v, s in points if (kind, k, s) not in self._logged]
        if not fresh:
            return
        self._write(
            [{"t": "m", "kind": kind, "k": k, "v": v, "s": s, "ts": now} for k, v, s in fresh]
        )
        for k, v, s in fresh:
            self._logged.add((kind, k, s))
            self._pending_points.append((k, v, now, s))
        self.journaled_points += len(fresh)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        items = {str(k): str(v) for k, v in tags.items()}
        self._write([{"t": "tag", "k": k, "v": v} for k, v in items.items()])
        self._pending_tags.update(items)

    @property
    def pending(self) -> int:
        """Points and tags not yet in the store."""
        return len(self._pending_points) + len(self._pending_tags)

    @property
    def in_outage(self) -> bool:
        return self._failures > 0

    # ------------------------------------------------------------------ store I/O
    def flush(self, force: bool = False) -> bool:
        """Send what is pending; ``True`` when nothing is left. Never raises for an outage:
        it is remembered and the next flush (not before the backoff) retries."""
        if not self.pending:
            return True
        if not force and self.clock() < self._next_try:
            return False
        try:
            self.sync()
            with interrupt_deferred():  # a batch is sent whole or not at all
                if self._pending_points:
                    self.tracker.log_timed_points(self._pending_points)
                    self._pending_points = []
                if self._pending_tags:
                    self.tracker.set_tags(self._pending_tags)
                    self._pending_tags = {}
        except Exception as err:
            if not is_store_outage(err):
                reraise(err)
            self._record_failure(err)
            return False
        if self._failures:
            log.warning(
                "tracking store %s reachable again; sent the buffered metrics",
                self.tracker.tracking_uri,
            )
        self._failures, self.outage_error = 0, None
        return True

    def _record_failure(self, err: BaseException) -> None:
        if self._failures == 0:
            log.warning(
                "tracking store %s unreachable (%s); training goes on, metrics are kept in %s "
                "and sent when it is back",
                self.tracker.tracking_uri,
                _short(err),
                self.path,
            )
        self._failures += 1
        self.outage_error = _short(err)
        self._next_try = self.clock() + min(self.max_backoff_s, 2.0 ** (self._failures - 1))

    def call(self, what: str, fn: Callable[[], T], wait_s: float) -> T:
        """Run one store call, retrying with backoff for up to ``wait_s`` seconds.

        Raises:
            StoreUnavailableError: the store stayed unreachable for ``wait_s`` seconds.
        """
        deadline = self.clock() + max(0.0, wait_s)
        delay = 1.0
        while True:
            try:
                return fn()
            except Exception as err:
                if not is_store_outage(err):
                    reraise(err)
                if self._failures == 0:
                    self._record_failure(err)
                self.outage_error = _short(err)
                if self.clock() + delay > deadline:
                    raise self.unavailable(what) from err
                time.sleep(delay)
                delay = min(self.max_backoff_s, delay * 2)

    def drain(self, wait_s: float) -> None:
        """Flush everything, retrying for up to ``wait_s`` seconds (end of training).

        Raises:
            StoreUnavailableError: points are still pending after ``wait_s`` seconds.
        """

        def send() -> None:
            if not self.flush(force=True):
                raise ConnectionError(self.outage_error or "store unreachable")

        self.call("send the buffered metrics", send, wait_s)

    def unavailable(self, what: str) -> StoreUnavailableError:
        """The one-paragraph error for a store that stayed away."""
        ckpt = self.path.parent / "last.pt"
        kept = f"the checkpoint {ckpt}" if ckpt.is_file() else "no checkpoint"
        return StoreUnavailableError(
            f"the tracking store {self.tracker.tracking_uri} stayed unreachable "
            f"({self.outage_error}) and graphssl could not {what}; kept on disk: "
            f"{kept} and {self.journaled_points} metric points in {self.path} — "
            f"bring the store back and run the same command with resume=true to send them "
            f"and finish run {self.tracker.run_id} (set logger.store_wait_s to wait longer)"
        )

    def close(self) -> None:
        """One last attempt to send what is pending (never raises), then close the journal."""
        try:
            self.flush(force=True)
        except Exception as err:
            log.warning(
                "could not send the buffered metrics of run %s: %s",
                self.tracker.run_id,
                _short(err),
            )
        if self._fh is not None:
            with contextlib.suppress(OSError):
                self._fh.close()
            self._fh = None
