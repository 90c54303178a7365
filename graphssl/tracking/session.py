"""One tracked run: the object a task opens, logs through and closes.

:func:`open_run` is the one entry of the tracking layer a task needs. It is built from the logger
settings (``logger.*``), the run's :class:`RunIdentity` and the resolved config as the record to
log — never asked to dig settings out of the config itself — and returns a :class:`TrackedRun`,
a context manager that owns, in this order on enter:

* the store (:class:`~graphssl.tracking.store.TrackingStore`) and its retries while it is
  unreachable (``logger.store_wait_s``);
* the run's identity: the config hash, stale runs of the same hash marked ``KILLED``, and with
  ``resume=true`` the interrupted run and checkpoint to continue;
* secret masking (:class:`~graphssl.tracking.secrets.Masker`) of params, tags and artifacts;
* the MLflow run (a sweep job's run under the sweep's parent), its tags and, once per run, its
  params, ``config.yaml`` and Hydra's ``.hydra/`` files;
* the metrics journal (:class:`~graphssl.tracking.buffer.BufferedRun`) every metric point goes
  through first, so losing the store loses none.

Everything the run writes later goes through its methods: the trainer's metrics callback, the
dataset, the model, the final metrics and tags, figures and embeddings. On exit the run ends
``FINISHED`` only when the block completed (``FAILED`` on an error, ``KILLED`` on Ctrl-C or
SIGTERM), after the journal is flushed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import torch
from torch import nn

from graphssl.tracking.buffer import FINAL, JOURNAL_TAG, BufferedRun, journal_path, retry_store
from graphssl.tracking.context import store_settings
from graphssl.tracking.conventions import split_config_values, standard_tags
from graphssl.tracking.embeddings import log_embeddings
from graphssl.tracking.identity import resume_target
from graphssl.tracking.mlflow_store import flatten
from graphssl.tracking.models import initial_state, log_method
from graphssl.tracking.run import MLflowMetricsCallback, RunTracker, log_run_config
from graphssl.tracking.secrets import Masker
from graphssl.tracking.stale import HASH_TAG, owner_tags
from graphssl.tracking.store import TrackingStore
from graphssl.tracking.sweep import job_run_name, read_parent
from graphssl.utils import git_commit, package_versions

__all__ = ["DEFAULT_STORE_WAIT_S", "Launch", "RunIdentity", "TrackedRun", "open_run"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: seconds a run waits for an unreachable store before failing (``logger.store_wait_s``)
DEFAULT_STORE_WAIT_S = 120.0


@dataclass(frozen=True)
class Launch:
    """How the job was launched, as Hydra knows it (all empty for an in-process call).

    Attributes:
        overrides: the job's command-line overrides.
        output_dir: the job's working folder.
        config_dir: the job's ``.hydra/`` folder (its files are logged, masked).
        multirun: the job is one of a sweep (its run goes under the sweep's parent run).
        sweep_dir: the sweep's folder, where the parent run's record lies.
    """

    overrides: tuple[str, ...] = ()
    output_dir: str | None = None
    config_dir: Path | None = None
    multirun: bool = False
    sweep_dir: str | None = None


@dataclass(frozen=True)
class RunIdentity:
    """What makes a run this run.

    Attributes:
        name: the run's display name before a sweep's suffix (``<model>-<dataset>``).
        config_hash: hash of the resolved config (:func:`~graphssl.tracking.identity.config_hash`).
        outputs_dir: the outputs folder; checkpoints go to ``checkpoints/<config_hash>/``.
        resume: continue the interrupted run of the same hash from its checkpoint.
        rerun_of: the MLflow run id whose stored config this run repeats.
        launch: how the job was launched.
    """

    name: str
    config_hash: str
    outputs_dir: Path
    resume: bool = False
    rerun_of: str | None = None
    launch: Launch = field(default_factory=Launch)

    @property
    def checkpoint_path(self) -> Path:
        """The run's resumable checkpoint, ``<outputs>/checkpoints/<config hash>/last.pt``."""
        return Path(self.outputs_dir).absolute() / "checkpoints" / self.config_hash / "last.pt"


def open_run(
    logger: Mapping[str, Any],
    identity: RunIdentity,
    record: Mapping[str, Any],
    *,
    command: str = "graphssl",
) -> TrackedRun:
    """The tracked run of ``identity`` (enter it to start or resume the MLflow run).

    Args:
        logger: the logger settings (``conf/logger/``): ``tracking_uri``, ``experiment_name``,
            ``store_wait_s``, ``secret_patterns``, ``log_model``, ``log_embeddings``,
            ``telemetry``.
        identity: the run's name, config hash, outputs folder, resume switch and launch.
        record: the resolved config as plain containers: logged as params and
            ``config.yaml`` with secrets masked, and read for the secret values to mask.
        command: the command named in the run's note.

    Raises:
        ValueError: ``logger.secret_patterns`` holds an invalid regular expression (before any
            store is touched).
    """
    return TrackedRun(logger, identity, record, command=command)


class TrackedRun:
    """A run in the MLflow store with everything it logs (see the module docstring).

    Use :func:`open_run` to build one. Attributes valid after entering: :attr:`run_id`,
    :attr:`resumed`, :attr:`resume_state` (the checkpoint to continue from, or ``None``) and
    :attr:`sink` (the metrics journal).
    """

    def __init__(
        self,
        logger: Mapping[str, Any],
        identity: RunIdentity,
        record: Mapping[str, Any],
        *,
        command: str = "graphssl",
    ) -> None:
        self.identity = identity
        self.record = record
        self.command = command
        self.wait_s = float(logger.get("store_wait_s", DEFAULT_STORE_WAIT_S))
        self.log_model_enabled = bool(logger.get("log_model", True))
        self.log_embeddings_enabled = bool(logger.get("log_embeddings", True))
        self.masker = Masker.from_config(record)  # an invalid pattern fails before the store
        settings = store_settings(logger, identity.outputs_dir)
        self.store = TrackingStore(
            settings["tracking_uri"], settings["experiment_name"], settings["artifact_location"]
        )
        self.resume_state: dict[str, Any] | None = None
        self._tracker: RunTracker | None = None
        self._sink: BufferedRun | None = None

    # ------------------------------------------------------------------ identity
    @property
    def checkpoint_path(self) -> Path:
        """Where the trainer's checkpoints of this run go (and resume reads)."""
        return self.identity.checkpoint_path

    @property
    def config_hash(self) -> str:
        return self.identity.config_hash

    @property
    def tracker(self) -> RunTracker:
        if self._tracker is None:
            raise RuntimeError("the run is not started: enter it (`with open_run(...) as run:`)")
        return self._tracker

    @property
    def sink(self) -> BufferedRun:
        """The run's metrics journal (the trainer callbacks' ``sink``)."""
        if self._sink is None:
            raise RuntimeError("the run is not started: enter it (`with open_run(...) as run:`)")
        return self._sink

    @property
    def run_id(self) -> str:
        return self.tracker.run_id

    @property
    def run_name(self) -> str | None:
        return self.tracker.run_name

    @property
    def resumed(self) -> bool:
        return self.tracker.resumed

    @property
    def checkpoint_extra(self) -> dict[str, str]:
        """What each checkpoint records of the run, so ``resume=true`` finds it again."""
        return {"mlflow_run_id": self.run_id}

    def _tags(self) -> dict[str, str]:
        launch = self.identity.launch
        tags = {f"version.{k}": v for k, v in package_versions().items()}
        tags["git.commit"] = git_commit()
        overrides = list(launch.overrides) if launch.output_dir is not None else None
        tags.update(standard_tags(tags["git.commit"], overrides, self.command))
        if self.identity.rerun_of:
            tags["graphssl.rerun_of"] = str(self.identity.rerun_of)
        if launch.output_dir is not None:
            tags["graphssl.overrides"] = " ".join(launch.overrides)
            tags["graphssl.output_dir"] = str(launch.output_dir)
            tags["graphssl.role"] = "job" if launch.multirun else "run"
        tags.update(owner_tags())
        tags[HASH_TAG] = self.config_hash
        return self.masker.mapping(tags)

    def _params(self) -> dict[str, Any]:
        flat = flatten(dict(self.record))
        # model.encoder.* repeats encoder.* (the model config interpolates it)
        return {k: v for k, v in flat.items() if not k.startswith("model.encoder.")}

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> TrackedRun:
        launch = self.identity.launch
        parent = read_parent(launch.sweep_dir) if launch.multirun and launch.sweep_dir else None
        run_id, self.resume_state = retry_store(
            lambda: resume_target(
                self.store, self.config_hash, self.checkpoint_path, self.identity.resume
            ),
            self.wait_s,
        )
        tracker = self.store.start_run(
            job_run_name(self.identity.name, list(launch.overrides), parent, self.masker),
            parent_run_id=parent["run_id"] if parent else None,
            tags=self._tags(),
            run_id=run_id,
            wait_s=self.wait_s,
        )
        retry_store(self.store.check_artifact_root, self.wait_s)
        tracker.__enter__()
        self._tracker = tracker
        journal = journal_path(self.checkpoint_path, tracker.run_id)
        try:
            if not tracker.resumed:
                # the journal is the run's own: named by its id, found again on resume
                retry_store(lambda: tracker.set_tags({JOURNAL_TAG: str(journal)}), self.wait_s)
            if not tracker.resumed:  # params are logged once per run: MLflow refuses changes
                from omegaconf import OmegaConf

                config_yaml = OmegaConf.to_yaml(OmegaConf.create(dict(self.record)))
                log_run_config(tracker, self.masker, self._params(), config_yaml, launch.config_dir)
            self._sink = BufferedRun(tracker, journal, resumed=tracker.resumed)
            tracker.before_exit.append(self._sink.close)  # also when the run fails or is killed
        except BaseException as err:
            tracker.__exit__(type(err), err, err.__traceback__)
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.tracker.__exit__(exc_type, exc, tb)

    # ------------------------------------------------------------------ what the run logs
    def call(self, what: str, fn: Callable[[], T]) -> T:
        """``fn()``, retried while the store is unreachable (up to ``logger.store_wait_s``)."""
        return self.sink.call(what, fn, self.wait_s)

    def metrics_callback(self) -> MLflowMetricsCallback:
        """The trainer callback that sends each epoch's metrics through the journal."""
        return MLflowMetricsCallback(self.sink)

    def initial_weights(
        self, ckpt_path: str | None, from_run: str | None
    ) -> dict[str, torch.Tensor] | None:
        """The weights ``ckpt_path=`` or ``from_run=`` asks the run to start from, else
        ``None`` (:func:`~graphssl.tracking.models.initial_state`)."""
        return initial_state(self.store, ckpt_path, from_run)

    def log_dataset(
        self, name: str, settings: Mapping[str, Any], stats: Mapping[str, float]
    ) -> None:
        """The dataset as an MLflow dataset input (its settings masked), once per run."""
        if self.resumed:
            return
        masked = self.masker.tree(dict(settings), "dataset")
        self.call("log the dataset", lambda: self.tracker.log_dataset(name, masked, dict(stats)))

    def log_model(self, method: nn.Module, model_config: Any) -> None:
        """The trained method as ``model/`` (weights, ``model.yaml`` and the masked run config),
        unless ``logger.log_model=false``."""
        if not self.log_model_enabled:
            return
        from omegaconf import OmegaConf

        masked = OmegaConf.create(self.masker.tree(dict(self.record)))
        self.call("log the model", lambda: log_method(self.tracker, method, model_config, masked))

    def log_results(
        self, metrics: Mapping[str, float], tags: Mapping[str, str] | None = None
    ) -> None:
        """The final metrics (probe settings such as the selected L2 as tags) and ``tags``,
        through the journal; waits until they reached the store, then closes the journal."""
        measured, config_values = split_config_values(metrics)
        self.sink.log_metrics(measured, kind=FINAL)
        self.sink.set_tags({**config_values, **dict(tags or {})})
        self.sink.drain(self.wait_s)
        self.sink.close()

    def log_figures(self, figures: Callable[[], Mapping[str, Any]]) -> None:
        """The figures ``figures()`` draws, each under its artifact file name."""

        def draw_and_log() -> None:
            for name, figure in figures().items():
                self.tracker.log_figure(figure, name)

        self.call("log the figures", draw_and_log)

    def log_embeddings(self, z: torch.Tensor, y: torch.Tensor | None) -> None:
        """The embeddings (and labels) as ``embeddings.pt``, unless
        ``logger.log_embeddings=false``."""
        if self.log_embeddings_enabled:
            self.call("log the embeddings", lambda: log_embeddings(self.tracker, z, y))

    def log_metrics(self, metrics: Mapping[str, float]) -> None:
        """Metrics straight to the store (after the journal is closed), retried."""
        self.call("log the final timings", lambda: self.tracker.log_metrics(dict(metrics)))

    def __repr__(self) -> str:
        state = self._tracker.run_id if self._tracker is not None else "not started"
        return f"TrackedRun({self.identity.name!r}, {state}, {self.store!r})"
