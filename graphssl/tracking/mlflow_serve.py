"""``python -m graphssl.tracking.mlflow_serve ARGS``: ``mlflow server ARGS`` that ends as its
server process ended.

``mlflow server`` starts the HTTP server (uvicorn) as a child process, waits for it and exits
with code 0 whatever became of it, so a server killed by a signal looks like a clean exit to
whoever started it. This wrapper runs the same command in-process, notes the child MLflow
starts, and when the command returns ends the same way as that child: with its exit code, or
killed by the same signal (after one line on stderr naming the pid and the signal).

The server must not outlive whoever started it (``graphssl-ui``, even when that is killed with
SIGKILL and runs no cleanup): the HTTP server child is started with a parent-death signal
(SIGTERM once this wrapper ends, :func:`graphssl.processes.die_with_parent`), and a watchdog
thread here stops that child, then this whole process group, once its parent process is
gone (``GRAPHSSL_SERVER_PARENT_PID`` names the starting process, so that one gone before
this wrapper started is noticed too).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from graphssl.processes import die_with_parent, end_processes, running, watch_parent

#: environment variable naming the pid of the process the server must not outlive
PARENT_ENV = "GRAPHSSL_SERVER_PARENT_PID"


def describe_exit(code: int) -> str:
    """``"exited with code N"``, or ``"was killed by signal SIGKILL (9)"`` for ``code < 0``."""
    if code >= 0:
        return f"exited with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"was killed by signal {name} ({-code})"


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``mlflow server`` with ``argv``; returns its server child's exit code."""
    import mlflow.server as mlflow_server
    from mlflow.cli import cli

    started: list[subprocess.Popen[Any]] = []
    parent = os.environ.get(PARENT_ENV, "")
    if parent.isdigit() and int(parent) != os.getppid() and not running(int(parent)):
        watch_parent(lambda: _stop_group(started), parent_pid=int(parent))  # gone already
    else:  # the process that started this one (another process between them is watched)
        watch_parent(lambda: _stop_group(started))
    exec_cmd = getattr(mlflow_server, "_exec_cmd", None)
    if callable(exec_cmd):
        here = os.getpid()

        def _noting_exec_cmd(*args: Any, **kwargs: Any) -> Any:
            # the HTTP server (uvicorn) gets SIGTERM when this wrapper ends
            kwargs.setdefault("preexec_fn", lambda: die_with_parent(signal.SIGTERM, here))
            proc = exec_cmd(*args, **kwargs)
            if isinstance(proc, subprocess.Popen):
                started.append(proc)
            return proc

        mlflow_server._exec_cmd = _noting_exec_cmd  # type: ignore[attr-defined]
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        cli.main(args=["server", *args], prog_name="mlflow server", standalone_mode=True)
        code: object = 0
    except SystemExit as done:
        code = done.code
    if (isinstance(code, int) and code != 0) or not started or started[-1].returncode is None:
        return code if isinstance(code, int) else (0 if code is None else 1)
    child = started[-1]
    rc = int(child.returncode)
    if rc != 0:
        print(
            f"graphssl: the mlflow server process (pid {child.pid}) {describe_exit(rc)}",
            file=sys.stderr,
            flush=True,
        )
    if rc < 0:  # end by the same signal, so the parent sees what happened
        with contextlib.suppress(OSError, ValueError):  # SIGKILL has no handler to reset
            signal.signal(-rc, signal.SIG_DFL)
        os.kill(os.getpid(), -rc)
    return rc


def _stop_group(started: list[subprocess.Popen[Any]]) -> None:
    """The starting process is gone: stop the HTTP server (SIGTERM, SIGKILL after 10 s),
    then everything left in this process group, this wrapper included."""
    end_processes(started, grace=10.0)
    time.sleep(0.2)
    with contextlib.suppress(OSError):
        os.killpg(os.getpgrp(), signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main())
