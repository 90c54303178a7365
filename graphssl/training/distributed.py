"""One model on several processes: ``torch.distributed`` process groups, spawning and sharding.

``trainer.devices=N`` trains one model on ``N`` processes (ranks) of this machine, with gloo on
CPU and NCCL on CUDA. :func:`launch` runs rank 0 in the calling process (the Hydra job, which
owns the MLflow run) and starts ranks ``1..N-1`` with ``torch.multiprocessing``'s spawn; every
rank runs the one training loop (:class:`~graphssl.training.trainer.Trainer`), which, inside a
process group:

* makes BatchNorm layers normalise over the global batch (:class:`GatheredBatchNorm`, or
  :class:`torch.nn.SyncBatchNorm` on CUDA) and broadcasts rank 0's parameters and buffers
  (:func:`prepare_method`);
* gives each rank its slice of every global batch (:func:`node_seed_batches` for neighbour-
  sampled node batches, :class:`ShardedBatchSampler` for graph and image datasets): one seeded
  permutation per epoch, identical on every rank, cut into global batches of
  ``trainer.batch_size × N`` items, rank ``r`` taking the ``r``-th of ``N`` near-equal parts;
* averages the gradients over ranks after each backward (:func:`sync_gradients`); a loss that
  compares rows with each other gathers every rank's rows with gradient (:func:`gather_rows`),
  one that averages per-row terms takes its rank's share of the global mean
  (:func:`global_mean`), so each step equals one step of one process on the whole global batch.

Every collective carries the process group's timeout (``trainer.dist_timeout_s``), a guard
against hangs; a rank that dies closes its sockets and the others fail at their next collective
within moments, and :func:`launch` names the rank in the error it raises.

On a cluster (``trainer.num_nodes > 1``, or a job step of several tasks) the scheduler starts
the processes instead: each task of the step is one rank, read from the environment by
:func:`cluster_ranks` (SLURM's ``SLURM_PROCID``/``SLURM_NTASKS``/``SLURM_LOCALID``/
``SLURM_NODEID``, or submitit's local executor's ``SUBMITIT_LOCAL_*``). Rank 0 opens the
rendezvous store on the first host of the step's node list, on a port derived from the job id
(:func:`port_for_job`); :func:`launch_tasks` runs rank 0 and :func:`join_tasks` every other
rank, with nothing spawned.
"""

from __future__ import annotations

import io
import logging
import math
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.utils.data import Sampler

from graphssl.methods.collective import (
    all_reduce_mean,
    all_reduce_sum,
    comm_device,
    gather_rows,
    global_mean,
    is_distributed,
    rank,
)
from graphssl.methods.collective import world_size as world_size

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "ClusterRanks",
    "GatheredBatchNorm",
    "RankFailedError",
    "ShardedBatchSampler",
    "all_reduce_mean",
    "all_reduce_sum",
    "backend_for",
    "broadcast_object",
    "broadcast_parameters",
    "broadcast_state",
    "cluster_ranks",
    "first_host",
    "gather_rows",
    "global_mean",
    "is_distributed",
    "join_tasks",
    "launch",
    "launch_tasks",
    "node_seed_batches",
    "port_for_job",
    "prepare_method",
    "rank",
    "rank_device",
    "revert_sync_batchnorm",
    "shard",
    "sync_gradients",
    "task_device",
    "threads_per_rank",
    "world_size",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: seconds a collective (or the rendezvous) may wait for the other ranks before failing
DEFAULT_TIMEOUT_S = 300.0
#: seconds the spawned ranks may take to start and build their data and model before joining
RENDEZVOUS_TIMEOUT_S = 1800.0
#: the loopback address ranks meet on (one machine)
HOST = "127.0.0.1"
#: store key each spawned rank increments once it is connected
_READY_KEY = "graphssl/ready"
#: store key prefix under which a spawned rank records the error it stops with
_ERROR_KEY = "graphssl/error"
#: seconds rank 0 waits for the other ranks to exit after it failed, to learn which one died
_EXIT_GRACE_S = 10.0


class RankFailedError(RuntimeError):
    """A rank of a multi-process fit failed or died; the message names it."""


# ---------------------------------------------------------------------------- settings
def backend_for(device: str | torch.device) -> str:
    """``"nccl"`` for a CUDA device, ``"gloo"`` otherwise."""
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def rank_device(device: str | torch.device, rank: int) -> torch.device:
    """The device of ``rank``: ``cuda:<rank>`` when the run's device is CUDA, else ``device``."""
    dev = torch.device(device)
    return torch.device("cuda", rank) if dev.type == "cuda" else dev


def task_device(device: str | torch.device, local_rank: int) -> torch.device:
    """The device of a cluster task: ``cuda:<local_rank>`` when the run's device is CUDA and
    the task sees several GPUs, ``cuda:0`` when the scheduler gave it one (``--gpus-per-task``
    binds one GPU to each task), else ``device``."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return dev
    return torch.device("cuda", local_rank if torch.cuda.device_count() > 1 else 0)


def threads_per_rank(devices: int, requested: int | None = None) -> int:
    """Torch intra-op threads per rank so that ``devices × threads`` stays within this
    process's CPU cores (``os.sched_getaffinity``); ``requested`` (``num_threads``) caps it."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    share = max(1, cores // max(devices, 1))
    return share if requested is None else max(1, min(share, int(requested)))


# ---------------------------------------------------------------------------- process groups
def _init_group(
    store: dist.Store, rank: int, world: int, backend: str, timeout_s: float, device: torch.device
) -> None:
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend,
        store=store,
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=timeout_s),
    )


def _teardown() -> None:
    if is_distributed():
        dist.destroy_process_group()


def _child(
    index: int,
    worker: Callable[..., Any],
    world: int,
    port: int,
    backend: str,
    timeout_s: float,
    threads: int,
    device: str,
    args: tuple[Any, ...],
) -> None:
    """Entry of a spawned rank: ``worker(rank, *args)`` builds what the rank trains (outside
    the group, so the collectives' timeout never covers loading data), then the rank joins the
    group and calls what the worker returned."""
    me = index + 1
    # Ctrl-C and SIGTERM reach every process of the job; rank 0 alone decides (it stops all
    # ranks after the epoch, or ends and the others fail at their next collective), so a
    # spawned rank never races it to exit
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _die_with_parent()
    torch.set_num_threads(threads)
    store = dist.TCPStore(HOST, port, world, is_master=False, timeout=timedelta(seconds=timeout_s))
    try:
        fit = worker(me, *args)
        store.add(_READY_KEY, 1)
        _init_group(store, me, world, backend, timeout_s, rank_device(device, me))
        fit()
    except Exception as err:  # recorded for rank 0's message, then torch's spawn reports it
        try:
            message = f"{type(err).__name__}: {' '.join(str(err).split())[:500]}"
            store.set(f"{_ERROR_KEY}/{me}", message)
        except (RuntimeError, OSError):
            pass
        raise
    finally:
        _teardown()


def _die_with_parent() -> None:
    """Have the kernel SIGKILL this process when rank 0 ends (Linux ``PR_SET_PDEATHSIG``; torch's
    spawn asks for SIGINT, which a spawned rank ignores), so no rank outlives its job."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, int(signal.SIGKILL))  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # another libc: the next collective still ends the rank
        return


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "is still running"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _failed_rank(context: mp.ProcessContext, store: dist.Store, wait_s: float) -> str | None:
    """A sentence naming the first spawned rank that failed, with its error when it recorded
    one in the store (waiting up to ``wait_s`` for one to finish dying), or ``None``."""
    deadline = time.monotonic() + wait_s
    while True:
        for index, proc in enumerate(context.processes):
            code = proc.exitcode
            if code is not None and code != 0:
                key, error = f"{_ERROR_KEY}/{index + 1}", ""
                try:
                    if store.check([key]):
                        error = ": " + store.get(key).decode(errors="replace")
                except (RuntimeError, OSError):  # the store itself may be what failed
                    pass
                return f"rank {index + 1} (pid {proc.pid}) {_exit_reason(code)}{error}"
        if time.monotonic() >= deadline or all(p.exitcode is not None for p in context.processes):
            return None
        time.sleep(0.05)


def _stop(context: mp.ProcessContext) -> None:
    """Kill the spawned ranks still alive (they hold nothing to save: rank 0 owns the run and
    the checkpoints) and reap them."""
    for proc in context.processes:
        if proc.is_alive():
            proc.kill()
    for proc in context.processes:
        proc.join(10)


def _wait_for_ranks(store: dist.TCPStore, context: mp.ProcessContext, timeout_s: float) -> None:
    """Wait until every spawned rank has connected; fail fast, naming it, when one dies."""
    expected = len(context.processes)
    deadline = time.monotonic() + timeout_s
    while store.add(_READY_KEY, 0) < expected:
        failed = _failed_rank(context, store, 0.0)
        if failed is not None:
            raise RankFailedError(
                f"{failed} before joining the process group; the multi-process fit "
                f"(trainer.devices={expected + 1}) stopped"
            )
        if time.monotonic() > deadline:
            raise RankFailedError(
                f"only {store.add(_READY_KEY, 0)} of {expected} spawned ranks connected to "
                f"{HOST}:{store.port} within {timeout_s:g} s of starting; expected all "
                f"of trainer.devices={expected + 1} ranks to have built their data and model"
            )
        time.sleep(0.02)


def launch(
    main: Callable[[], T],
    worker: Callable[..., Any],
    args: Sequence[Any],
    devices: int,
    *,
    device: str = "cpu",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    threads: int | None = None,
) -> T:
    """Run ``main()`` as rank 0 of a process group of ``devices`` ranks and return its result.

    Ranks ``1..devices-1`` are spawned (``torch.multiprocessing``, start method ``spawn``); each
    calls ``worker(rank, *args)`` (a module-level function, so that it can be pickled), which
    builds what the rank trains and returns a callable that trains it, then joins the group
    and calls it: it must run the same collectives as ``main`` (the same training loop).
    Waiting for the ranks to build (up to :data:`RENDEZVOUS_TIMEOUT_S`) stops at once when one
    of them dies. The
    ranks meet on a TCP store that rank 0 opens on a free port of 127.0.0.1 chosen by the
    operating system. ``main`` runs with ``threads`` torch threads (default:
    :func:`threads_per_rank`); the previous count comes back afterwards, and the group is
    destroyed before this returns, so what follows runs on one process again.

    Raises:
        RankFailedError: a spawned rank failed or died (the message names it and its exit
            status); the other ranks are stopped.
        ValueError: ``devices`` is below 2.
    """
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 2:
        raise ValueError(f"launch starts 2 or more ranks, got devices={devices!r}")
    if is_distributed():
        raise RuntimeError(
            "launch was called inside a torch.distributed process group; expected to start one"
        )
    threads = threads_per_rank(devices) if threads is None else threads
    backend = backend_for(device)
    store = dist.TCPStore(
        HOST,
        0,
        devices,
        is_master=True,
        wait_for_workers=False,
        timeout=timedelta(seconds=timeout_s),
    )
    port = int(store.port)
    log.info(
        "training on %d processes (%s, %d thread(s) each, rendezvous %s:%d)",
        devices,
        backend,
        threads,
        HOST,
        port,
    )
    context = mp.start_processes(
        _child,
        args=(worker, devices, port, backend, timeout_s, threads, device, tuple(args)),
        nprocs=devices - 1,
        join=False,
        start_method="spawn",
    )
    previous = torch.get_num_threads()
    try:
        _wait_for_ranks(store, context, max(timeout_s, RENDEZVOUS_TIMEOUT_S))
        _init_group(store, 0, devices, backend, timeout_s, rank_device(device, 0))
        torch.set_num_threads(threads)
        try:
            result = main()
        except BaseException as err:
            # decided before the group is torn down: until then the other ranks wait in their
            # collectives, so a rank that already exited is one that failed on its own
            wait = _EXIT_GRACE_S if _is_communication_error(err) else 0.0
            failed = _failed_rank(context, store, wait)
            brief = f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"
            if failed is not None:
                raise RankFailedError(
                    f"{failed}; the multi-process fit (trainer.devices={devices}) stopped, rank 0 "
                    f"with {brief}"
                ) from err
            if wait:  # every rank alive, one of them silent: the collective's timeout fired
                alive = [i + 1 for i, proc in enumerate(context.processes) if proc.is_alive()]
                raise RankFailedError(
                    f"rank 0 stopped waiting on the other ranks ({brief}) while rank(s) "
                    f"{', '.join(map(str, alive)) or 'none'} were still running: a rank stopped "
                    f"answering for trainer.dist_timeout_s={timeout_s:g} s or lost its "
                    f"connection; the multi-process fit (trainer.devices={devices}) stopped"
                ) from err
            raise
        finally:
            torch.set_num_threads(previous)
            _teardown()
        for proc in context.processes:  # every collective is done: the ranks are exiting
            proc.join(timeout_s)
        failed = _failed_rank(context, store, 0.0)
        if failed is not None:
            raise RankFailedError(f"{failed} after training (trainer.devices={devices})")
        return result
    finally:
        _stop(context)


# ---------------------------------------------------------------------------- cluster tasks
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
        key = f"{_ERROR_KEY}/{other}"
        try:
            if store.check([key]):
                return f"rank {other}: {store.get(key).decode(errors='replace')}"
        except (RuntimeError, OSError):
            return None
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
    while store.add(_READY_KEY, 0) < ranks.world - 1:
        if (failed := _task_errors(store, ranks.world)) is not None:
            raise RankFailedError(f"{failed}; {what} ({ranks.world} {ranks.source} tasks) stopped")
        if time.monotonic() > deadline:
            raise RankFailedError(
                f"only {store.add(_READY_KEY, 0)} of the {ranks.world - 1} other "
                f"{ranks.source} tasks connected to {ranks.master_addr}:{ranks.master_port} "
                f"within {RENDEZVOUS_TIMEOUT_S:g} s; expected every task of the step to run "
                f"the same job (see their logs)"
            )
        time.sleep(0.05)
    previous = torch.get_num_threads()
    _init_group(store, 0, ranks.world, backend, timeout_s, task_device(device, ranks.local_rank))
    torch.set_num_threads(threads)
    try:
        result = main()
        dist.barrier()  # every rank is done with its collectives before the store closes
        return result
    except BaseException as err:
        if not _is_communication_error(err):
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
        _teardown()


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
        store.add(_READY_KEY, 1)
        _init_group(
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
        try:
            message = f"{type(err).__name__}: {' '.join(str(err).split())[:500]}"
            store.set(f"{_ERROR_KEY}/{ranks.rank}", message)
        except (RuntimeError, OSError):
            pass
        raise
    finally:
        torch.set_num_threads(previous)
        _teardown()
        for sig, handler in held.items():
            signal.signal(sig, handler)


def _is_communication_error(err: BaseException) -> bool:
    """Whether ``err`` is a collective or store failure (a peer that went away, a timeout)
    rather than an error of rank 0's own code."""
    if isinstance(err, dist.DistError):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and any(
        word in text for word in ("gloo", "nccl", "connection", "timed out", "timeout", "peer")
    )


# ---------------------------------------------------------------------------- training helpers
def broadcast_object(obj: T, src: int = 0) -> T:
    """``obj`` of rank ``src`` on every rank (``obj`` itself without a group): small picklable
    values such as flags (``torch.distributed.broadcast_object_list``)."""
    if world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]  # type: ignore[no-any-return]


def broadcast_state(state: T, src: int = 0) -> T:
    """A checkpoint-like ``state`` (tensors, numbers, strings, containers, ``None``) of rank
    ``src`` on every rank: written with ``torch.save`` and read back with
    ``torch.load(weights_only=True)``, so the receiving ranks run no code from it."""
    if world_size() == 1:
        return state
    me, device = rank(), comm_device()
    if me == src:
        buffer = io.BytesIO()
        torch.save(state, buffer)
        data = torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8).to(device)
        size = torch.tensor([data.numel()], dtype=torch.long, device=device)
    else:
        size = torch.zeros(1, dtype=torch.long, device=device)
    dist.broadcast(size, src=src)
    if me != src:
        data = torch.empty(int(size.item()), dtype=torch.uint8, device=device)
    dist.broadcast(data, src=src)
    if me == src:
        return state
    raw = data.cpu().numpy().tobytes()
    return torch.load(io.BytesIO(raw), weights_only=True, map_location="cpu")  # type: ignore[no-any-return]


def broadcast_parameters(module: nn.Module, src: int = 0) -> nn.Module:
    """Give every rank ``src``'s parameters and buffers of ``module`` (in place, no gradient);
    ``module`` unchanged without a group. Returns ``module``."""
    if world_size() == 1:
        return module
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            dist.broadcast(tensor.data, src=src)
    return module


class GatheredBatchNorm(_BatchNorm):
    """BatchNorm whose training statistics cover every rank's rows: the per-channel sums and
    the row count are summed over ranks with gradient (:func:`all_reduce_sum`), then the sums
    of squared deviations from that global mean, so each rank normalises its own rows exactly
    as one process normalises the global batch; the running statistics, updated from the same
    global mean and (unbiased) variance, stay identical on every rank. Two all-reduces of
    ``C + 1`` and ``C`` numbers forward and two backward, on any device and backend (gloo
    included, which :class:`torch.nn.SyncBatchNorm` does not support; on CUDA
    :func:`prepare_method` uses ``SyncBatchNorm``). Outside a process group, or in evaluation
    mode, it is the BatchNorm it replaced."""

    #: the BatchNorm class this layer replaced (:func:`revert_sync_batchnorm` restores it)
    replaced: type[_BatchNorm] = nn.BatchNorm1d

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected an input of 2 or more dimensions, got {input.dim()}D")

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if not (self.training and world_size() > 1):
            return super().forward(input)
        self._check_input_dim(input)
        dims = [0, *range(2, input.dim())]  # every dimension but the channels
        shape = [1, -1] + [1] * (input.dim() - 2)
        rows = input.numel() // max(input.shape[1], 1)
        stats = all_reduce_sum(torch.cat([input.sum(dims), input.new_full((1,), float(rows))]))
        count = stats[-1]
        if float(count) < 2:
            raise ValueError(
                f"expected more than 1 value per channel over all ranks when training, got "
                f"input size {list(input.shape)} and {int(count)} value(s) in all"
            )
        mean = stats[:-1] / count
        centred = input - mean.view(shape)
        var = all_reduce_sum(centred.square().sum(dims)) / count
        out = centred * torch.rsqrt(var + self.eps).view(shape)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        if self.track_running_stats and self.running_mean is not None:
            self._update_running_stats(mean.detach(), var.detach() * count / (count - 1))
        return out

    @torch.no_grad()
    def _update_running_stats(self, mean: torch.Tensor, unbiased_var: torch.Tensor) -> None:
        """As ``_BatchNorm`` updates them: an exponential average with ``momentum``, or the
        cumulative average when ``momentum`` is ``None``."""
        assert self.num_batches_tracked is not None and self.running_var is not None
        assert self.running_mean is not None
        self.num_batches_tracked.add_(1)
        factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        self.running_mean.mul_(1 - factor).add_(mean.to(self.running_mean.dtype), alpha=factor)
        self.running_var.mul_(1 - factor).add_(
            unbiased_var.to(self.running_var.dtype), alpha=factor
        )


def _swap_batchnorm(module: nn.Module, to: type[_BatchNorm] | None) -> nn.Module:
    """``module`` with its BatchNorm layers replaced by ``to`` (``None``: by the class each
    :class:`GatheredBatchNorm` or ``SyncBatchNorm`` replaced), sharing their parameters and
    buffers; a module that is not a BatchNorm is changed in place and returned."""
    out = module
    if isinstance(module, _BatchNorm):
        if to is None:  # only the layers a swap made know what they replaced
            target = module.__dict__.get("replaced") or (
                module.replaced if isinstance(module, GatheredBatchNorm) else None
            )
        elif isinstance(module, to):
            target = None
        else:
            target = to
        if target is not None and type(module) is not target:
            out = target(
                module.num_features,
                module.eps,
                module.momentum,  # type: ignore[arg-type]
                module.affine,
                module.track_running_stats,
            )
            if to is not None:
                out.replaced = type(module)  # type: ignore[assignment]
            if module.affine:
                out.weight, out.bias = module.weight, module.bias
            out.running_mean, out.running_var = module.running_mean, module.running_var
            out.num_batches_tracked = module.num_batches_tracked
            out.train(module.training)
    for name, child in module.named_children():
        swapped = _swap_batchnorm(child, to)
        if swapped is not child:
            setattr(out, name, swapped)
    return out


def prepare_method(method: nn.Module, device: torch.device | str = "cpu") -> nn.Module:
    """Make every rank hold the same model: BatchNorm layers normalise over the global batch
    (:class:`GatheredBatchNorm`; :class:`torch.nn.SyncBatchNorm` on CUDA; same parameters and
    state-dict keys), then rank 0's parameters and buffers are broadcast. Returns ``method``."""
    if isinstance(method, _BatchNorm):
        raise TypeError(
            f"{type(method).__name__} is itself a BatchNorm layer; expected a model holding them"
        )
    cuda = torch.device(device).type == "cuda"
    _swap_batchnorm(method, nn.SyncBatchNorm if cuda else GatheredBatchNorm)
    return broadcast_parameters(method)


def revert_sync_batchnorm(module: nn.Module) -> nn.Module:
    """Undo :func:`prepare_method`'s BatchNorm replacement (same parameters and buffers), so
    the model runs on one process again; returns ``module``."""
    return _swap_batchnorm(module, None)


def sync_gradients(parameters: Sequence[nn.Parameter]) -> None:
    """Average the gradients of ``parameters`` over ranks, in one all-reduce; a parameter that
    got no gradient on a rank counts as zero there (every rank then holds the same ``.grad``)."""
    world = world_size()
    if world == 1:
        return
    params = list(parameters)
    if not params:
        return
    flat = torch.cat(
        [
            (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).to(params[0].dtype)
            for p in params
        ]
    )
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat /= world
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset : offset + n].view_as(p).to(p.dtype).clone()
        offset += n


def shard(items: torch.Tensor, parts: int, index: int) -> torch.Tensor:
    """Part ``index`` of ``parts`` near-equal contiguous parts of ``items`` (sizes differ by at
    most one); a batch with fewer items than parts is padded with its first items first, so
    no part is empty."""
    if items.numel() < parts:
        reps = math.ceil(parts / max(items.numel(), 1))
        items = items.repeat(reps)[:parts]
    return torch.tensor_split(items, parts)[index]


def global_batches(
    count: int, batch_size: int, seed: int, drop_last: bool = False
) -> list[torch.Tensor]:
    """The global batches of an epoch: a permutation of ``range(count)`` drawn from a generator
    seeded ``seed``, cut into consecutive batches of ``batch_size`` (the last one shorter,
    or dropped when ``drop_last``)."""
    perm = torch.randperm(count, generator=torch.Generator().manual_seed(int(seed)))
    out = list(perm.split(batch_size))
    if drop_last and out and out[-1].numel() < batch_size:
        out.pop()
    return out


def node_seed_batches(
    num_nodes: int, batch_size: int, seed: int, world: int, me: int
) -> list[torch.Tensor]:
    """This rank's seed nodes for each step of an epoch: every node once per epoch over all
    ranks, global batches of ``batch_size × world`` seeds, rank ``me`` taking part ``me``."""
    return [shard(b, world, me) for b in global_batches(num_nodes, batch_size * world, seed)]


def neighbor_batches(loader: Any, seeds: Sequence[torch.Tensor]) -> Iterator[Any]:
    """The mini-batches a PyG ``NeighborLoader`` (built over every node) samples for the given
    seed tensors, in order: its own sampling and collation, with the seeds chosen here."""
    for nodes in seeds:
        out = loader.collate_fn(nodes)
        yield out if loader.filter_per_worker else loader.filter_fn(out)


class ShardedBatchSampler(Sampler[list[int]]):
    """A batch sampler over ``count`` items for one rank: each epoch one permutation seeded by
    :meth:`set_epoch` (the same on every rank), global batches of ``batch_size × world``, rank
    ``me`` taking part ``me`` of each (the split of ``DistributedSampler``, batch by batch, so
    the global batch of a step is the one a single process would draw).

    Args:
        count: items in the dataset.
        batch_size: items per rank and step.
        world: ranks.
        me: this rank.
        seed: seed of the permutations (epoch ``e`` draws from ``epoch_seed(seed, e)``).
        drop_last: drop a last global batch shorter than the others (default: ``False``).
    """

    def __init__(
        self, count: int, batch_size: int, world: int, me: int, seed: int, drop_last: bool = False
    ) -> None:
        self.count, self.batch_size, self.world, self.me = count, batch_size, world, me
        self.seed, self.drop_last, self.epoch = int(seed), drop_last, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _batches(self) -> list[torch.Tensor]:
        from graphssl.data.sampler import epoch_seed

        batches = global_batches(
            self.count,
            self.batch_size * self.world,
            epoch_seed(self.seed, self.epoch),
            self.drop_last,
        )
        return [shard(b, self.world, self.me) for b in batches]

    def __iter__(self) -> Iterator[list[int]]:
        return (b.tolist() for b in self._batches())

    def __len__(self) -> int:
        full, rest = divmod(self.count, self.batch_size * self.world)
        return full + (1 if rest and not self.drop_last else 0)
