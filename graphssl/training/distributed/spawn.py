"""One machine: rank 0 is the calling process, ranks ``1..N-1`` are spawned (:func:`launch`)."""

from __future__ import annotations

import logging
import signal
import sys
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from graphssl.methods.collective import is_distributed
from graphssl.training.distributed.group import (
    DEFAULT_TIMEOUT_S,
    HOST,
    READY_KEY,
    RENDEZVOUS_TIMEOUT_S,
    RankFailedError,
    backend_for,
    init_group,
    is_communication_error,
    rank_device,
    record_error,
    recorded_error,
    teardown,
    threads_per_rank,
)

__all__ = ["launch"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: seconds rank 0 waits for the other ranks to exit after it failed, to learn which one died
_EXIT_GRACE_S = 10.0


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
        store.add(READY_KEY, 1)
        init_group(store, me, world, backend, timeout_s, rank_device(device, me))
        fit()
    except Exception as err:  # recorded for rank 0's message, then torch's spawn reports it
        record_error(store, me, err)
        raise
    finally:
        teardown()


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
                error = recorded_error(store, index + 1)
                said = "" if error is None else f": {error}"
                return f"rank {index + 1} (pid {proc.pid}) {_exit_reason(code)}{said}"
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
    while store.add(READY_KEY, 0) < expected:
        failed = _failed_rank(context, store, 0.0)
        if failed is not None:
            raise RankFailedError(
                f"{failed} before joining the process group; the multi-process fit "
                f"(trainer.devices={expected + 1}) stopped"
            )
        if time.monotonic() > deadline:
            raise RankFailedError(
                f"only {store.add(READY_KEY, 0)} of {expected} spawned ranks connected to "
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
        init_group(store, 0, devices, backend, timeout_s, rank_device(device, 0))
        torch.set_num_threads(threads)
        try:
            result = main()
        except BaseException as err:
            # decided before the group is torn down: until then the other ranks wait in their
            # collectives, so a rank that already exited is one that failed on its own
            wait = _EXIT_GRACE_S if is_communication_error(err) else 0.0
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
            teardown()
        for proc in context.processes:  # every collective is done: the ranks are exiting
            proc.join(timeout_s)
        failed = _failed_rank(context, store, 0.0)
        if failed is not None:
            raise RankFailedError(f"{failed} after training (trainer.devices={devices})")
        return result
    finally:
        _stop(context)
