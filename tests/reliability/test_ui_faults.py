"""Faults of ``graphssl-ui``: a port another server holds, and a server child that dies.

A busy port is refused before any MLflow server starts, naming the port and the process that
holds it, never reported as success because the other server answers ``/health``. A server
killed under ``graphssl-ui`` is reported with its real signal, and nothing of its process group
is left behind.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from graphssl.tracking import ui
from graphssl.tracking.ui import MlflowServer, PortInUseError

# a server answering 200 on every path, /health included (what misled graphssl-ui before)
HEALTHY_SERVER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"OK")
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


@pytest.fixture
def other_server() -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """Another HTTP server on a free 127.0.0.1 port that answers ``/health``."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", HEALTHY_SERVER, str(port)])
    try:
        deadline = time.monotonic() + 60
        while not answers(port):
            assert proc.poll() is None and time.monotonic() < deadline, "helper server died"
            time.sleep(0.1)
        yield proc, port
    finally:
        proc.kill()
        proc.wait()


def ui_cmd(port: int, outputs: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "graphssl.tracking.ui",
        "--port",
        str(port),
        "--outputs",
        str(outputs),
    ]


def live_members(pgid: int) -> list[int]:
    out = []
    for p in psutil.process_iter(["status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return out


@pytest.mark.integration
@pytest.mark.slow
def test_ui_refuses_a_port_another_server_holds(other_server, outputs_dir, cli_env) -> None:
    holder, port = other_server
    res = subprocess.run(
        ui_cmd(port, outputs_dir), env=cli_env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 1
    assert "MLflow UI at" not in res.stdout, "a busy port must never be reported as served"
    (msg,) = [ln for ln in res.stderr.splitlines() if ln.startswith("graphssl-ui:")]
    assert f"port {port} on 127.0.0.1 is already in use by pid {holder.pid}" in msg, msg
    assert "--port" in msg
    assert not (outputs_dir / "mlflow-server.log").exists(), "no MLflow server may be started"
    assert holder.poll() is None and answers(port), "the other server must be left alone"


@pytest.mark.slow
def test_server_that_lost_the_port_race_is_not_reported_healthy(
    other_server, tmp_path, monkeypatch
) -> None:
    holder, port = other_server
    # the port looked free when checked; the server started here never gets to bind it
    monkeypatch.setattr(ui, "port_in_use", lambda host, port: None)
    monkeypatch.setattr(
        ui, "server_command", lambda *a, **k: [sys.executable, "-c", "import time; time.sleep(60)"]
    )
    server = MlflowServer("sqlite:///x.db", str(tmp_path), port=port, log_path=tmp_path / "log")
    with pytest.raises(PortInUseError) as info:
        server.start(timeout=60)
    msg = str(info.value)
    assert f"port {port} is held by pid {holder.pid}" in msg and "not by the mlflow server" in msg
    assert server.proc is not None and server.proc.poll() is not None, "ours must be stopped"


def read_lines(stream, into: queue.Queue[str]) -> None:
    for line in iter(stream.readline, ""):
        into.put(line)


@pytest.mark.integration
@pytest.mark.slow
def test_ui_reports_the_signal_that_killed_its_server(other_server, outputs_dir, cli_env) -> None:
    holder, port = other_server
    refused = subprocess.run(
        ui_cmd(port, outputs_dir), env=cli_env, capture_output=True, text=True, timeout=120
    )
    assert refused.returncode == 1
    holder.kill()
    holder.wait()
    # the port is free again: the next start is not blocked by the refusal
    proc = subprocess.Popen(
        ui_cmd(port, outputs_dir),
        env=cli_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out: queue.Queue[str] = queue.Queue()
    threading.Thread(target=read_lines, args=(proc.stdout, out), daemon=True).start()
    pgid = None
    try:
        deadline = time.monotonic() + 300
        while pgid is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                m = re.search(r"MLflow UI at \S+ .*process group (\d+)", out.get(timeout=1))
            except queue.Empty:
                continue
            pgid = int(m.group(1)) if m else None
        assert pgid is not None, f"graphssl-ui did not start: {proc.poll()}"
        children = psutil.Process(pgid).children()
        (server,) = [c for c in children if "uvicorn" in " ".join(c.cmdline())]
        server.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 1
        assert "stopped without being asked to: it was killed by signal SIGKILL (9)" in err, err
        assert f"the mlflow server process (pid {server.pid}) was killed by signal SIGKILL" in err
        assert "exited with code 0" not in err
        deadline = time.monotonic() + 30
        while live_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not live_members(pgid), "processes of the server's group survived"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if pgid is not None and live_members(pgid):
            os.killpg(pgid, signal.SIGKILL)


@pytest.mark.slow
def test_ui_killed_takes_its_server_along(outputs_dir, cli_env) -> None:
    """SIGKILL to ``graphssl-ui`` runs no cleanup; the server (wrapper and uvicorn) notices its
    parent is gone and stops, so the port is free again."""
    port = free_port()
    proc = subprocess.Popen(
        ui_cmd(port, outputs_dir),
        env=cli_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    out: queue.Queue[str] = queue.Queue()
    threading.Thread(target=read_lines, args=(proc.stdout, out), daemon=True).start()
    pgid = None
    try:
        deadline = time.monotonic() + 300  # hang guard: the server starts in ~15 s
        while pgid is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                m = re.search(r"MLflow UI at \S+ .*process group (\d+)", out.get(timeout=1))
            except queue.Empty:
                continue
            pgid = int(m.group(1)) if m else None
        assert pgid is not None, f"graphssl-ui did not start: {proc.poll()}"
        members = live_members(pgid)
        assert len(members) >= 2 and answers(port), "the wrapper and its uvicorn serve the port"
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 120  # hang guard
        while (live_members(pgid) or answers(port)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not live_members(pgid), "the server outlived graphssl-ui"
        assert not answers(port), f"port {port} is still served"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if pgid is not None and live_members(pgid):
            os.killpg(pgid, signal.SIGKILL)
