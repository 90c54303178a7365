"""One MLflow store for one task: its URI, experiment and the one client every call shares.

A task builds a :class:`TrackingStore` once from its config (:meth:`TrackingStore.from_config`)
and hands it to everything that reads or writes runs (runs, artifacts, embeddings, resume), so
the client — whose first use on a SQLite store migrates the schema under a file lock — is
created once per task instead of once per call.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from omegaconf import DictConfig

from graphssl.tracking import mlflow_store
from graphssl.tracking.context import tracking_settings

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

    from graphssl.tracking.run import RunTracker

__all__ = ["TrackingStore"]


class TrackingStore:
    """An MLflow store and its client.

    Args:
        tracking_uri: MLflow tracking URI.
        experiment_name: the experiment new runs go to (created on first use).
        artifact_location: artifact root of a newly created experiment (``None``: the
            server's default).
        client: an existing client on ``tracking_uri`` (default: a new one).
    """

    def __init__(
        self,
        tracking_uri: str,
        experiment_name: str,
        artifact_location: str | None = None,
        client: MlflowClient | None = None,
    ) -> None:
        self.tracking_uri = tracking_uri
        self.experiment_name = experiment_name
        self.artifact_location = artifact_location
        self.client: MlflowClient = client or mlflow_store.client(tracking_uri)
        self._experiment_ids: dict[str, str] = {}

    @classmethod
    def from_config(cls, cfg: DictConfig) -> TrackingStore:
        """The store of a composed config (``logger.*`` and ``paths.outputs_dir``)."""
        settings = tracking_settings(cfg)
        return cls(
            settings["tracking_uri"], settings["experiment_name"], settings["artifact_location"]
        )

    def experiment_id(self, name: str | None = None) -> str:
        """The id of experiment ``name`` (default: :attr:`experiment_name`), created if needed."""
        name = name or self.experiment_name
        if name not in self._experiment_ids:
            self._experiment_ids[name] = mlflow_store.ensure_experiment(
                self.client, name, self.artifact_location
            )
        return self._experiment_ids[name]

    def check_artifact_root(self) -> None:
        """Refuse a local artifact folder the process cannot write, before a run is created.

        A read-only ``mlartifacts/`` beside a writable database is no store outage to wait for:
        every artifact of the run would fail after training.

        Raises:
            PermissionError: the experiment's local artifact folder (or the folder it would be
                created in) is not writable.
        """
        location = self.client.get_experiment(self.experiment_id()).artifact_location or ""
        if location.startswith("file://"):
            folder = Path(unquote(urlparse(location).path))
        elif "://" not in location and location:
            folder = Path(location)
        else:
            return  # a server's or an object store's artifacts: its own permissions
        existing = folder
        while not existing.exists() and existing.parent != existing:
            existing = existing.parent
        if not os.access(existing, os.W_OK | os.X_OK):
            raise PermissionError(
                f"the artifact folder {folder} of experiment {self.experiment_name!r} is not "
                f"writable ({existing} is read-only); expected a writable folder for the run's "
                f"config, model and figures — make it writable, or log to another outputs folder "
                f"(paths.outputs_dir=...) or store (logger.tracking_uri=...)"
            )

    def start_run(
        self,
        run_name: str | None = None,
        *,
        experiment_name: str | None = None,
        parent_run_id: str | None = None,
        tags: Mapping[str, str] | None = None,
        run_id: str | None = None,
        wait_s: float = 0.0,
        role: tuple[str, str] | None = None,
    ) -> RunTracker:
        """A :class:`~graphssl.tracking.run.RunTracker` on this store's client (enter it);
        creating and closing the run retry an unreachable store for ``wait_s`` seconds.

        ``role`` (``("compare", "graphssl-compare")``: the run's ``graphssl.role`` and the
        command that owns it) tags the run with its role and owning process, and first marks
        ``KILLED`` the runs of that role in the experiment whose process on this host is gone
        (:func:`~graphssl.tracking.stale.mark_stale_role_killed`): a command killed with SIGKILL
        leaves its run ``RUNNING`` until its next start.
        """
        from graphssl.tracking.run import RunTracker
        from graphssl.tracking.stale import ROLE_TAG, mark_stale_role_killed, owner_tags

        if role is not None:
            tags = {**(tags or {}), ROLE_TAG: role[0], **owner_tags()}
        name = experiment_name or self.experiment_name
        tracker = RunTracker(
            self.tracking_uri,
            name,
            run_name=run_name,
            parent_run_id=parent_run_id,
            tags=tags,
            artifact_location=self.artifact_location,
            run_id=run_id,
            client=self.client,
            experiment_id=self.experiment_id() if name == self.experiment_name else None,
        )
        tracker.wait_s = wait_s
        if role is not None:
            mark_stale_role_killed(self.client, tracker.experiment_id, *role)
        return tracker

    def __repr__(self) -> str:
        return f"TrackingStore({self.tracking_uri!r}, experiment {self.experiment_name!r})"
