"""``python -m graphssl.tracking.mlflow_serve ARGS``: ``mlflow server ARGS`` that ends as its
server process ended.

``mlflow server`` starts the HTTP server (uvicorn) as a child process, waits for it and exits
with code 0 whatever became of it, so a server killed by a signal looks like a clean exit to
whoever started it. This wrapper runs the same command in-process, notes the child MLflow
starts, and when the command returns ends the same way as that child: with its exit code, or
killed by the same signal (after one line on stderr naming the pid and the signal).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from typing import Any


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
    exec_cmd = getattr(mlflow_server, "_exec_cmd", None)
    if callable(exec_cmd):

        def _noting_exec_cmd(*args: Any, **kwargs: Any) -> Any:
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


if __name__ == "__main__":
    sys.exit(main())
