"""Child processes that do not outlive the process that started them.

A process killed with SIGKILL (or any signal without a handler) runs no cleanup, so the workers
it started — loky workers of a joblib sweep, EMIR's spawned workers, the MLflow server of
``graphssl-ui`` — would be orphaned and keep computing or serving. Two mechanisms end them:

- :func:`die_with_parent`: on Linux, ``prctl(PR_SET_PDEATHSIG, sig)`` asks the kernel to send
  ``sig`` to the calling process when its parent (strictly: the parent thread that started
  it) ends. It is called inside the child, at its start.
- :func:`watch_parent`: a daemon thread that calls a function once the parent process is gone
  (its parent pid changes), for a process that must clean up its own children first and for
  platforms without ``prctl``.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

__all__ = [
    "descendants",
    "die_with_parent",
    "end_process_trees",
    "end_processes",
    "running",
    "watch_parent",
]

log = logging.getLogger(__name__)

#: ``PR_SET_PDEATHSIG`` of ``<linux/prctl.h>``
PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM, parent_pid: int | None = None) -> bool:
    """Have the kernel send ``sig`` to this process when its parent ends (Linux only).

    ``parent_pid``: the pid the parent had; when the parent is already gone (the parent pid
    changed before the request took effect), ``sig`` is sent at once. Returns whether the
    request is in place (``False`` off Linux or where ``prctl`` is unavailable).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if parent_pid is not None and os.getppid() != parent_pid:
        os.kill(os.getpid(), sig)  # the parent ended before the request was made
    return True


def watch_parent(
    on_gone: Callable[[], Any], parent_pid: int | None = None, interval: float = 0.5
) -> threading.Thread:
    """Start a daemon thread that calls ``on_gone()`` once the parent process has ended.

    The parent is ``parent_pid`` (default: the current parent); it is gone when this process's
    parent pid is no longer that pid (the orphan was re-parented to init or a subreaper).
    """
    expected = os.getppid() if parent_pid is None else int(parent_pid)

    def watch() -> None:
        while os.getppid() == expected:
            time.sleep(interval)
        log.warning("parent process %d is gone; stopping", expected)
        on_gone()

    thread = threading.Thread(target=watch, name="graphssl-parent-watch", daemon=True)
    thread.start()
    return thread


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not ended (a zombie waiting to be reaped has)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in (b"Z", b"X")


def end_processes(processes: Iterable[Any], grace: float = 10.0) -> None:
    """Send SIGTERM to ``processes`` (objects with a ``pid``: ``multiprocessing`` processes,
    ``subprocess.Popen``), wait up to ``grace`` seconds for them to end, then SIGKILL the rest.

    SIGTERM first lets a worker that handles it (a training job ends its run ``KILLED``)
    close what it holds; SIGKILL bounds the wait. Liveness is read from the pid, not from the
    objects, because the pool that owns them may be reaping them in another thread.
    """
    pids = [int(p.pid) for p in processes if getattr(p, "pid", None)]
    _signal_all(pids, signal.SIGTERM)
    if _wait_all(pids, grace):
        return
    _signal_all(pids, signal.SIGKILL)
    _wait_all(pids, 30.0)


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        if running(pid):
            with contextlib.suppress(OSError):
                os.kill(pid, sig)


def _wait_all(pids: list[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while any(running(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def descendants(pid: int) -> list[int]:
    """The pids of the processes below ``pid`` (children, their children, ...), read from
    ``/proc`` (Linux; [] elsewhere)."""
    parents: dict[int, list[int]] = {}
    try:
        entries = [e.name for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return []
    for name in entries:
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(name))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def end_process_trees(roots: Iterable[int], grace: float = 10.0) -> None:
    """Send SIGTERM to each of ``roots``, wait up to ``grace`` seconds for them and every
    process below them to end, then SIGKILL what is left of those trees.

    For a root that forwards SIGTERM to its own children and waits for them (submitit's local
    job controller), the children get one SIGTERM — a training job ends its run ``KILLED`` after
    its epoch — and the root ends with them. The trees are read before any signal, so a child
    orphaned when its root is killed is still ended.
    """
    roots = [int(r) for r in roots]
    pids = [*roots, *(d for r in roots for d in descendants(r))]
    _signal_all(roots, signal.SIGTERM)
    if _wait_all(pids, grace):
        return
    _signal_all(pids, signal.SIGKILL)
    _wait_all(pids, 30.0)
