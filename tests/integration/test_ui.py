"""``graphssl-ui``: the MLflow server on the project's store, reachable over HTTP, stopped whole.

The server spawns helper processes that a plain kill leaves orphaned, so the test
checks that after Ctrl-C (SIGINT) no live process of the server's process group remains.
"""

from __future__ import annotations

import json
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
from pathlib import Path

import psutil
import pytest
from mlflow.tracking import MlflowClient

from graphssl.tracking.ui import MlflowServer, ServerStartError


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def live_members(pgid: int) -> list[psutil.Process]:
    """Processes of group ``pgid`` that are not zombies (zombies hold no resources)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    out = []
    for p in psutil.process_iter(["status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (ProcessLookupError, psutil.Error):
            continue
    return out


def read_lines(stream, into: queue.Queue[str]) -> None:
    for line in iter(stream.readline, ""):
        into.put(line)


@pytest.mark.integration
@pytest.mark.slow
def test_ui_serves_the_store_and_stops_its_process_group(outputs_dir: Path, cli_env) -> None:
    MlflowClient(tracking_uri=f"sqlite:///{outputs_dir / 'mlflow.db'}").create_experiment(
        "ui-check"
    )
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "graphssl.tracking.ui",
            "--port",
            str(port),
            "--outputs",
            str(outputs_dir),
        ],
        env=cli_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=read_lines, args=(proc.stdout, lines), daemon=True).start()
    pgid = None
    try:
        deadline = time.monotonic() + 180
        seen = []
        while pgid is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                continue
            seen.append(line)
            m = re.search(r"MLflow UI at (\S+) .*process group (\d+)", line)
            if m:
                assert m.group(1) == f"http://127.0.0.1:{port}"
                pgid = int(m.group(2))
        assert pgid is not None, f"no URL printed; stdout={seen} stderr={proc.stderr}"
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/search",
            data=json.dumps({"max_results": 100}).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            names = {e["name"] for e in json.load(resp)["experiments"]}
        assert "ui-check" in names
        assert live_members(pgid), "the server's process group should be alive while serving"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        deadline = time.monotonic() + 15
        while live_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [(p.pid, p.info.get("status")) for p in live_members(pgid)]
        assert not left, f"processes of the server's group survived SIGINT: {left}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if pgid is not None and live_members(pgid):
            os.killpg(pgid, signal.SIGKILL)


@pytest.mark.slow
def test_server_that_dies_reports_its_log_tail(tmp_path: Path) -> None:
    server = MlflowServer(
        "bogusdb://nowhere",
        str(tmp_path / "art"),
        port=free_port(),
        log_path=tmp_path / "server.log",
    )
    with pytest.raises(ServerStartError, match="exited with code") as info:
        server.start(timeout=120)
    assert str(tmp_path / "server.log") in str(info.value)
    assert "unsupported URI 'bogusdb://nowhere'" in str(info.value)  # from the server's log


def test_server_command_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from graphssl.tracking.ui import backend_store_for, server_command, server_env

    cmd = server_command("sqlite:////o/mlflow.db", "/o/mlartifacts", port=5123)
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"  # loopback unless asked otherwise
    assert cmd[cmd.index("--workers") + 1] == "1"
    assert cmd[cmd.index("--artifacts-destination") + 1] == "/o/mlartifacts"
    env = server_env({"MLFLOW_TRACKING_URI": "http://elsewhere:5000", "PATH": "/bin"})
    assert env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"
    assert "MLFLOW_TRACKING_URI" not in env
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "postgresql+psycopg2://u@db/runs")
    assert backend_store_for(Path("/o")) == "postgresql+psycopg2://u@db/runs"
    assert backend_store_for(Path("/o"), use_env=False) == "sqlite:////o/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")  # a server, not a store
    assert backend_store_for(Path("/o")) == "sqlite:////o/mlflow.db"
    assert MlflowServer("sqlite:///x", "/a", host="0.0.0.0", port=5).url == "http://127.0.0.1:5"
