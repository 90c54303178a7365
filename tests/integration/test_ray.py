"""Sweeps on a real Ray cluster: ``hydra/launcher=ray`` against a head started by the test.

The test starts ``ray start --head`` on 127.0.0.1 with 2 CPUs (two jobs at a time) in the
environment of the CLI (the workers, started by Ray's raylet and not by the launching process,
resolve ``GRAPHSSL_OUTPUTS`` there), runs a 4-job sweep through
``hydra.launcher.ray.init.address`` and stops the cluster with ``ray stop --force`` at the end.
Each job is a Ray task in a Ray worker process; all log to the same SQLite store (one machine).

Two overrides are needed with hydra-ray-launcher 1.2.2 and Ray 2.x:

- ``+hydra.launcher.ray.init.object_store_memory=null``: the launcher sets
  ``object_store_memory`` unless the key exists, and ``ray.init`` refuses it when it connects to
  an existing cluster ("When connecting to an existing cluster, object_store_memory must not be
  provided").
- ``+hydra.launcher.ray.remote.max_retries=0``: Ray re-runs a task whose worker died (3 times by
  default), which would start the killed job again as a new run.

Skips when the ``ray`` extra is not installed (``make install EXTRAS=ray``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from test_launchers import FAST, sweep_runs

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RAY_OVERRIDES = (
    "hydra/launcher=ray",
    "+hydra.launcher.ray.init.object_store_memory=null",
    "+hydra.launcher.ray.remote.max_retries=0",
)


@pytest.fixture
def ray_address(cli_env: dict[str, str], free_port: Callable[[], int]) -> Iterator[str]:
    """A local Ray head (127.0.0.1, 2 CPUs) in the CLI's environment; yields its address."""
    pytest.importorskip(
        "hydra_plugins.hydra_ray_launcher",
        reason="hydra-ray-launcher not installed (make install EXTRAS=ray)",
    )
    ray_cli = Path(sys.executable).with_name("ray")
    if not ray_cli.is_file():
        pytest.skip(f"the ray command is not beside {sys.executable} (make install EXTRAS=ray)")
    port = free_port()
    env = {**cli_env, "RAY_USAGE_STATS_ENABLED": "0"}
    # a short temp dir: Ray's unix socket paths must stay under 107 characters
    temp_dir = Path(f"/tmp/graphssl-ray-{os.getpid()}")
    stop = [str(ray_cli), "stop", "--force"]
    try:
        res = subprocess.run(
            [
                str(ray_cli),
                "start",
                "--head",
                "--node-ip-address=127.0.0.1",
                f"--port={port}",
                "--num-cpus=2",
                "--include-dashboard=false",
                "--disable-usage-stats",
                f"--temp-dir={temp_dir}",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert res.returncode == 0, f"ray start failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run(stop, env=env, capture_output=True, timeout=120)
        subprocess.run(["rm", "-rf", str(temp_dir)], timeout=60)


def _wait_for_training_run(
    client: MlflowClient, proc: subprocess.Popen[str], epochs: str, timeout: float = 300
) -> MlflowClient:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the sweep ended early:\n{proc.stderr.read()[-3000:]}")
        exp = client.get_experiment_by_name("graphssl")
        if exp is not None:
            for run in client.search_runs(
                [exp.experiment_id], f"params.`trainer.epochs` = '{epochs}'"
            ):
                if run.info.status == "RUNNING" and client.get_metric_history(
                    run.info.run_id, "train/loss"
                ):
                    return run
        time.sleep(1)
    raise AssertionError(f"no run with trainer.epochs={epochs} logged an epoch in {timeout} s")


def test_ray_sweep_survives_a_killed_worker(
    ray_address, graphssl_cmd, cli_env, outputs_dir, tmp_path
) -> None:
    """Four jobs, two at a time; job 3 trains for ever and its worker process is killed."""
    proc = subprocess.Popen(
        [
            *graphssl_cmd,
            "-m",
            *FAST,
            *RAY_OVERRIDES,
            f"hydra.launcher.ray.init.address={ray_address}",
            "model=dgi",
            "trainer.patience=null",
            "trainer.epochs=2,3,4,100000",
        ],
        env={**cli_env, "RAY_USAGE_STATS_ENABLED": "0"},
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        client = MlflowClient(tracking_uri=f"sqlite:///{outputs_dir / 'mlflow.db'}")
        victim = _wait_for_training_run(client, proc, epochs="100000")
        pid = int(victim.data.tags["graphssl.pid"])
        title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        assert title.startswith("ray::"), f"process {pid} is not a Ray worker: {title!r}"
        os.kill(pid, signal.SIGTERM)
        _, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    # the launcher reports the dead worker and the sweep exits non-zero
    assert proc.returncode != 0
    assert "Worker" in stderr or "worker" in stderr, stderr[-3000:]
    _, parent, children = sweep_runs(outputs_dir)
    runs = {r.data.params["trainer.epochs"]: r for r in children}
    assert set(runs) == {"2", "3", "4", "100000"}, "one run per job, none re-run"
    assert [runs[e].info.status for e in ("2", "3", "4")] == ["FINISHED"] * 3
    for epochs in ("2", "3", "4"):
        history = client.get_metric_history(runs[epochs].info.run_id, "train/loss")
        assert len(history) == int(epochs)
        assert "probe/logreg/val_acc" in runs[epochs].data.metrics
    killed = runs["100000"]
    assert killed.info.run_id == victim.info.run_id
    # SIGTERM ends a run KILLED (graphssl's handler); a worker that dies otherwise ends FAILED
    assert killed.info.status in ("KILLED", "FAILED"), killed.data.tags
    assert parent.info.status == "FAILED"
    assert parent.data.tags["children_finished"] == "3"
    assert parent.data.tags["children_failed"] == "1"
