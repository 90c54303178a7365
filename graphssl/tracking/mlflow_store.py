"""The MLflow store: where it is, creating it once, and writing runs through one client.

Only :mod:`graphssl.tracking` imports MLflow. The default store is
``sqlite:///<absolute outputs dir>/mlflow.db`` with artifacts in ``<outputs dir>/mlartifacts``;
``MLFLOW_TRACKING_URI`` overrides it. Telemetry stays off unless the user turns it on.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

log = logging.getLogger(__name__)

MAX_PARAM_CHARS = 6000
SQLITE_HEADER = b"SQLite format 3\x00"


class StoreError(ValueError):
    """The MLflow store cannot be used: not a database file, a full disk, a broken schema."""


@contextlib.contextmanager
def interrupt_deferred() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) for the duration of the block, then deliver it.

    A ``KeyboardInterrupt`` raised in the middle of a store call can leave it half done: under a
    SQLite store, a connection whose write transaction is neither committed nor rolled back keeps
    the database locked while the interrupted frames are alive — exactly while the run is being
    marked ``KILLED`` through another connection. Inside this block a first SIGINT is only
    recorded, and the handler that was installed runs once the block has ended (so a
    ``KeyboardInterrupt`` is raised there, after the write); a second one runs it at once, for a
    write that hangs (a store that stopped answering). Blocks nest (the outermost one holds);
    outside the main thread, or when SIGINT has no Python handler (ignored, default), this does
    nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if not callable(previous) or getattr(previous, "holds_interrupts", False):
        yield  # nothing to hold, or an enclosing block holds it
        return
    held: list[tuple[int, Any]] = []

    def hold(signum: int, frame: Any) -> None:
        held.append((signum, frame))
        if len(held) > 1:  # pressed again: now
            signal.signal(signal.SIGINT, previous)
            previous(signum, frame)

    hold.holds_interrupts = True  # type: ignore[attr-defined]
    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if len(held) == 1:
            previous(*held[0])


def configure_telemetry(enabled: bool = False) -> None:
    """Turn MLflow's telemetry off (default) before MLflow is imported."""
    if not enabled:
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        os.environ.setdefault("DO_NOT_TRACK", "true")


def resolve_tracking_uri(tracking_uri: str | None, outputs_dir: str | os.PathLike[str]) -> str:
    """``tracking_uri`` if given, else ``$MLFLOW_TRACKING_URI``, else the SQLite default."""
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    root = Path(outputs_dir).absolute()
    return f"sqlite:///{root / 'mlflow.db'}"


def default_artifact_location(tracking_uri: str, outputs_dir: str | os.PathLike[str]) -> str | None:
    """Artifacts beside a local SQLite store; ``None`` (server default) for remote stores."""
    if tracking_uri.startswith("sqlite:///"):
        return (Path(outputs_dir).absolute() / "mlartifacts").as_uri()
    return None


def client(tracking_uri: str) -> MlflowClient:
    """An ``MlflowClient`` on ``tracking_uri``.

     For a local SQLite store, checks its folder is writable and creates/migrates the schema
     under a file lock, so several processes starting at once on a fresh store do not race
    . For a server, a dead address fails in seconds, in one paragraph, at the first contact
     (:func:`check_server`); later requests retry briefly
     (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``/``_TIMEOUT`` are only defaulted, not forced).
    """
    configure_telemetry(os.environ.get("GRAPHSSL_MLFLOW_TELEMETRY", "") == "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
    db = sqlite_store_path(tracking_uri)  # validated before any MLflow call
    if db is not None:
        folder = db.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise PermissionError(
                f"cannot create the MLflow store folder {folder} ({err.strerror}); expected a "
                f"writable outputs folder — set GRAPHSSL_OUTPUTS or logger.tracking_uri"
            ) from err
        if not os.access(folder, os.W_OK):
            raise PermissionError(
                f"the MLflow store folder {folder} is not writable; expected a writable "
                f"outputs folder — set GRAPHSSL_OUTPUTS or logger.tracking_uri"
            )
    from mlflow.tracking import MlflowClient

    if db is not None:
        from filelock import FileLock

        with FileLock(str(db) + ".lock", timeout=300):
            return _open_sqlite_store(db, tracking_uri)
    check_server(tracking_uri)
    return MlflowClient(tracking_uri=tracking_uri)


#: set in the environment once a tracking server accepted a connection (to a digest of its
#: URI), so this process, and the sweep workers it starts, retry a later outage of that server
#: (``logger.store_wait_s``) instead of failing at once
ANSWERED_ENV = "GRAPHSSL_TRACKING_ANSWERED"
#: seconds the first connection to a tracking server may take
CONNECT_TIMEOUT_S = 5.0


def _uri_digest(tracking_uri: str) -> str:
    import hashlib

    return hashlib.sha256(tracking_uri.encode()).hexdigest()[:16]


def check_server(tracking_uri: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Fail at once, in one paragraph, when an ``http(s)://`` tracking server that has not
    answered this process (or the one that started it) cannot be connected to.

    One TCP connection (through the proxy that applies), within ``timeout`` seconds: a refused
    connection or an unknown host at start is a wrong address or a server not started, which
    MLflow's HTTP retries (urllib3, a warning per attempt) and graphssl's outage retries would
    only delay by minutes. A server that answered once keeps those retries.

    Raises:
        ConnectionError: naming the server (password masked) and what to do.
    """
    if not tracking_uri.startswith(("http://", "https://")):
        return
    digest = _uri_digest(tracking_uri)
    if os.environ.get(ANSWERED_ENV) == digest:
        return
    from graphssl.data.paths import check_reachable

    try:
        check_reachable(tracking_uri, timeout)
    except OSError as err:
        from graphssl.tracking.secrets import Masker

        shown = Masker.from_config({}).text(tracking_uri)
        raise ConnectionError(
            f"MLflow tracking server at {shown} is unreachable ({type(err).__name__}: {err}); "
            f"expected a running server at that address — start it (graphssl-ui), correct "
            f"MLFLOW_TRACKING_URI or logger.tracking_uri, or unset both to use the local "
            f"SQLite store (outputs/mlflow.db)"
        ) from err
    os.environ[ANSWERED_ENV] = digest


def sqlite_store_path(tracking_uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (``None`` for other stores), checked to be a
    file that is empty, absent or an SQLite database.

    Raises:
        StoreError: the path is a directory or a file that is not an SQLite database.
    """
    if not tracking_uri.startswith("sqlite:///"):
        return None
    path = tracking_uri[len("sqlite:///") :].split("?", 1)[0]
    if path in ("", ":memory:"):
        return None
    db = Path(path)
    if db.is_dir():
        raise StoreError(
            f"the tracking URI {tracking_uri!r} names the directory {db}, not a database file; "
            f"expected sqlite:///<path of a file>, e.g. sqlite:///{db / 'mlflow.db'} (set "
            f"logger.tracking_uri or MLFLOW_TRACKING_URI)"
        )
    if db.is_file() and db.stat().st_size > 0:
        with open(db, "rb") as f:
            header = f.read(len(SQLITE_HEADER))
        if header != SQLITE_HEADER:
            raise StoreError(
                f"the tracking URI {tracking_uri!r} names {db}, which is not an SQLite database "
                f"(it starts with {header[:8]!r}); expected an MLflow store or a new file's path "
                f"(set logger.tracking_uri or MLFLOW_TRACKING_URI)"
            )
    return db


def _is_disk_full(err: BaseException) -> bool:
    seen: BaseException | None = err
    for _ in range(10):  # the exception chain: SQLAlchemy wraps sqlite3's error
        if seen is None:
            return False
        if isinstance(seen, OSError) and seen.errno == errno.ENOSPC:
            return True
        if "database or disk is full" in str(seen) or "No space left on device" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:300] if text else ''}"


def _disk_full_error(db: Path, err: BaseException, what: str) -> StoreError:
    return StoreError(
        f"the disk holding the MLflow store {db} is full ({_first_line(err)}); {what}. Free "
        f"space in {db.parent} and run again, or point GRAPHSSL_OUTPUTS / logger.tracking_uri "
        f"at a folder with room"
    )


def _count_runs(db: Path) -> int | None:
    """Runs recorded in store ``db`` (0 without a ``runs`` table), ``None`` if unreadable."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
            return (
                int(con.execute("SELECT count(*) FROM runs").fetchone()[0])
                if ("runs" in tables)
                else 0
            )
    except sqlite3.Error:
        return None


def _create_sqlite_store(db: Path) -> None:
    """Create and migrate a fresh store in a temporary file beside ``db``, then rename it into
    place: a failure (a full disk, a kill) never leaves a half-migrated ``db``."""
    from mlflow.tracking import MlflowClient

    for stale in db.parent.glob(f".{db.name}.tmp-*"):  # left by a killed creation
        stale.unlink(missing_ok=True)
    tmp = db.with_name(f".{db.name}.tmp-{os.getpid()}")
    try:
        MlflowClient(tracking_uri=f"sqlite:///{tmp}").search_experiments(max_results=1)
        os.replace(tmp, db)
    except Exception as err:
        # MLflow caches its engine per URI: the next attempt in this process (the same pid, so
        # the same temporary name) must open a new file, not the cached half-migrated one
        _forget_engine(f"sqlite:///{tmp}")
        tmp.unlink(missing_ok=True)
        Path(f"{tmp}-journal").unlink(missing_ok=True)
        if _is_disk_full(err):
            what = f"no store was created (its temporary file {tmp.name} is removed)"
            raise _disk_full_error(db, err, what) from err
        raise


def _forget_engine(tracking_uri: str) -> None:
    """Dispose of MLflow's cached SQLAlchemy engine of ``tracking_uri`` (if it has one)."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    engines = getattr(SqlAlchemyStore, "_engine_map", None)
    engine = engines.pop(tracking_uri, None) if isinstance(engines, dict) else None
    if engine is not None:
        engine.dispose()


def _open_sqlite_store(db: Path, tracking_uri: str) -> MlflowClient:
    """A client on store ``db`` (held under its file lock): a fresh store is created
    atomically; a store whose schema cannot be opened is recreated when it holds no runs."""
    from mlflow.tracking import MlflowClient

    if not db.is_file() or db.stat().st_size == 0:
        db.unlink(missing_ok=True)
        _create_sqlite_store(db)
    try:
        c = MlflowClient(tracking_uri=tracking_uri)
        c.search_experiments(max_results=1)  # migrates an older schema
        return c
    except Exception as err:
        if _is_disk_full(err):
            raise _disk_full_error(db, err, "the store could not be opened") from err
        runs = _count_runs(db)
        if runs != 0:
            held = "an unknown number of" if runs is None else str(runs)
            raise StoreError(
                f"the MLflow store {db} cannot be opened ({_first_line(err)}) and holds {held} "
                f"runs, so graphssl leaves it as it is; expected a store of this MLflow version: "
                f"keep a copy and run `mlflow db upgrade sqlite:///{db}`, or move it aside "
                f"(mv {db} {db}.bak) to start a fresh store"
            ) from err
        log.warning(
            "the MLflow store %s cannot be opened (%s) and holds no runs (a creation "
            "interrupted by a full disk or a kill); creating it again",
            db,
            _first_line(err),
        )
        _forget_engine(tracking_uri)  # its pooled connections still read the old file
        db.unlink()
        _create_sqlite_store(db)
        c = MlflowClient(tracking_uri=tracking_uri)
        c.search_experiments(max_results=1)
        return c


#: MLflow 3's UI opens an experiment in the view this tag names; without it, an experiment with
#: no traces may open in the GenAI view. graphssl's experiments are model training
#: ("custom_model_development": the Runs table, where the probe/diag metrics are columns)
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"


def ensure_experiment(
    mlflow_client: MlflowClient,
    name: str,
    artifact_location: str | None = None,
    retries: int = 5,
) -> str:
    """Return the id of experiment ``name``, creating it (and the store) if needed, tagged as
    a model-training experiment (:data:`EXPERIMENT_KIND_TAG`) unless it already has a kind.

    Creating a fresh SQLite store migrates its schema (7–9 s); concurrent first uses race, so a
    failed creation is retried after a short wait.
    """
    last: Exception | None = None
    for attempt in range(retries):
        try:
            exp = mlflow_client.get_experiment_by_name(name)
            if exp is not None:
                if exp.lifecycle_stage == "deleted":
                    mlflow_client.restore_experiment(exp.experiment_id)
                if EXPERIMENT_KIND_TAG not in exp.tags:  # created before graphssl set it
                    mlflow_client.set_experiment_tag(
                        exp.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND
                    )
                return str(exp.experiment_id)
            return str(
                mlflow_client.create_experiment(
                    name,
                    artifact_location=artifact_location,
                    tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND},
                )
            )
        except Exception as err:
            db = sqlite_store_path(mlflow_client.tracking_uri)
            if db is not None and _is_disk_full(err):
                raise _disk_full_error(db, err, f"experiment {name!r} was not created") from err
            if _is_unreachable(err):
                raise ConnectionError(
                    f"MLflow tracking server at {mlflow_client.tracking_uri} is unreachable "
                    f"({type(err).__name__}); expected a running server — start it (graphssl-ui) "
                    f"or unset MLFLOW_TRACKING_URI to use the local SQLite store"
                ) from err
            last = err
            time.sleep(0.5 * (attempt + 1))
    raise RuntimeError(f"could not create MLflow experiment {name!r}: {last}") from last


def _is_unreachable(err: Exception) -> bool:
    text = f"{type(err).__name__}: {err}"
    return any(
        s in text
        for s in (
            "Connection refused",
            "Max retries exceeded",
            "Failed to establish",
            "ConnectionError",
        )
    )


def flatten(cfg: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Flatten a nested mapping into ``{"a.b.c": value}``; lists become their string form."""
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, Mapping):
            out.update(flatten(v, key))
        else:
            out[key] = v
    return out


def safe_params(params: Mapping[str, Any]) -> dict[str, str]:
    """Stringify params, mask secrets (:mod:`graphssl.tracking.secrets`), cut overlong values."""
    from graphssl.tracking.secrets import Masker

    masker = Masker()  # the default secret patterns; a run's own are applied before this
    out: dict[str, str] = {}
    for k, v in params.items():
        text = str(masker.value(k, v))
        out[k] = text[: MAX_PARAM_CHARS - 3] + "..." if len(text) > MAX_PARAM_CHARS else text
    return out


def log_params(mlflow_client: MlflowClient, run_id: str, params: Mapping[str, Any]) -> None:
    """Log params in batches of 100 (MLflow's limit per call)."""
    from mlflow.entities import Param

    items = [Param(k, v) for k, v in safe_params(params).items()]
    for i in range(0, len(items), 100):
        with interrupt_deferred():
            mlflow_client.log_batch(run_id, params=items[i : i + 100])


def set_tags(mlflow_client: MlflowClient, run_id: str, tags: Mapping[str, Any]) -> None:
    """Set ``tags`` (values as strings) with ``log_batch`` (100 per call): one store
    transaction for a run's tags, not one per tag."""
    from mlflow.entities import RunTag

    items = [RunTag(str(k), str(v)) for k, v in tags.items()]
    for i in range(0, len(items), 100):
        with interrupt_deferred():
            mlflow_client.log_batch(run_id, tags=items[i : i + 100])


def log_metrics(
    mlflow_client: MlflowClient,
    run_id: str,
    points: Iterable[tuple[str, float, int]],
) -> None:
    """Log ``(key, value, step)`` points with ``log_batch`` (1000 per call)."""
    now = int(time.time() * 1000)
    log_timed_metrics(mlflow_client, run_id, ((k, v, now, s) for k, v, s in points))


def log_timed_metrics(
    mlflow_client: MlflowClient,
    run_id: str,
    points: Iterable[tuple[str, float, int, int]],
) -> None:
    """Log ``(key, value, timestamp_ms, step)`` points with ``log_batch`` (1000 per call); a
    replayed journal keeps its timestamps, so MLflow ignores a point it already has."""
    from mlflow.entities import Metric

    batch = [Metric(k, float(v), int(ts), int(s)) for k, v, ts, s in points]
    for i in range(0, len(batch), 1000):
        with interrupt_deferred():
            mlflow_client.log_batch(run_id, metrics=batch[i : i + 1000])
