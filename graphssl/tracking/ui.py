"""``graphssl-ui``: the MLflow tracking server / UI on the project's store.

Starts ``mlflow server`` on ``<outputs>/mlflow.db`` (or, without ``--outputs``, on
``$MLFLOW_TRACKING_URI`` when that names a database) with artifacts proxied to
``<outputs>/mlartifacts``, waits until its ``/health`` endpoint answers, prints the URL and stops
the whole server when interrupted.

Two measured pitfalls shape this module: the server takes ~14 s to become healthy
with ``--workers 1`` and ``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false`` (37 s with defaults), and it
spawns helper processes that a plain ``kill`` of the parent leaves orphaned. The server therefore
runs in its own process group (``start_new_session=True``) and is stopped by signalling the group.

Example::

    graphssl-ui                          # http://127.0.0.1:5000, store outputs/mlflow.db
    graphssl-ui --port 5001 --outputs /data/graphssl-outputs
    graphssl-ui --host 0.0.0.0           # reachable from other machines: explicit on purpose
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import FrameType, TracebackType

from graphssl.tracking.mlflow_serve import describe_exit

#: seconds to wait for ``/health`` before giving up (a fresh PostgreSQL store migrates first).
DEFAULT_START_TIMEOUT = 180.0
#: seconds between SIGTERM to the server's process group and SIGKILL.
STOP_GRACE = 10.0


class ServerStartError(RuntimeError):
    """``mlflow server`` exited or did not become healthy in time."""


class PortInUseError(ServerStartError):
    """Another process listens on the port the server was asked to use."""


def _listeners(port: int) -> dict[int, str]:
    """``{pid: command line}`` of processes listening on TCP ``port`` (empty when unknown)."""
    try:
        import psutil

        conns = psutil.net_connections(kind="inet")
    except Exception:  # psutil missing, or not allowed to list other users' sockets
        return {}
    out: dict[int, str] = {}
    for c in conns:
        if c.status == "LISTEN" and c.laddr and c.laddr.port == port and c.pid:
            try:
                words = " ".join(psutil.Process(c.pid).cmdline()).split()  # one line
                out[c.pid] = " ".join(words)[:160]
            except psutil.Error:
                out[c.pid] = "?"
    return out


def _holders(port: int, exclude: set[int] | frozenset[int] = frozenset()) -> str:
    found = {pid: cmd for pid, cmd in _listeners(port).items() if pid not in exclude}
    return "; ".join(f"pid {pid} ({cmd})" for pid, cmd in sorted(found.items()))


def port_in_use(host: str, port: int) -> str | None:
    """``None`` when ``host:port`` can be bound now, else who holds it (``"another process"``
    when the holder cannot be found)."""
    import errno
    import socket

    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return None  # an unknown host is the server's error to report
    for family, kind, proto, _, addr in infos[:1]:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server does
            try:
                s.bind(addr)
            except OSError as err:
                if err.errno == errno.EADDRINUSE:
                    return _holders(port) or "another process"
    return None


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no server log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty server log)"


def server_command(
    backend_store_uri: str,
    artifacts_destination: str,
    host: str = "127.0.0.1",
    port: int = 5000,
) -> list[str]:
    """The ``mlflow server`` command line (one worker, proxied artifacts)."""
    return [
        sys.executable,
        "-m",
        "graphssl.tracking.mlflow_serve",  # ``mlflow server`` that ends as its server ended
        "--host",
        host,
        "--port",
        str(port),
        "--backend-store-uri",
        backend_store_uri,
        "--artifacts-destination",
        artifacts_destination,
        "--workers",
        "1",
    ]


def server_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for the server: job execution off (14 s vs 37 s start), telemetry off."""
    env = dict(os.environ if base is None else base)
    env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
    # the server stops itself once this process is gone (see graphssl.tracking.mlflow_serve)
    env["GRAPHSSL_SERVER_PARENT_PID"] = str(os.getpid())
    if env.get("GRAPHSSL_MLFLOW_TELEMETRY", "") != "1":
        env.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        env.setdefault("DO_NOT_TRACK", "true")
    # the server is the store; a client-side tracking URI in its environment means nothing
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


class MlflowServer:
    """A running ``mlflow server`` in its own process group.

    Args:
        backend_store_uri: database of runs (``sqlite:///...`` or ``postgresql://...``).
        artifacts_destination: where proxied artifacts are stored (a path or URI).
        host: interface to bind (default: ``127.0.0.1``, this machine only).
        port: TCP port (default: ``5000``).
        log_path: file receiving the server's stdout and stderr (default:
            ``<tmp>/graphssl-mlflow-server-<port>.log``).
        env: environment of the server (default: this process's, see :func:`server_env`).
    """

    def __init__(
        self,
        backend_store_uri: str,
        artifacts_destination: str,
        host: str = "127.0.0.1",
        port: int = 5000,
        log_path: str | os.PathLike[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.backend_store_uri = backend_store_uri
        self.artifacts_destination = artifacts_destination
        self.host = host
        self.port = int(port)
        if log_path is None:  # created (appended to) only when the server starts
            log_path = Path(tempfile.gettempdir()) / f"graphssl-mlflow-server-{int(port)}.log"
        self.log_path = Path(log_path)
        self.env = server_env(env)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Base URL of the server (``localhost`` form for a wildcard bind)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "", "::") else self.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}"

    @property
    def pgid(self) -> int:
        """Process group of the server and its helpers (equal to the server's pid)."""
        if self.proc is None:
            raise RuntimeError("the MLflow server was not started")
        return self.proc.pid

    def start(self, timeout: float = DEFAULT_START_TIMEOUT) -> MlflowServer:
        """Launch the server and block until ``/health`` answers ``OK``.

        Raises:
            ServerStartError: the server exited, or was not healthy after ``timeout`` seconds
                (it is stopped first); the message carries the tail of its log.
        """
        holder = port_in_use(self.host, self.port)
        if holder is not None:
            raise PortInUseError(
                f"port {self.port} on {self.host} is already in use by {holder}; expected a "
                f"free port — stop that server, or choose another port (--port)"
            )
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        cmd = server_command(
            self.backend_store_uri, self.artifacts_destination, self.host, self.port
        )
        with open(self.log_path, "ab") as log_file:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while True:
            code = self.proc.poll()
            if code is not None:
                self.stop()
                raise ServerStartError(
                    f"mlflow server {describe_exit(code)} before answering {self.url}/health "
                    f"(store {self.backend_store_uri!r}, port {self.port}); last lines of "
                    f"{self.log_path}:\n{_tail(self.log_path)}"
                )
            if self.healthy():
                self._check_port_is_ours()
                return self
            if time.monotonic() > deadline:
                self.stop()
                raise ServerStartError(
                    f"mlflow server did not answer {self.url}/health within {timeout:.0f} s "
                    f"(store {self.backend_store_uri!r}); expected it healthy in ~15 s — last "
                    f"lines of {self.log_path}:\n{_tail(self.log_path)}"
                )
            time.sleep(0.5)

    def _check_port_is_ours(self) -> None:
        """Raise when the process answering ``/health`` is not one of this server's group
        (another server took the port first); silent when the listener cannot be found."""
        listeners = _listeners(self.port)
        ours = set(_group_pids(self.pgid))
        if listeners and not ours & set(listeners):
            self.stop()
            raise PortInUseError(
                f"another server answers {self.url}/health: port {self.port} is held by "
                f"{_holders(self.port, exclude=ours)}, not by the mlflow server started here "
                f"(pid {self.pgid}); expected a free port — stop that server, or choose another "
                f"port (--port)"
            )

    def healthy(self) -> bool:
        """Whether ``GET /health`` answers ``OK`` now."""
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def stop(self, grace: float = STOP_GRACE) -> None:
        """SIGTERM the server's process group, SIGKILL it after ``grace`` s; idempotent."""
        if self.proc is None:
            return
        pgid = self.proc.pid
        _signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and _group_alive(pgid, self.proc):
            time.sleep(0.1)
        if _group_alive(pgid, self.proc):
            _signal_group(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):  # SIGKILL cannot be ignored
            self.proc.wait(timeout=grace)

    def __enter__(self) -> MlflowServer:
        return self if self.proc is not None else self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _group_pids(pgid: int) -> list[int]:
    """Pids of the live processes of group ``pgid`` (empty when psutil is missing)."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil ships with mlflow
        return []
    out = []
    for p in psutil.process_iter(["status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return out


def _group_alive(pgid: int, leader: subprocess.Popen[bytes]) -> bool:
    """Whether any process of group ``pgid`` is still alive (reaping the leader if it ended)."""
    leader.poll()
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil ships with mlflow
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for p in psutil.process_iter(["status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


def default_outputs() -> Path:
    """``$GRAPHSSL_OUTPUTS`` or ``./outputs`` (the same default as ``conf/paths``)."""
    return Path(os.environ.get("GRAPHSSL_OUTPUTS", "outputs")).absolute()


def backend_store_for(outputs: Path, use_env: bool = True) -> str:
    """``$MLFLOW_TRACKING_URI`` when ``use_env`` and it names a database (``sqlite:``,
    ``postgresql:``, ...), else ``<outputs>/mlflow.db``."""
    env_uri = os.environ.get("MLFLOW_TRACKING_URI", "") if use_env else ""
    if "://" in env_uri and not env_uri.startswith(("http://", "https://", "file:")):
        return env_uri
    return f"sqlite:///{outputs / 'mlflow.db'}"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="graphssl-ui",
        description="Serve the MLflow UI / tracking server on the graphssl store "
        "(<outputs>/mlflow.db, artifacts in <outputs>/mlartifacts).",
    )
    p.add_argument("--port", type=int, default=5000, help="TCP port (default: 5000)")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface to bind (default: 127.0.0.1; binding to another interface, "
        "e.g. 0.0.0.0, exposes the runs to the network and must be explicit)",
    )
    p.add_argument(
        "--outputs",
        type=Path,
        default=None,
        help="graphssl outputs folder (default: $GRAPHSSL_OUTPUTS or ./outputs)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_START_TIMEOUT,
        help=f"seconds to wait for the server (default: {DEFAULT_START_TIMEOUT:.0f})",
    )
    return p


class _Stop(Exception):
    pass


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signum)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``graphssl-ui``; returns the exit status."""
    args = _parser().parse_args(argv)
    if not 0 < args.port < 65536:
        print(f"graphssl-ui: --port must be in 1..65535, got {args.port}", file=sys.stderr)
        return 2
    outputs = (args.outputs or default_outputs()).absolute()
    outputs.mkdir(parents=True, exist_ok=True)
    # an explicit --outputs means that folder's store, whatever MLFLOW_TRACKING_URI says
    store = backend_store_for(outputs, use_env=args.outputs is None)
    server = MlflowServer(
        store,
        str(outputs / "mlartifacts"),
        host=args.host,
        port=args.port,
        log_path=outputs / "mlflow-server.log",
    )
    previous = {s: signal.signal(s, _raise_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        print(
            f"graphssl-ui: starting mlflow server on {store} (log: {server.log_path}) ...",
            flush=True,
        )
        try:
            server.start(timeout=args.timeout)
        except ServerStartError as err:
            print(f"graphssl-ui: {err}", file=sys.stderr)
            return 1
        print(
            f"graphssl-ui: MLflow UI at {server.url}  (server process group {server.pgid}; "
            f"Ctrl-C stops it)",
            flush=True,
        )
        if args.host not in ("127.0.0.1", "localhost", "::1"):
            print(
                f"graphssl-ui: warning: bound to {args.host}; anyone who can reach this "
                f"machine can read and write the runs",
                file=sys.stderr,
                flush=True,
            )
        assert server.proc is not None
        code = server.proc.wait()
        print(
            f"graphssl-ui: the mlflow server (process group {server.pgid}) stopped without "
            f"being asked to: it {describe_exit(code)}; last lines of "
            f"{server.log_path}:\n{_tail(server.log_path)}",
            file=sys.stderr,
        )
        return 1
    except (_Stop, KeyboardInterrupt):
        print("graphssl-ui: stopping the MLflow server ...", flush=True)
        return 0
    finally:
        # ignore further Ctrl-C while the group shuts down, so nothing is left behind
        for s in previous:
            signal.signal(s, signal.SIG_IGN)
        server.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)


if __name__ == "__main__":
    sys.exit(main())
