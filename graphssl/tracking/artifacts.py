"""Reading finished runs back from MLflow: selecting runs, their values, their artifacts.

Used by the evaluate, compare, report and stability tasks, each through its one
:class:`~graphssl.tracking.store.TrackingStore`. Runs come back as plain :class:`RunRecord`
objects (no MLflow types), so the task code never imports MLflow.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from graphssl.tracking import mlflow_store

if TYPE_CHECKING:
    from mlflow.entities import Run
    from mlflow.tracking import MlflowClient

    from graphssl.tracking.store import TrackingStore

log = logging.getLogger(__name__)

ROLE_TAG = "graphssl.role"
#: runs that summarise other runs; never selected as inputs.
SUMMARY_ROLES = ("sweep", "compare", "report", "evaluate")
CONFIG_ARTIFACT = "config.yaml"


@dataclass(frozen=True)
class RunRecord:
    """One MLflow run as plain data.

    Attributes:
        run_id: the run's id.
        run_name: its display name (``""`` when it has none).
        experiment_id: the experiment it belongs to.
        status: ``FINISHED``, ``FAILED``, ``RUNNING`` or ``KILLED``.
        params: logged params (strings).
        metrics: latest value of every logged metric.
        tags: tags, including MLflow's own ``mlflow.*`` ones.
    """

    run_id: str
    run_name: str
    experiment_id: str
    status: str
    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)

    def value(self, key: str) -> Any:
        """``params.x`` / ``metrics.x`` / ``tags.x`` / ``attributes.run_name``; ``None`` if absent.

        A key without a prefix is looked up in metrics, then params, then tags.
        """
        prefix, _, rest = key.partition(".")
        if prefix == "params" and rest:
            return self.params.get(rest)
        if prefix == "metrics" and rest:
            return self.metrics.get(rest)
        if prefix == "tags" and rest:
            return self.tags.get(rest)
        if prefix == "attributes" and rest:
            return {"run_name": self.run_name, "run_id": self.run_id, "status": self.status}.get(
                rest
            )
        for source in (self.metrics, self.params, self.tags):
            if key in source:
                return source[key]
        return None


def _record(run: Run) -> RunRecord:
    return RunRecord(
        run_id=run.info.run_id,
        run_name=run.info.run_name or "",
        experiment_id=str(run.info.experiment_id),
        status=str(run.info.status),
        params=dict(run.data.params),
        metrics={k: float(v) for k, v in run.data.metrics.items()},
        tags=dict(run.data.tags),
    )


def _search_all(client: MlflowClient, experiment_ids: list[str], filter_string: str) -> list[Run]:
    runs: list[Run] = []
    token: str | None = None
    while True:
        page = client.search_runs(
            experiment_ids,
            filter_string=filter_string,
            order_by=["attributes.start_time ASC"],
            max_results=1000,
            page_token=token,
        )
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def experiment_id_of(store: TrackingStore, name: str) -> str | None:
    """The id of the live experiment ``name``, or ``None`` when there is none."""
    exp = store.client.get_experiment_by_name(name)
    if exp is None or exp.lifecycle_stage == "deleted":
        return None
    return str(exp.experiment_id)


def experiment_name_of(store: TrackingStore, experiment_id: str) -> str:
    """The name of experiment ``experiment_id``."""
    return str(store.client.get_experiment(experiment_id).name)


def get_run(store: TrackingStore, run_id: str) -> RunRecord:
    """One run by id; ``LookupError`` naming the store when it does not exist."""
    try:
        return _record(store.client.get_run(run_id))
    except Exception as err:  # MlflowException for an unknown id
        raise LookupError(
            f"MLflow run {run_id!r} not found in {store.tracking_uri} ({type(err).__name__}: {err})"
        ) from err


def select_runs(
    store: TrackingStore,
    *,
    experiment: str | None = None,
    parent_run_id: str | None = None,
    run_ids: Sequence[str] = (),
    filter_string: str | None = None,
    statuses: Sequence[str] = ("FINISHED",),
) -> list[RunRecord]:
    """Runs chosen by experiment name, by sweep parent (its children), or by explicit ids.

    Explicit ``run_ids`` are returned as given (in that order, whatever their status or role).
    Otherwise the runs of ``experiment`` (or the children of ``parent_run_id``) are searched,
    oldest first, keeping those whose status is in ``statuses`` and dropping summary runs
    (sweep parents, compare and report runs). ``filter_string`` is an extra MLflow search filter
    (e.g. ``params.`dataset.name` = 'Cora'``).

    Raises:
        ValueError: when nothing, or more than one kind of selection, is given.
        LookupError: for an unknown experiment, parent or run id.
    """
    chosen = [bool(experiment), bool(parent_run_id), bool(run_ids)]
    if sum(chosen) != 1:
        raise ValueError(
            "select runs with exactly one of experiment=<name>, parent_run_id=<id> or "
            f"run_ids=[...]; got experiment={experiment!r}, parent_run_id={parent_run_id!r}, "
            f"run_ids={list(run_ids)!r}"
        )
    if run_ids:
        return [get_run(store, str(r)) for r in run_ids]
    client = store.client
    filters = [filter_string] if filter_string else []
    if parent_run_id:
        parent = get_run(store, parent_run_id)
        experiment_ids = [parent.experiment_id]
        filters.insert(0, f"tags.mlflow.parentRunId = '{parent_run_id}'")
    else:
        assert experiment is not None
        exp_id = experiment_id_of(store, experiment)
        if exp_id is None:
            names = sorted(e.name for e in client.search_experiments())
            raise LookupError(
                f"MLflow experiment {experiment!r} not found in {store.tracking_uri}; "
                f"experiments there: {names}"
            )
        experiment_ids = [exp_id]
    runs = [_record(r) for r in _search_all(client, experiment_ids, " and ".join(filters))]
    runs = [r for r in runs if r.tags.get(ROLE_TAG) not in SUMMARY_ROLES]
    kept = [r for r in runs if r.status in statuses]
    skipped = len(runs) - len(kept)
    if skipped:
        log.warning("skipped %d run(s) whose status is not in %s", skipped, list(statuses))
    return kept


def artifact_names(store: TrackingStore, run: RunRecord) -> list[str]:
    """The paths of the run's top-level artifacts."""
    return [a.path for a in store.client.list_artifacts(run.run_id)]


def download_artifact(store: TrackingStore, run: RunRecord, name: str, dest: str | Path) -> Path:
    """Download artifact ``name`` of ``run`` into ``dest/<run id>/``; returns the local path."""
    folder = Path(dest) / run.run_id
    folder.mkdir(parents=True, exist_ok=True)
    return Path(store.client.download_artifacts(run.run_id, name, str(folder)))


def stored_config(store: TrackingStore, run: RunRecord, dest: str | Path) -> DictConfig:
    """The resolved config a graphssl run logged (its ``config.yaml`` artifact).

    Raises:
        FileNotFoundError: the run has no ``config.yaml`` (not a graphssl training run).
    """
    names = artifact_names(store, run)
    if CONFIG_ARTIFACT not in names:
        raise FileNotFoundError(
            f"run {run.run_name or '?'!r} ({run.run_id}) has no {CONFIG_ARTIFACT} artifact (it "
            f"has {sorted(names)}); expected a run logged by graphssl's train task"
        )
    cfg = OmegaConf.load(download_artifact(store, run, CONFIG_ARTIFACT, dest))
    if not isinstance(cfg, DictConfig):
        raise ValueError(f"run {run.run_id}: {CONFIG_ARTIFACT} is not a mapping")
    return cfg


def log_folder(
    store: TrackingStore, run_id: str, folder: str | Path, artifact_path: str | None
) -> None:
    """Log every file of ``folder`` to an existing run (e.g. a sweep parent)."""
    with mlflow_store.interrupt_deferred():
        store.client.log_artifacts(run_id, str(folder), artifact_path)


def log_metrics_to(store: TrackingStore, run_id: str, metrics: dict[str, float]) -> None:
    """Log ``metrics`` (step 0) to an existing run."""
    mlflow_store.log_metrics(store.client, run_id, ((k, v, 0) for k, v in metrics.items()))


def set_tags_on(store: TrackingStore, run_id: str, tags: dict[str, str]) -> None:
    """Set ``tags`` on an existing run."""
    mlflow_store.set_tags(store.client, run_id, tags)


def set_parent(store: TrackingStore, run_id: str, parent_run_id: str) -> None:
    """Make ``run_id`` a child of ``parent_run_id`` (where the MLflow UI nests it)."""
    set_tags_on(store, run_id, {"mlflow.parentRunId": parent_run_id})


def log_text_to(store: TrackingStore, run_id: str, text: str, artifact_file: str) -> None:
    """Log ``text`` as the artifact ``artifact_file`` of an existing run."""
    with mlflow_store.interrupt_deferred():
        store.client.log_text(run_id, text, artifact_file)


def log_figure_to(store: TrackingStore, run_id: str, figure: Any, artifact_file: str) -> None:
    """Log a Matplotlib ``figure`` as the artifact ``artifact_file`` of an existing run."""
    with mlflow_store.interrupt_deferred():
        store.client.log_figure(run_id, figure, artifact_file)
