"""Hydra callback that makes a multirun one MLflow parent run with one child run per job.

The launching process creates the store, the experiment and the parent run before any job
starts (several jobs migrating a fresh SQLite store at once crash), then writes
the parent's id into the sweep folder where every job — in this process or another — reads it.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import signal
import socket
import threading
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from graphssl.tracking import mlflow_store
from graphssl.tracking.stale import HOST_TAG, PID_TAG, is_stale, mark_killed, owner_tags
from graphssl.tracking.summary import (
    best_lines,
    child_label,
    parse_overrides,
    summarise_parent,
    swept_keys,
)

log = logging.getLogger(__name__)

PARENT_FILE = "mlflow_parent_run.json"


def read_parent(sweep_dir: str | Path) -> dict[str, Any] | None:
    """The parent-run record a multirun left in ``sweep_dir``, or ``None``."""
    path = Path(sweep_dir) / PARENT_FILE
    if not path.is_file():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def job_run_name(
    name: str, job_overrides: list[str], parent: dict[str, Any] | None, masker: Any = None
) -> str:
    """``dgi-Cora[trainer.epochs=50]``: a sweep job's name with its swept values.

    Outside a sweep, or when the parent record names no swept keys, ``name`` is returned.
    With ``masker`` (the run's :class:`~graphssl.tracking.secrets.Masker`) a swept value is
    masked as the run's params are (``+db.password=a,b`` names the child
    ``dgi-Cora[db.password=***]``): the run name is shown in every MLflow listing.
    """
    keys = (parent or {}).get("swept") or []
    if not keys:
        return name
    values = parse_overrides(" ".join(job_overrides))
    if masker is not None:
        values = {k: str(masker.value(k, v)) for k, v in values.items()}
    label = child_label(values, keys)
    return f"{name}[{label}]" if label else name


def close_parent(
    tracking_uri: str,
    run_id: str,
    summary: dict[str, Any] | None = None,
    interrupted: str | None = None,
    killed: list[str] | None = None,
    tags: dict[str, str] | None = None,
    results: dict[str, Any] | None = None,
) -> dict[str, int]:
    """Count the parent's children by status, tag the parent with the counts and end it.

    The parent ends ``FINISHED`` when every child finished and ``FAILED`` otherwise; the tags
    ``children_total``, ``children_finished`` and ``children_failed`` say why. A child still
    ``RUNNING`` whose process on this host is gone (a worker killed mid-job) is marked
    ``KILLED`` first. With ``summary`` (``optimized_metric``, ``direction``, ``swept``,
    ``sweep_dir``, ``best_by``) the parent also gets its best child per group, ``children.csv``
    and a figure (:func:`graphssl.tracking.summary.summarise_parent`), and ``results``, when
    given, is updated with what that logged.

    With ``interrupted`` (why: ``"SIGTERM received"``, a rerun finding it left behind) the sweep
    was stopped: children still ``RUNNING`` in this process or in one that is gone are marked
    ``KILLED``, the tag ``children_killed`` counts them and the parent ends ``KILLED``. The ids
    of the children that ended ``KILLED`` are appended to ``killed``; ``tags`` are set on the
    parent as well.
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
    if interrupted:
        counts["children_killed"] = 0
    for child in children:
        status = child.info.status
        if is_stale(child):  # its process died without closing it (a killed worker)
            mark_killed(
                client,
                child,
                f"the job's process ended without closing the run; marked KILLED when the "
                f"sweep was stopped ({interrupted})"
                if interrupted
                else "the job's process ended without closing the run (killed worker?); marked "
                "KILLED when the sweep ended",
            )
            status = "KILLED"
            if not interrupted:
                log.warning("sweep child %s: its process is gone; marked KILLED", child.info.run_id)
        elif interrupted and status == "RUNNING" and _owned_here(child):
            # this process ran the job and is stopping: the run cannot be closed by anyone else
            mark_killed(client, child, f"the sweep was stopped ({interrupted})")
            status = "KILLED"
        if status == "FINISHED":
            counts["children_finished"] += 1
        else:
            counts["children_failed"] += 1
        if interrupted and status == "KILLED":
            counts["children_killed"] += 1
            if killed is not None:
                killed.append(child.info.run_id)
    final: dict[str, Any] = {**counts, **(tags or {})}
    if interrupted:
        final["error"] = f"the sweep was stopped: {interrupted}"
    mlflow_store.set_tags(client, run_id, final)
    if summary is not None:
        try:
            logged = summarise_parent(
                client,
                run_id,
                children,
                optimized_metric=summary.get("optimized_metric"),
                direction=str(summary.get("direction") or "maximize"),
                keys=list(summary.get("swept") or []),
                sweep_dir=summary.get("sweep_dir"),
                best_by=list(summary.get("best_by") or []),
            )
            if results is not None:
                results.update(logged)
        except Exception as err:  # a summary must never leave the parent RUNNING
            log.warning("sweep parent %s: could not write the summary: %s", run_id, err)
    ok = counts["children_failed"] == 0 and counts["children_total"] > 0
    client.set_terminated(run_id, "KILLED" if interrupted else "FINISHED" if ok else "FAILED")
    return counts


def _owned_here(run: Any) -> bool:
    tags = run.data.tags
    return bool(
        tags.get(HOST_TAG) == socket.gethostname() and tags.get(PID_TAG) == str(os.getpid())
    )


def close_stale_parents(client: Any, tracking_uri: str, experiment_id: str) -> list[str]:
    """Mark ``KILLED`` the sweep parents of ``experiment_id`` left ``RUNNING`` by a launching
    process on this host that is gone (a sweep whose launcher was killed with SIGKILL), with
    their children's counts; returns their ids."""
    parents = client.search_runs(
        [experiment_id],
        filter_string="tags.`graphssl.role` = 'sweep' and attributes.status = 'RUNNING'",
        max_results=1000,
    )
    closed = []
    for parent in parents:
        if not is_stale(parent):
            continue
        close_parent(
            tracking_uri,
            parent.info.run_id,
            interrupted="its launching process ended without closing it (killed?); marked "
            "KILLED by the next sweep",
        )
        log.warning(
            "sweep parent %s: its launching process is gone; marked KILLED", parent.info.run_id
        )
        closed.append(parent.info.run_id)
    return closed


#: the sweep whose parent run this process opened (closed as KILLED when the sweep is stopped)
_ACTIVE: list[MLflowSweepCallback] = []


def stop_active_sweep(why: str, tags: dict[str, str] | None = None) -> str | None:
    """The sweep launched by this process was stopped (Ctrl-C, SIGTERM): end its parent run
    ``KILLED`` with the counts of what ran, and its unfinished children ``KILLED``.

    Returns what was marked, for the one line on the terminal (``runs a, b marked KILLED;
    sweep parent p marked KILLED (2 jobs started, 0 finished)``); ``None`` when no sweep is
    open in this process."""
    if not _ACTIVE:
        return None
    return _ACTIVE[-1].stop(why, tags)


def set_active_sweep_tags(tags: dict[str, str]) -> None:
    """Tags for the parent of the sweep open in this process, set when it is stopped (a
    launcher's count of the jobs it never started)."""
    if _ACTIVE:
        _ACTIVE[-1].stop_tags.update(tags)


def apply_sweep_limits(config: DictConfig) -> list[str]:
    """Shorten a multirun by ``debug_limits.sweep`` (set by ``debug=fast``), in place.

    Hydra calls ``on_multirun_start`` before it instantiates the sweeper from ``config``, so
    the sweeper sees the limits: its ``n_trials`` (Optuna's) is capped at
    ``debug_limits.sweep.n_trials``, and each key of ``debug_limits.sweep.keep`` is taken out of
    its search space (``hydra.sweeper.params``), so every job gets the composed value (1 epoch
    under ``debug=fast``, or the user's explicit override) instead of a searched one.

    Returns:
        What was changed, one ``"<key>: <before> -> <after>"`` per change (empty when nothing).
    """
    limits = (config.get("debug_limits") or {}).get("sweep") or {}
    sweeper = config.hydra.get("sweeper") if "hydra" in config else None
    if not limits or sweeper is None:
        return []
    changed: list[str] = []
    with read_write(config.hydra), open_dict(config.hydra):
        cap = limits.get("n_trials")
        if cap is not None and sweeper.get("n_trials") is not None and sweeper.n_trials > cap:
            changed.append(f"hydra.sweeper.n_trials: {sweeper.n_trials} -> {cap}")
            sweeper.n_trials = int(cap)
        params = sweeper.get("params")
        for key in limits.get("keep") or []:
            if params is not None and key in params:
                changed.append(f"{key}: {params[key]} -> {OmegaConf.select(config, key)}")
                params.pop(key)
    return changed


def sweep_description(
    overrides: list[str],
    swept: list[str],
    metric: str | None,
    direction: str,
    best_by: list[str],
) -> str:
    """The parent run's description (``mlflow.note.content``, the UI's "Description")."""
    text = (
        f"Sweep `graphssl -m {' '.join(overrides)}`: one child run per job, named by its swept "
        f"values ({', '.join(swept) or 'none'})."
    )
    if metric:
        per = f" per {', '.join(best_by)}" if best_by else ""
        text += f" Best child by {metric} ({direction}){per} (config key sweep_best_by)."
    return text


def sweep_params(config: DictConfig, overrides: list[str], best_by: list[str]) -> dict[str, Any]:
    """The parent run's params: each command-line override as given (a swept key holds its
    values, ``model=dgi,grace`` → ``model: dgi,grace``), the sweeper's search space
    (``hydra.sweeper.params``), and the sweep's settings under ``sweep.``."""
    params: dict[str, Any] = {}
    for key, value in parse_overrides(" ".join(overrides)).items():
        params[key] = value
    sweeper = config.hydra.get("sweeper") or {}
    for key, value in (sweeper.get("params") or {}).items():
        params.setdefault(str(key), value)
    params["sweep.optimized_metric"] = config.get("optimized_metric")
    params["sweep.best_by"] = ",".join(best_by)
    params["sweep.sweeper"] = str(sweeper.get("_target_", "")).rsplit(".", 1)[-1]
    launcher = config.hydra.get("launcher") or {}
    params["sweep.launcher"] = str(launcher.get("_target_", "")).rsplit(".", 1)[-1]
    for key in ("n_trials", "direction"):
        if sweeper.get(key) is not None:
            params[f"sweep.{key}"] = sweeper.get(key)
    return params


class MLflowSweepCallback(Callback):
    """Parent/child MLflow runs for Hydra multiruns (registered in ``conf/hydra/default.yaml``)."""

    def __init__(self) -> None:
        self._parent: dict[str, Any] | None = None
        self._sigterm: Any = None
        self.stop_tags: dict[str, str] = {}

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from graphssl.tracking.context import tracking_settings
        from graphssl.tracking.launchers import install

        # a dead joblib/submitit worker then fails only its own job; a stopped joblib launch
        # reports the jobs it never started to this sweep's parent
        install(report_stop=set_active_sweep_tags)
        for change in apply_sweep_limits(config):
            log.info("debug: sweep limited, %s", change)

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
        best_by = [str(k) for k in (config.get("sweep_best_by") or [])]
        metric = config.get("optimized_metric")
        close_stale_parents(client, settings["tracking_uri"], experiment_id)
        masker = _job_masker(config)  # secrets in the overrides are masked
        run = client.create_run(
            experiment_id,
            run_name=f"sweep-{sweep_dir.name}",
            tags=masker.mapping(
                {
                    "graphssl.role": "sweep",
                    "graphssl.overrides": " ".join(overrides),
                    "graphssl.sweep_dir": str(sweep_dir.absolute()),
                    "mlflow.note.content": sweep_description(
                        overrides, swept, metric, str(direction), best_by
                    ),
                    **owner_tags(),  # a later sweep marks it KILLED if this process is killed
                }
            ),
        )
        mlflow_store.log_params(
            client, run.info.run_id, masker.mapping(sweep_params(config, overrides, best_by))
        )
        self._parent = {
            "run_id": run.info.run_id,
            "experiment_id": experiment_id,
            "tracking_uri": settings["tracking_uri"],
            "swept": swept,
            "optimized_metric": metric,
            "direction": str(direction),
            "sweep_dir": str(sweep_dir.absolute()),
            "best_by": best_by,
        }
        (sweep_dir / PARENT_FILE).write_text(json.dumps(self._parent))
        log.info("MLflow sweep parent run %s", run.info.run_id)
        # If the sweep dies (a failed job makes Hydra raise after the batch), the parent must
        # not stay RUNNING: close it at interpreter exit with the child counts.
        atexit.register(self._close)
        _ACTIVE.append(self)
        # SIGTERM to the launching process is handled like Ctrl-C: a KeyboardInterrupt that
        # ends the jobs it runs and its workers (graphssl.tracking.launchers), then the parent
        # is closed KILLED (stop_active_sweep); a job's own handler takes over while it trains
        if threading.current_thread() is threading.main_thread():
            self._sigterm = signal.signal(signal.SIGTERM, _sigterm_interrupts)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._close()

    def _release(self) -> None:
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        previous, self._sigterm = self._sigterm, None
        if previous is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, previous)

    def _close(self) -> None:
        self._release()
        if self._parent is None:
            return
        parent, self._parent = self._parent, None
        results: dict[str, Any] = {}
        counts = close_parent(
            parent["tracking_uri"], parent["run_id"], summary=parent, results=results
        )
        if counts:
            log.info("sweep parent %s: %s", parent["run_id"], counts)
            metric = parent.get("optimized_metric")
            if metric and "best" in results:
                lines = best_lines(
                    results["best"], metric, parent["direction"], parent.get("best_by") or []
                )
                # the terminal's last word on a sweep: which child to look at
                print(
                    f"sweep {parent['run_id']}: {counts['children_finished']} of "
                    f"{counts['children_total']} children finished; " + "\n".join(lines),
                    flush=True,
                )

    def stop(self, why: str, tags: dict[str, str] | None = None) -> str | None:
        """End the parent ``KILLED`` (see :func:`stop_active_sweep`)."""
        self._release()
        if self._parent is None:
            return None
        parent, self._parent = self._parent, None
        killed: list[str] = []
        counts = close_parent(
            parent["tracking_uri"],
            parent["run_id"],
            summary=parent,
            interrupted=why,
            killed=killed,
            tags={**self.stop_tags, **(tags or {})},
        )
        log.debug("sweep parent %s stopped: %s", parent["run_id"], counts)
        runs = ""
        if killed:
            runs = f"run{'s' if len(killed) > 1 else ''} {', '.join(killed)} marked KILLED; "
        started = counts.get("children_total", 0)
        not_started = self.stop_tags.get("jobs_not_started")
        return (
            f"{runs}sweep parent {parent['run_id']} marked KILLED ({started} job"
            f"{'s' if started != 1 else ''} started, {counts.get('children_finished', 0)} "
            f"finished"
            + (f", {not_started} never started" if not_started not in (None, "0") else "")
            + ")"
        )


def _sigterm_interrupts(signum: int, frame: Any) -> None:
    from graphssl.training.trainer import TrainingInterrupted

    raise TrainingInterrupted("SIGTERM received")


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
            # pickled in memory first: a config that cannot be pickled never leaves an empty file
            (folder / HYDRA_PICKLE).write_bytes(config_pickle(config))
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


def config_pickle(config: DictConfig) -> bytes:
    """``config`` pickled as Hydra's ``--experimental-rerun`` reads it.

    In a worker process of the joblib launcher the config's launcher node is typed by a
    structured-config class that Hydra's plugin loader imported a second time, so pickle
    cannot find it by name (``PicklingError: ... it's not the same object as ...``). The
    ``hydra`` node is stored resolved (``--experimental-rerun`` has no ``${now:...}``
    resolver, and a sweep job's task reads ``hydra.sweep.dir``). Each node
    of ``hydra`` that cannot be pickled is replaced by the same values without the
    structured-config type; the ``hydra`` node itself stays a ``HydraConf``, which the rerun
    requires.
    """
    import copy
    import pickle

    from omegaconf import OmegaConf, read_write

    config = copy.deepcopy(config)
    # the rerun registers no ``now`` resolver: the job's folders are stored as they resolved
    with contextlib.suppress(Exception), read_write(config.hydra):
        OmegaConf.resolve(config.hydra)
    try:
        return pickle.dumps(config, protocol=4)
    except (pickle.PicklingError, TypeError, AttributeError):
        pass
    _untype_unimportable(config.hydra)
    return pickle.dumps(config, protocol=4)


def _untype_unimportable(node: DictConfig) -> None:
    """Replace the child nodes of ``node`` typed by a class that pickle cannot find by name
    (another class object stands under its module and name) by their plain values."""
    import sys

    from omegaconf import OmegaConf, open_dict, read_write

    for key in list(node.keys()):
        child = node._get_node(key)
        if not isinstance(child, DictConfig) or child._is_none() or child._is_missing():
            continue
        cls = OmegaConf.get_type(child)
        found: Any = sys.modules.get(getattr(cls, "__module__", ""), None)
        for part in getattr(cls, "__qualname__", "").split("."):
            found = getattr(found, part, None)
        if cls is not None and cls is not dict and found is not cls:
            plain = OmegaConf.create(OmegaConf.to_container(child, resolve=False))
            with read_write(node), open_dict(node):  # Hydra marks its node read-only
                node[key] = plain
            OmegaConf.set_readonly(node[key], OmegaConf.is_readonly(child))
        else:
            _untype_unimportable(child)
