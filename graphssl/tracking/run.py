"""One MLflow run as a context manager, the trainer callback that feeds it metrics, and a run's
configuration logged with its secrets masked (:func:`log_run_config`)."""

from __future__ import annotations

import logging
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from graphssl.tracking import mlflow_store
from graphssl.tracking.buffer import retry_store
from graphssl.tracking.mlflow_store import interrupt_deferred
from graphssl.tracking.secrets import Masker, mask_hydra_dir
from graphssl.training.trainer import Callback, EpochResult, FitResult, Trainer

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

    from graphssl.tracking.buffer import BufferedRun

log = logging.getLogger(__name__)


class RunTracker:
    """Creates an MLflow run on enter and terminates it on exit.

    The run ends ``FINISHED`` only when the block completes; an exception ends it ``FAILED``
    with the error text stored as the tag ``error`` and the traceback as ``error.txt``; Ctrl-C
    ends it ``KILLED``. Nothing is logged through MLflow's global "active run" state, so many
    runs can follow each other in one process (Hydra's basic launcher).

    Args:
        tracking_uri: MLflow tracking URI.
        experiment_name: experiment to log into (created if missing).
        run_name: display name of the run.
        parent_run_id: id of the sweep's parent run, when the run is one job of a multirun.
        tags: extra tags set at creation.
        artifact_location: artifact root for a newly created experiment.
        run_id: continue this existing run (``resume=true``) instead of creating one.
        client: the MLflow client to log through (a
            :class:`~graphssl.tracking.store.TrackingStore` passes its own; default: a client of
            its own on ``tracking_uri``).
        experiment_id: the id of ``experiment_name``, when the caller knows it (default: looked
            up, or the experiment created).

    It is also the metrics sink of the trainer callbacks
    (:class:`graphssl.training.callbacks.MetricSink`: ``log_metrics`` and ``set_tags``).
    """

    def __init__(
        self,
        tracking_uri: str,
        experiment_name: str,
        run_name: str | None = None,
        parent_run_id: str | None = None,
        tags: Mapping[str, str] | None = None,
        artifact_location: str | None = None,
        run_id: str | None = None,
        client: MlflowClient | None = None,
        experiment_id: str | None = None,
    ) -> None:
        # MLflow logs every SQL error of its store with the full traceback before raising it;
        # graphssl reports the raised error itself (a warning line, or the task's one paragraph)
        logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
        self.tracking_uri = tracking_uri
        self.client = client if client is not None else mlflow_store.client(tracking_uri)
        if artifact_location is None and tracking_uri.startswith("sqlite:///"):
            # beside the store, never MLflow's cwd-relative ./mlruns default
            store_dir = Path(tracking_uri[len("sqlite:///") :]).parent
            artifact_location = mlflow_store.default_artifact_location(tracking_uri, store_dir)
        if experiment_id is not None:
            self.experiment_id = experiment_id
        else:
            self.experiment_id = mlflow_store.ensure_experiment(
                self.client, experiment_name, artifact_location
            )
        self.run_name = run_name
        self.parent_run_id = parent_run_id
        self.tags = dict(tags or {})
        self.run_id: str = run_id or ""
        self.resumed = run_id is not None
        #: how long creating and closing the run, and logging its params and files, retry a
        #: store that is unreachable (metric points go through a buffer instead)
        self.wait_s = 0.0
        #: called first on exit, however the block ends (e.g. sending buffered metrics)
        self.before_exit: list[Callable[[], None]] = []

    def __enter__(self) -> RunTracker:
        if self.resumed:
            retry_store(lambda: self.client.update_run(self.run_id, status="RUNNING"), self.wait_s)
            self.set_tags({**self.tags, "graphssl.resumed": "true"})
            log.info("MLflow run %s resumed", self.run_id)
            return self
        tags = dict(self.tags)
        if self.parent_run_id:
            tags["mlflow.parentRunId"] = self.parent_run_id
        run = retry_store(
            lambda: self.client.create_run(self.experiment_id, run_name=self.run_name, tags=tags),
            self.wait_s,
        )
        self.run_id = run.info.run_id
        log.info("MLflow run %s (%s) in %s", self.run_id, self.run_name, self.tracking_uri)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for hook in self.before_exit:
            hook()
        if exc_type is None:
            retry_store(lambda: self.client.set_terminated(self.run_id, "FINISHED"), self.wait_s)
            return
        status = "KILLED" if issubclass(exc_type, KeyboardInterrupt) else "FAILED"
        if status == "KILLED" and exc is not None:  # named by the console's Ctrl-C line
            killed = getattr(exc, "graphssl_killed_runs", [])
            exc.graphssl_killed_runs = [*killed, self.run_id]  # type: ignore[attr-defined]
        try:
            message = f"{exc_type.__name__}: {exc}"
            self.client.set_tag(self.run_id, "error", message[:5000])
            self.client.log_text(
                self.run_id, "".join(traceback.format_exception(exc_type, exc, tb)), "error.txt"
            )
        except Exception as err:  # the store may be what failed: keep the original error
            log.warning("could not record the error on run %s: %s", self.run_id, _brief(err))
        try:
            self.client.set_terminated(self.run_id, status)
        except Exception as err:
            log.warning(
                "could not mark run %s %s (%s); the next start of this configuration marks it "
                "KILLED, or resume=true continues it",
                self.run_id,
                status,
                _brief(err),
            )

    # ------------------------------------------------------------------ logging
    def log_params(self, params: Mapping[str, Any]) -> None:
        retry_store(lambda: mlflow_store.log_params(self.client, self.run_id, params), self.wait_s)

    def log_metrics(self, metrics: Mapping[str, float], step: int = 0) -> None:
        mlflow_store.log_metrics(
            self.client, self.run_id, ((k, v, step) for k, v in metrics.items())
        )

    def log_points(self, points: list[tuple[str, float, int]]) -> None:
        mlflow_store.log_metrics(self.client, self.run_id, points)

    def log_timed_points(self, points: list[tuple[str, float, int, int]]) -> None:
        """Log ``(key, value, timestamp_ms, step)`` points (a replayed journal keeps its
        timestamps, so MLflow ignores a point it already has)."""
        mlflow_store.log_timed_metrics(self.client, self.run_id, points)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        mlflow_store.set_tags(self.client, self.run_id, tags)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        with interrupt_deferred():
            self.client.log_artifact(self.run_id, str(path), artifact_path)

    def log_artifacts(self, folder: str | Path, artifact_path: str | None = None) -> None:
        retry_store(
            lambda: self.client.log_artifacts(self.run_id, str(folder), artifact_path),
            self.wait_s,
        )

    def log_figure(self, figure: Any, artifact_file: str) -> None:
        with interrupt_deferred():
            self.client.log_figure(self.run_id, figure, artifact_file)

    def log_text(self, text: str, artifact_file: str) -> None:
        retry_store(lambda: self.client.log_text(self.run_id, text, artifact_file), self.wait_s)

    def log_dataset(
        self,
        name: str,
        config: Any,
        profile: Mapping[str, float],
        context: str = "training",
    ) -> str:
        """Record the run's dataset as an MLflow input (the run page's "Datasets" column).

        The digest is a hash of the dataset's resolved ``config`` (a mapping) and its size
        (``profile``: node, edge and graph counts), so two runs on the same data show the same
        dataset. Returns the digest.
        """
        import hashlib
        import json

        from mlflow.entities import Dataset, DatasetInput, InputTag

        body = json.dumps({"config": config, "profile": profile}, sort_keys=True, default=str)
        digest = hashlib.sha256(body.encode()).hexdigest()[:16]
        dataset = Dataset(
            name=name,
            digest=digest,
            source_type="graphssl",
            source=json.dumps({"name": name, "config": config}, sort_keys=True, default=str),
            schema=json.dumps({"graphssl": {k: float(v) for k, v in profile.items()}}),
            profile=json.dumps({k.split("/")[-1]: float(v) for k, v in profile.items()}),
        )
        tags = [InputTag(key="mlflow.data.context", value=context)]
        inputs = [DatasetInput(dataset=dataset, tags=tags)]
        for attempt in range(3):
            try:
                with interrupt_deferred():
                    self.client.log_inputs(self.run_id, datasets=inputs)
                break
            except Exception as err:
                # Two jobs of a sweep logging the same dataset at once race on the store's
                # unique (experiment, name, digest) key; the loser finds the row on retry.
                if attempt == 2 or not _is_duplicate_key(err):
                    raise
                time.sleep(0.2 * (attempt + 1))
        return digest


class MLflowMetricsCallback(Callback):
    """Logs per-epoch training metrics as ``train/<name>`` (step = epoch) through a
    :class:`~graphssl.tracking.buffer.BufferedRun`.

    Points are journaled on disk at the end of each epoch and sent to the store in batches
    after the epoch's checkpoint is written (:meth:`on_epoch_complete`), so a store that fails
    never costs a checkpoint. While the store is unreachable every epoch is checkpointed, so a
    run killed during an outage loses nothing that was trained.

    Args:
        sink: the run's buffered sink.
        flush_every: send to the store every this many epochs (and after each checkpoint).
    """

    def __init__(self, sink: BufferedRun, flush_every: int = 50) -> None:
        self.sink = sink
        self.flush_every = max(1, flush_every)
        self._saved = False

    def on_epoch_end(self, trainer: Trainer, method: Any, result: EpochResult) -> None:
        points = [(f"train/{k}", v, result.epoch) for k, v in result.metrics.items()]
        points.append(("train/epoch_seconds", result.seconds, result.epoch))
        self.sink.log_points(points)
        if self.sink.in_outage:
            trainer.should_checkpoint = True

    def on_checkpoint(self, trainer: Trainer, method: Any, epoch: int) -> None:
        self.sink.sync()  # the checkpoint vouches for the journal up to this epoch
        self._saved = True

    def on_epoch_complete(self, trainer: Trainer, method: Any, epoch: int) -> None:
        saved, self._saved = self._saved, False
        if saved or self.sink.in_outage or (epoch + 1) % self.flush_every == 0:
            self.sink.flush()

    def on_fit_end(self, trainer: Trainer, method: Any, result: FitResult) -> None:
        self.sink.flush()

    def flush(self) -> None:
        self.sink.flush()


def _brief(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:200]}"


def _is_duplicate_key(err: BaseException) -> bool:
    """``True`` when a store refused an insert because a concurrent writer made the row."""
    text = str(err)
    return (
        "UniqueViolation" in text or "UNIQUE constraint failed" in text or ("duplicate key" in text)
    )


def log_run_config(
    tracker: RunTracker,
    masker: Masker,
    params: Mapping[str, Any],
    config_yaml: str,
    hydra_dir: Path | None,
) -> None:
    """Log a run's params, ``config.yaml`` and ``.hydra/*`` files, with secrets masked; the
    run folder's ``.hydra/`` files are masked in place too (:func:`mask_hydra_dir`)."""
    tracker.log_params(masker.mapping(params))
    tracker.log_text(masker.yaml_text(config_yaml), "config.yaml")
    if hydra_dir is None or not hydra_dir.is_dir():
        return
    mask_hydra_dir(hydra_dir, masker)
    with tempfile.TemporaryDirectory(prefix="graphssl-hydra-") as tmp:
        for src in sorted(p for p in hydra_dir.rglob("*") if p.is_file()):
            dest = Path(tmp) / src.relative_to(hydra_dir)
            dest.parent.mkdir(parents=True, exist_ok=True)
            try:
                text = src.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue  # only Hydra's YAML files are expected here; anything else stays out
            masked = (
                masker.yaml_text(text) if src.suffix in (".yaml", ".yml") else masker.text(text)
            )
            dest.write_text(masked, encoding="utf-8")
        tracker.log_artifacts(tmp, ".hydra")
