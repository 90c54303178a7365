"""Runs left ``RUNNING`` by a killed process: find them, mark them ``KILLED``, or resume one.

Each run is tagged with the host and process id that own it and the hash of its configuration.
A ``RUNNING`` run of the same configuration whose process is gone from this host is stale: the
next start of that configuration marks it ``KILLED`` — or, with ``resume=true``, continues it.
Runs owned by another host are left alone (their process cannot be checked from here).

Runs with no configuration of their own (``graphssl-compare``, ``graphssl-report``,
``graphssl-stability``, ``graphssl-evaluate as_child=true``) carry the same owner tags and
their role (``graphssl.role``); the next start of a command of that role in the same experiment
marks those whose process is gone ``KILLED`` (:func:`mark_stale_role_killed`).
"""

from __future__ import annotations

import logging
import os
import socket
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlflow.entities import Run
    from mlflow.tracking import MlflowClient

log = logging.getLogger(__name__)

HOST_TAG, PID_TAG, HASH_TAG = "graphssl.host", "graphssl.pid", "graphssl.config_hash"
ROLE_TAG = "graphssl.role"


def owner_tags() -> dict[str, str]:
    return {HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid())}


def _alive(pid: int) -> bool:
    # a zombie (ended, not reaped yet by a parent that is itself stopping) is gone too
    from graphssl.processes import running

    return running(pid)


def is_stale(run: Run) -> bool:
    """``True`` for a RUNNING run whose owning process on this host no longer exists."""
    tags = run.data.tags
    if run.info.status != "RUNNING" or tags.get(HOST_TAG) != socket.gethostname():
        return False
    try:
        pid = int(tags.get(PID_TAG, ""))
    except ValueError:
        return False
    return pid != os.getpid() and not _alive(pid)


def runs_of_config(client: MlflowClient, experiment_id: str, config_hash: str) -> list[Run]:
    """Runs of ``experiment_id`` tagged with ``config_hash``, newest first."""
    runs: list[Run] = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`{HASH_TAG}` = '{config_hash}'",
        order_by=["attributes.start_time DESC"],
        max_results=1000,
    )
    return runs


def mark_killed(client: MlflowClient, run: Run, why: str) -> None:
    """End a run whose process is gone ``KILLED``, saying ``why`` in its ``error`` tag.

    What the process journaled but never sent goes to the store first
    (:func:`~graphssl.tracking.buffer.send_journal`); a journal that cannot be read or sent is
    named in the tag instead of blocking the marking.
    """
    from graphssl.tracking.buffer import send_journal

    try:
        sent = send_journal(client, run)
        if sent:
            why += f"; the {sent} metric points it had journaled but not sent were sent"
    except Exception as err:  # the run must not stay RUNNING for a journal
        why += f"; its metric journal could not be sent ({type(err).__name__}: {err})"
        log.warning("run %s: could not send its metric journal: %s", run.info.run_id, err)
    client.set_tag(run.info.run_id, "error", why)
    client.set_terminated(run.info.run_id, "KILLED")


def mark_stale_killed(client: MlflowClient, runs: list[Run], keep: str | None = None) -> int:
    """Mark every stale run in ``runs`` (except ``keep``) as KILLED; returns how many."""
    n = 0
    for run in runs:
        if run.info.run_id != keep and is_stale(run):
            mark_killed(
                client,
                run,
                "process ended without closing the run (killed?); marked KILLED by "
                "the next start of the same configuration",
            )
            log.warning("marked stale run %s as KILLED", run.info.run_id)
            n += 1
    return n


def mark_stale_role_killed(
    client: MlflowClient, experiment_id: str, role: str, command: str
) -> list[str]:
    """Mark ``KILLED`` the ``RUNNING`` runs of ``experiment_id`` tagged ``graphssl.role=role``
    whose process on this host is gone (``command`` killed with SIGKILL, a node lost); returns
    their ids. Called by the next start of ``command``."""
    runs = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`{ROLE_TAG}` = '{role}' and attributes.status = 'RUNNING'",
        max_results=1000,
    )
    closed = []
    for run in runs:
        if not is_stale(run):
            continue
        mark_killed(
            client,
            run,
            f"its {command} process ended without closing the run (killed?); marked KILLED by "
            f"the next {command}",
        )
        log.warning("%s run %s: its process is gone; marked KILLED", command, run.info.run_id)
        closed.append(run.info.run_id)
    return closed
