"""Run identity and the resume policy: which stored run a configuration continues, if any.

A run's identity is the hash of its resolved config (:func:`config_hash`, tag
``graphssl.config_hash``). Starting a configuration closes the stale runs of the same hash
(their process is gone, :mod:`graphssl.tracking.stale`); with ``resume=true`` it continues the
interrupted run from its checkpoint (:func:`checkpoint_path`) into the same MLflow run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from graphssl.tracking.mlflow_store import flatten
from graphssl.tracking.stale import HOST_TAG, PID_TAG, is_stale, mark_stale_killed, runs_of_config
from graphssl.training.checkpoint import CheckpointUnreadable, load_checkpoint

if TYPE_CHECKING:
    from graphssl.tracking.store import TrackingStore

__all__ = [
    "IGNORED_KEYS",
    "IGNORED_NODES",
    "RunBusyError",
    "checkpoint_path",
    "config_hash",
    "resume_target",
    "set_aside",
]

log = logging.getLogger(__name__)

#: keys that do not make a different run: the resume switch and display-only settings
IGNORED_KEYS = frozenset(
    {
        "resume",
        "trainer.progress",
        "logger.run_name",
        "logger.store_wait_s",
        "logger.secret_patterns",
    }
)
#: config nodes whose keys do not make a different run either: the checkpoint callback (how
#: often it writes is ``trainer.checkpoint_every``; checkpoints never change what a run trains)
IGNORED_NODES = ("callbacks.checkpoint",)


class RunBusyError(ValueError):
    """``resume=true`` asked for a run whose process is still alive."""


def _ignored(key: str) -> bool:
    return key in IGNORED_KEYS or any(
        key == node or key.startswith(f"{node}.") for node in IGNORED_NODES
    )


def config_hash(cfg: DictConfig) -> str:
    """A short hash of the resolved config that identifies "the same run" across restarts
    (:data:`IGNORED_KEYS` and the keys of :data:`IGNORED_NODES` excluded)."""
    flat = {
        k: v
        for k, v in flatten(OmegaConf.to_container(cfg, resolve=True)).items()  # type: ignore[arg-type]
        if not _ignored(k)
    }
    return hashlib.sha256(json.dumps(flat, sort_keys=True, default=str).encode()).hexdigest()[:16]


def checkpoint_path(cfg: DictConfig, chash: str) -> Path:
    """Where the run of config hash ``chash`` keeps its last checkpoint."""
    return Path(str(cfg.paths.outputs_dir)).absolute() / "checkpoints" / chash / "last.pt"


def set_aside(path: Path) -> Path:
    """Rename an unreadable file to ``<name>.corrupt-<UTC time>`` beside it, so the next start
    is not blocked by it and it stays there to be looked at; returns the new path."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    dest = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while dest.exists():
        dest = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
        n += 1
    os.replace(path, dest)
    return dest


def resume_target(
    store: TrackingStore, chash: str, ckpt: Path, resume: bool
) -> tuple[str | None, dict[str, Any] | None]:
    """Close stale runs of configuration ``chash``; with ``resume`` return the run id and
    checkpoint ``ckpt`` to continue from (``(None, None)``: start a new run)."""
    client = store.client
    runs = runs_of_config(client, store.experiment_id(), chash)
    state = None
    moved = None
    if resume and ckpt.is_file():
        try:
            state = load_checkpoint(ckpt, chash)
        except CheckpointUnreadable as err:
            moved = set_aside(ckpt)
            log.warning("%s; moved it aside to %s and starting from scratch", err, moved.name)
    run_id = state.get("mlflow_run_id") if state else None
    known = {r.info.run_id: r for r in runs}
    live = known.get(run_id) if run_id is not None else None
    if live is not None and live.info.status == "RUNNING" and not is_stale(live):
        tags = live.data.tags
        raise RunBusyError(
            f"resume=true: run {run_id} of this configuration is still running (process "
            f"{tags.get(PID_TAG, '?')} on {tags.get(HOST_TAG, '?')}) and owns its checkpoint "
            f"{ckpt}; expected one resume at a time — wait for it to end, or stop that process "
            f"(its next start marks the run KILLED) and resume again"
        )
    if run_id is not None and (
        run_id not in known
        or known[run_id].info.status == "FINISHED"
        or not (is_stale(known[run_id]) or known[run_id].info.status in ("KILLED", "FAILED"))
    ):
        log.warning(
            "checkpoint %s belongs to run %s, which cannot be resumed (finished, live "
            "or missing); starting a new run",
            ckpt,
            run_id,
        )
        run_id, state = None, None
    mark_stale_killed(client, runs, keep=run_id)
    if resume and state is None and moved is None:
        log.warning("resume=true but no resumable checkpoint at %s; starting from scratch", ckpt)
    return run_id, state
