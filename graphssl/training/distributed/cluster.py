"""A cluster job step: the scheduler starts every rank as one of its tasks (:func:`cluster_ranks`
reads which), rank 0 runs :func:`launch_tasks` and every other rank :func:`join_tasks`."""

from __future__ import annotations

import logging
import os
import re
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from graphssl.training.distributed.group import (
    DEFAULT_TIMEOUT_S,
    HOST,
    READY_KEY,
    RENDEZVOUS_TIMEOUT_S,
    RankFailedError,
    backend_for,
    init_group,
    is_communication_error,
    record_error,
    recorded_error,
    task_device,
    teardown,
    threads_per_rank,
)

__all__ = [
    "PORT_BASE",
    "PORT_SPAN",
    "ClusterRanks",
    "cluster_ranks",
    "first_host",
    "join_tasks",
    "launch_tasks",
    "port_for_job",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: a cluster job's rendezvous port is ``PORT_BASE + job id % PORT_SPAN`` (``MASTER_PORT``
#: overrides it): two jobs sharing a first node get different ports
PORT_BASE, PORT_SPAN = 20000, 20000


@dataclass(frozen=True)
class ClusterRanks:
    """This process's place among the tasks of a job step in which each task is one rank.

    Attributes:
        rank: global rank (``SLURM_PROCID``).
        world: tasks of the step (``SLURM_STEP_NUM_TASKS``, else ``SLURM_NTASKS``).
        local_rank: rank among the step's tasks on this machine (``SLURM_LOCALID``).
        node: this machine's index in the step (``SLURM_NODEID``).
        master_addr: the host rank 0 runs on, where it opens the rendezvous store.
        master_port: the store's port.
        source: the scheduler the values came from (``"SLURM"`` or ``"submitit_local"``).
    """

    rank: int
    world: int
    local_rank: int
    node: int
    master_addr: str
    master_port: int
    source: str

    def describe(self) -> str:
        return (
            f"{self.source} task {self.rank} of {self.world} (node {self.node}, local rank "
            f"{self.local_rank}, rendezvous {self.master_addr}:{self.master_port})"
        )


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list in its compressed form: ``"gpu[07-09,12],cpu3"``
    gives ``"gpu07"``, ``"rack[1-2]-n[01-04]"`` gives ``"rack1-n01"``, ``"localhost"`` itself
    (what ``scontrol show hostnames`` prints first).

    Raises:
        ValueError: for an empty list or unbalanced brackets.
    """
    text = nodelist.strip()
    depth, end = 0, len(text)
    for i, char in enumerate(text):  # the first host ends at the first comma outside brackets
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth < 0:
            break
        if char == "," and depth == 0:
            end = i
            break
    head = text[:end]
    if not head or depth < 0 or head.count("[") != head.count("]"):
        raise ValueError(
            f"could not read the first host of the node list {nodelist!r}; expected SLURM's "
            f"form such as 'node[01-04],gpu7' (set MASTER_ADDR to name rank 0's host)"
        )
    # each bracket holds ranges and single values: the first one's start, zero-padded as given
    host = re.sub(r"\[([^\]]*)\]", lambda m: m.group(1).split(",")[0].split("-")[0], head)
    if "[" in host or "]" in host or not host:
        raise ValueError(f"could not read the first host of the node list {nodelist!r}")
    return host


def port_for_job(job_id: str | int | None) -> int:
    """The rendezvous port of a job: ``PORT_BASE + job id % PORT_SPAN``, the digits of the id
    only (an array task's ``"123_4"`` gives ``1234``); :data:`PORT_BASE` without an id."""
    digits = re.sub(r"\D", "", str(job_id or ""))
    return PORT_BASE + (int(digits) % PORT_SPAN if digits else 0)


def _env_int(env: Mapping[str, str], key: str, default: int | None = None) -> int:
    raw = env.get(key)
    if raw is None or raw == "":
        if default is None:
            raise ValueError(f"{key} is not set; expected the scheduler to set it for each task")
        return default
    try:
        return int(raw.split("(")[0])  # SLURM_TASKS_PER_NODE style "2(x3)": the count
    except ValueError:
        raise ValueError(
            f"{key}={raw!r} is not an integer; expected a task count or index"
        ) from None


def cluster_ranks(environ: Mapping[str, str] | None = None) -> ClusterRanks | None:
    """The rank of this process when it is one of several tasks of a job step, else ``None``.

    A SLURM job step (``srun``, which submitit's SLURM executor runs a job under) sets
    ``SLURM_STEP_ID``, ``SLURM_PROCID``, ``SLURM_NTASKS`` (``SLURM_STEP_NUM_TASKS``),
    ``SLURM_LOCALID``, ``SLURM_NODEID`` and ``SLURM_STEP_NODELIST``/``SLURM_JOB_NODELIST`` for
    each task; submitit's local executor sets ``SUBMITIT_LOCAL_GLOBALID``/``_NTASKS``/
    ``_LOCALID``/``_JOB_ID`` (one machine). A step of one task, or a batch script outside any
    step, gives ``None``. Rank 0's host is the first of the step's node list (``MASTER_ADDR``
    overrides it) and the port :func:`port_for_job` of the job id (``MASTER_PORT`` overrides it).

    Raises:
        ValueError: a variable that is not a number, or a node list that cannot be read.
    """
    env = os.environ if environ is None else environ
    if "SLURM_PROCID" in env and ("SLURM_STEP_ID" in env or "SLURM_STEPID" in env):
        source = "SLURM"
        world = _env_int(env, "SLURM_STEP_NUM_TASKS", _env_int(env, "SLURM_NTASKS", 1))
        rank = _env_int(env, "SLURM_PROCID")
        local, node = _env_int(env, "SLURM_LOCALID", 0), _env_int(env, "SLURM_NODEID", 0)
        nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or "127.0.0.1"
        host, job = first_host(nodes), env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    elif "SUBMITIT_LOCAL_GLOBALID" in env and "SUBMITIT_LOCAL_NTASKS" in env:
        source = "submitit_local"
        world = _env_int(env, "SUBMITIT_LOCAL_NTASKS")
        rank = _env_int(env, "SUBMITIT_LOCAL_GLOBALID")
        local, node = _env_int(env, "SUBMITIT_LOCAL_LOCALID", rank), 0
        host, job = HOST, env.get("SUBMITIT_LOCAL_JOB_ID")
    else:
        return None
    if world <= 1:
        return None
    if not 0 <= rank < world:
        raise ValueError(f"{source} rank {rank} is outside the step's {world} tasks")
    port = _env_int(env, "MASTER_PORT", port_for_job(job))
    return ClusterRanks(rank, world, local, node, env.get("MASTER_ADDR") or host, port, source)


def _task_store(ranks: ClusterRanks, timeout_s: float) -> dist.TCPStore:
    """The rendezvous store of a cluster step: opened by rank 0 on its port (listening on every
    interface), reached by the other ranks, which retry until it is open."""
    try:
        return dist.TCPStore(
            ranks.master_addr,
            ranks.master_port,
            ranks.world,
            is_master=ranks.rank == 0,
            wait_for_workers=False,
            timeout=timedelta(seconds=timeout_s),
        )
    except (RuntimeError, OSError) as err:
        what = "open" if ranks.rank == 0 else "reach"
        raise RankFailedError(
            f"{ranks.describe()} could not {what} the rendezvous store at "
            f"{ranks.master_addr}:{ranks.master_port} ({' '.join(str(err).split())[:300]}); "
            f"expected rank 0's host to accept connections on that port from every task (set "
            f"MASTER_PORT to another free port, or MASTER_ADDR to rank 0's address)"
        ) from err


def _task_errors(store: dist.Store, world: int) -> str | None:
    """The first error another rank recorded in the store, as ``rank r: <error>``."""
    for other in range(1, world):
        if (error := recorded_error(store, other)) is not None:
            return f"rank {other}: {error}"
    return None


def launch_tasks(
    main: Callable[[], T],
    ranks: ClusterRanks,
    *,
    device: str = "cpu",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    threads: int | None = None,
    what: str = "the multi-process fit",
) -> T:
    """Run ``main()`` as rank 0 of a cluster step whose other tasks call :func:`join_tasks`;
    returns its result.

    Rank 0 opens the rendezvous store, waits (up to :data:`RENDEZVOUS_TIMEOUT_S`) until every
    other task has built its data and model, joins the process group and runs ``main``, which
    must run the same collectives as theirs. The group is destroyed before this returns.

    Raises:
        RankFailedError: another task recorded an error, or did not connect in time, or a
            collective failed (the message names the task when it recorded its error).
    """
    if ranks.rank != 0:
        raise ValueError(f"launch_tasks runs rank 0, but this is {ranks.describe()}")
    threads = threads_per_rank(1) if threads is None else threads
    backend = backend_for(device)
    store = _task_store(ranks, timeout_s)
    log.info(
        "training on %d %s tasks (%s, %d thread(s) on this one, rendezvous %s:%d)",
        ranks.world,
        ranks.source,
        backend,
        threads,
        ranks.master_addr,
        ranks.master_port,
    )
    deadline = time.monotonic() + max(timeout_s, RENDEZVOUS_TIMEOUT_S)
    while store.add(READY_KEY, 0) < ranks.world - 1:
        if (failed := _task_errors(store, ranks.world)) is not None:
            raise RankFailedError(f"{failed}; {what} ({ranks.world} {ranks.source} tasks) stopped")
        if time.monotonic() > deadline:
            raise RankFailedError(
                f"only {store.add(READY_KEY, 0)} of the {ranks.world - 1} other "
                f"{ranks.source} tasks connected to {ranks.master_addr}:{ranks.master_port} "
                f"within {RENDEZVOUS_TIMEOUT_S:g} s; expected every task of the step to run "
                f"the same job (see their logs)"
            )
        time.sleep(0.05)
    previous = torch.get_num_threads()
    init_group(store, 0, ranks.world, backend, timeout_s, task_device(device, ranks.local_rank))
    torch.set_num_threads(threads)
    try:
        result = main()
        dist.barrier()  # every rank is done with its collectives before the store closes
        return result
    except BaseException as err:
        if not is_communication_error(err):
            raise
        brief = f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"
        time.sleep(0.5)  # a failing rank records its error before its sockets close
        failed = _task_errors(store, ranks.world) or "another task failed or stopped answering"
        raise RankFailedError(
            f"{failed}; {what} ({ranks.world} {ranks.source} tasks) stopped, rank 0 with "
            f"{brief} (trainer.dist_timeout_s={timeout_s:g})"
        ) from err
    finally:
        torch.set_num_threads(previous)
        teardown()


def join_tasks(
    fit: Callable[[], Any],
    ranks: ClusterRanks,
    *,
    device: str = "cpu",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    threads: int | None = None,
) -> None:
    """Run ``fit()`` as rank ``ranks.rank`` (>= 1) of a cluster step whose rank 0 calls
    :func:`launch_tasks`: connect to its store (waiting up to :data:`RENDEZVOUS_TIMEOUT_S` for
    it to open), join the group and run ``fit``. An error is recorded in the store for rank 0's
    message, then raised. SIGINT, SIGTERM and SIGUSR2 are ignored meanwhile: rank 0 decides
    when the fit stops, and every rank stops after the same epoch."""
    if ranks.rank == 0:
        raise ValueError(f"join_tasks runs ranks 1 and above, but this is {ranks.describe()}")
    held = {
        sig: signal.signal(sig, signal.SIG_IGN)
        for sig in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGUSR2", signal.SIGTERM))
    }
    previous = torch.get_num_threads()
    store = _task_store(ranks, max(timeout_s, RENDEZVOUS_TIMEOUT_S))
    store.set_timeout(timedelta(seconds=timeout_s))
    try:
        if threads is not None:
            torch.set_num_threads(threads)
        store.add(READY_KEY, 1)
        init_group(
            store,
            ranks.rank,
            ranks.world,
            backend_for(device),
            timeout_s,
            task_device(device, ranks.local_rank),
        )
        fit()
        dist.barrier()
    except Exception as err:
        record_error(store, ranks.rank, err)
        raise
    finally:
        torch.set_num_threads(previous)
        teardown()
        for sig, handler in held.items():
            signal.signal(sig, handler)
