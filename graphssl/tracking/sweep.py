"""Hydra callback that makes a multirun one MLflow parent run with one child run per job.

The launching process creates the store, the experiment and the parent run before any job
starts (several jobs migrating a fresh SQLite store at once crash), then writes
the parent's id into the sweep folder where every job — in this process or another — reads it.
"""

from __future__ import annotations

import atexit
import json
import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from graphssl.tracking import mlflow_store
from graphssl.tracking.stale import is_stale, mark_killed
from graphssl.tracking.summary import child_label, parse_overrides, summarise_parent, swept_keys

log = logging.getLogger(__name__)

PARENT_FILE = "mlflow_parent_run.json"


def read_parent(sweep_dir: str | Path) -> dict[str, Any] | None:
    """The parent-run record a multirun left in ``sweep_dir``, or ``None``."""
    path = Path(sweep_dir) / PARENT_FILE
    if not path.is_file():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def job_run_name(name: str, job_overrides: list[str], parent: dict[str, Any] | None) -> str:
    """``dgi-Cora[trainer.epochs=50]``: a sweep job's name with its swept values.

    Outside a sweep, or when the parent record names no swept keys, ``name`` is returned.
    """
    keys = (parent or {}).get("swept") or []
    if not keys:
        return name
    label = child_label(parse_overrides(" ".join(job_overrides)), keys)
    return f"{name}[{label}]" if label else name


def close_parent(
    tracking_uri: str, run_id: str, summary: dict[str, Any] | None = None
) -> dict[str, int]:
    """Count the parent's children by status, tag the parent with the counts and end it.

    The parent ends ``FINISHED`` when every child finished and ``FAILED`` otherwise; the tags
    ``children_total``, ``children_finished`` and ``children_failed`` say why. A child still
    ``RUNNING`` whose process on this host is gone (a worker killed mid-job) is marked
    ``KILLED`` first. With ``summary`` (``optimized_metric``, ``direction``, ``swept``,
    ``sweep_dir``) the parent also gets its best child, ``children.csv`` and a figure
    (:func:`graphssl.tracking.summary.summarise_parent`).
    """
    client = mlflow_store.client(tracking_uri)
    parent = client.get_run(run_id)
    if parent.info.status != "RUNNING":
        return {}
    children = client.search_runs(
        [parent.info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{run_id}'",
        max_results=50000,
    )
    counts = {"children_total": len(children), "children_finished": 0, "children_failed": 0}
    for child in children:
        if is_stale(child):  # its process died without closing it (a killed worker)
            mark_killed(
                client,
                child,
                "the job's process ended without closing the run (killed worker?); marked "
                "KILLED when the sweep ended",
            )
            log.warning("sweep child %s: its process is gone; marked KILLED", child.info.run_id)
        if child.info.status == "FINISHED":
            counts["children_finished"] += 1
        else:
            counts["children_failed"] += 1
    for k, v in counts.items():
        client.set_tag(run_id, k, str(v))
    if summary is not None:
        try:
            summarise_parent(
                client,
                run_id,
                children,
                optimized_metric=summary.get("optimized_metric"),
                direction=str(summary.get("direction") or "maximize"),
                keys=list(summary.get("swept") or []),
                sweep_dir=summary.get("sweep_dir"),
            )
        except Exception as err:  # a summary must never leave the parent RUNNING
            log.warning("sweep parent %s: could not write the summary: %s", run_id, err)
    ok = counts["children_failed"] == 0 and counts["children_total"] > 0
    client.set_terminated(run_id, "FINISHED" if ok else "FAILED")
    return counts


class MLflowSweepCallback(Callback):
    """Parent/child MLflow runs for Hydra multiruns (registered in ``conf/hydra/default.yaml``)."""

    def __init__(self) -> None:
        self._parent: dict[str, Any] | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from graphssl.tracking.context import tracking_settings
        from graphssl.tracking.launchers import install

        install()  # a dead joblib/submitit worker then fails only its own job

        settings = tracking_settings(config)
        client = mlflow_store.client(settings["tracking_uri"])
        experiment_id = mlflow_store.ensure_experiment(
            client, settings["experiment_name"], settings["artifact_location"]
        )
        sweep_dir = Path(str(config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        overrides = list(config.hydra.overrides.task)
        sweeper = config.hydra.get("sweeper") or {}
        direction = sweeper.get("direction", "maximize")
        if not isinstance(direction, str):  # Optuna's multi-objective list
            direction = "maximize"
        swept = swept_keys(overrides, list((sweeper.get("params") or {}).keys()))
        run = client.create_run(
            experiment_id,
            run_name=f"sweep-{sweep_dir.name}",
            tags=_job_masker(config).mapping(  # secrets in the overrides are masked
                {
                    "graphssl.role": "sweep",
                    "graphssl.overrides": " ".join(overrides),
                    "graphssl.sweep_dir": str(sweep_dir.absolute()),
                }
            ),
        )
        self._parent = {
            "run_id": run.info.run_id,
            "experiment_id": experiment_id,
            "tracking_uri": settings["tracking_uri"],
            "swept": swept,
            "optimized_metric": config.get("optimized_metric"),
            "direction": str(direction),
            "sweep_dir": str(sweep_dir.absolute()),
        }
        (sweep_dir / PARENT_FILE).write_text(json.dumps(self._parent))
        log.info("MLflow sweep parent run %s", run.info.run_id)
        # If the sweep dies (a failed job makes Hydra raise after the batch), the parent must
        # not stay RUNNING: close it at interpreter exit with the child counts.
        atexit.register(self._close)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._close()

    def _close(self) -> None:
        if self._parent is None:
            return
        parent, self._parent = self._parent, None
        counts = close_parent(parent["tracking_uri"], parent["run_id"], summary=parent)
        if counts:
            log.info("sweep parent %s: %s", parent["run_id"], counts)


class SaveJobConfig(Callback):
    """Pickle each job's config into ``<run dir>/.hydra/config.pickle``, which Hydra's
    ``--experimental-rerun`` reads; like Hydra's ``PickleJobInfoCallback`` but quiet (a DEBUG
    line, not an INFO line per job) and without the return value.

    Secrets are masked first: the ``.hydra/*.yaml`` files Hydra has just written (and a sweep's
    ``multirun.yaml``) are rewritten masked, and when they held a secret the pickle is built from
    the masked files (:func:`graphssl.tracking.secrets.mask_hydra_dir`), so no secret is left in
    the run folder.
    """

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        import pickle

        from hydra.types import RunMode

        from graphssl.tracking.secrets import (
            HYDRA_PICKLE,
            mask_hydra_dir,
            mask_yaml_file,
            write_config_pickle,
        )

        masker = _job_masker(config)
        if config.hydra.mode == RunMode.MULTIRUN:  # the sweep's own copy of the overrides
            sweep_file = Path(str(config.hydra.sweep.dir)) / "multirun.yaml"
            if sweep_file.is_file():
                mask_yaml_file(sweep_file, masker)
        subdir = config.hydra.output_subdir
        if subdir is None:
            return
        folder = Path(str(config.hydra.runtime.output_dir)) / str(subdir)
        folder.mkdir(parents=True, exist_ok=True)
        if mask_hydra_dir(folder, masker):
            write_config_pickle(folder)
        else:
            with open(folder / HYDRA_PICKLE, "wb") as f:
                pickle.dump(config, f, protocol=4)
        log.debug("job config saved in %s", folder / HYDRA_PICKLE)


def _job_masker(config: DictConfig) -> Any:
    """The run's :class:`~graphssl.tracking.secrets.Masker` (its ``logger.secret_patterns`` and
    secret values), from the job config without its ``hydra`` node."""
    from omegaconf import OmegaConf

    from graphssl.tracking.secrets import Masker

    task = OmegaConf.masked_copy(config, [str(k) for k in config if k != "hydra"])
    try:
        return Masker.from_config(task)
    except Exception:  # an interpolation that fails here fails the task itself, with its message
        return Masker.from_config(OmegaConf.to_container(task, resolve=False))
