"""The process group itself: which backend and device a rank uses, how many threads it gets,
joining and leaving the group, and how its failures read."""

from __future__ import annotations

import contextlib
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from graphssl.methods.collective import is_distributed

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "HOST",
    "READY_KEY",
    "RENDEZVOUS_TIMEOUT_S",
    "RankFailedError",
    "backend_for",
    "init_group",
    "is_communication_error",
    "rank_device",
    "record_error",
    "recorded_error",
    "task_device",
    "teardown",
    "threads_per_rank",
]

#: seconds a collective (or the rendezvous) may wait for the other ranks before failing
DEFAULT_TIMEOUT_S = 300.0
#: seconds the other ranks may take to start and build their data and model before joining
RENDEZVOUS_TIMEOUT_S = 1800.0
#: the loopback address ranks meet on (one machine)
HOST = "127.0.0.1"
#: store key each rank but 0 increments once it is connected
READY_KEY = "graphssl/ready"
#: store key prefix under which a rank records the error it stops with
_ERROR_KEY = "graphssl/error"


class RankFailedError(RuntimeError):
    """A rank of a multi-process fit failed or died; the message names it."""


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


def init_group(
    store: dist.Store, rank: int, world: int, backend: str, timeout_s: float, device: torch.device
) -> None:
    """Join the process group as ``rank`` of ``world`` through ``store``, every collective
    carrying ``timeout_s``; a CUDA rank first makes ``device`` its current GPU."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend,
        store=store,
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=timeout_s),
    )


def teardown() -> None:
    """Leave the process group, if this process is in one."""
    if is_distributed():
        dist.destroy_process_group()


def is_communication_error(err: BaseException) -> bool:
    """Whether ``err`` is a collective or store failure (a peer that went away, a timeout)
    rather than an error of rank 0's own code."""
    if isinstance(err, dist.DistError):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and any(
        word in text for word in ("gloo", "nccl", "connection", "timed out", "timeout", "peer")
    )


def record_error(store: dist.Store, rank: int, err: BaseException) -> None:
    """Record the error ``rank`` stops with in the rendezvous store, for rank 0's message
    (:func:`recorded_error`); a store that is itself gone is left alone."""
    message = f"{type(err).__name__}: {' '.join(str(err).split())[:500]}"
    with contextlib.suppress(RuntimeError, OSError):
        store.set(f"{_ERROR_KEY}/{rank}", message)


def recorded_error(store: dist.Store, rank: int) -> str | None:
    """The error ``rank`` recorded with :func:`record_error`, or ``None`` (also when the store
    cannot be read: it may be what failed)."""
    key = f"{_ERROR_KEY}/{rank}"
    try:
        return store.get(key).decode(errors="replace") if store.check([key]) else None
    except (RuntimeError, OSError):
        return None
