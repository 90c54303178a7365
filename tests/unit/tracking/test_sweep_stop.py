"""A stopped sweep's parent run: closed ``KILLED`` with the counts of what ran, its children
left by a dead or stopping process marked ``KILLED``; a parent whose launcher is gone is closed
by the next sweep; the console's one line says what was marked."""

from __future__ import annotations

import socket
import subprocess
import sys

from mlflow.tracking import MlflowClient

from graphssl.tasks._console import interrupted_line
from graphssl.tracking import sweep
from graphssl.tracking.stale import HOST_TAG, PID_TAG, owner_tags


def _dead_pid() -> str:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return str(proc.pid)


def _store(outputs_dir):
    uri = f"sqlite:///{outputs_dir / 'mlflow.db'}"
    client = MlflowClient(uri)
    return uri, client, client.create_experiment("graphssl")


def _child(client, exp, parent, tags, finish=None):
    run = client.create_run(exp, tags={"mlflow.parentRunId": parent, **tags})
    if finish:
        client.set_terminated(run.info.run_id, finish)
    return run.info.run_id


def test_a_stopped_sweep_parent_ends_killed_with_its_counts(outputs_dir) -> None:
    uri, client, exp = _store(outputs_dir)
    parent = client.create_run(exp, tags={"graphssl.role": "sweep"}).info.run_id
    gone = {HOST_TAG: socket.gethostname(), PID_TAG: _dead_pid()}
    done = _child(client, exp, parent, gone, finish="FINISHED")
    dead = _child(client, exp, parent, gone)
    here = _child(client, exp, parent, owner_tags())  # interrupted in this process
    killed: list[str] = []
    counts = sweep.close_parent(
        uri, parent, interrupted="SIGTERM received", killed=killed, tags={"jobs_not_started": "1"}
    )
    assert counts == {
        "children_total": 3,
        "children_finished": 1,
        "children_failed": 2,
        "children_killed": 2,
    }
    assert sorted(killed) == sorted([dead, here])
    assert client.get_run(done).info.status == "FINISHED"
    for rid in (dead, here):
        assert client.get_run(rid).info.status == "KILLED"
    closed = client.get_run(parent)
    assert closed.info.status == "KILLED"
    assert closed.data.tags["jobs_not_started"] == "1"
    assert closed.data.tags["error"] == "the sweep was stopped: SIGTERM received"


def test_the_next_sweep_closes_a_parent_whose_launcher_is_gone(outputs_dir) -> None:
    uri, client, exp = _store(outputs_dir)
    gone = {HOST_TAG: socket.gethostname(), PID_TAG: _dead_pid()}
    orphan = client.create_run(exp, tags={"graphssl.role": "sweep", **gone}).info.run_id
    alive = client.create_run(exp, tags={"graphssl.role": "sweep", **owner_tags()}).info.run_id
    child = _child(client, exp, orphan, gone)
    assert sweep.close_stale_parents(client, uri, exp) == [orphan]
    assert client.get_run(orphan).info.status == "KILLED"
    assert client.get_run(child).info.status == "KILLED"
    assert client.get_run(alive).info.status == "RUNNING", "a live launcher's sweep is left alone"


def test_the_console_line_without_a_sweep() -> None:
    assert interrupted_line(KeyboardInterrupt()) == "interrupted; no run was started"
    err = KeyboardInterrupt()
    err.graphssl_killed_runs = ["abc"]  # type: ignore[attr-defined]
    assert interrupted_line(err) == "interrupted; run abc marked KILLED"


def test_a_second_ctrl_c_while_the_parent_is_closed_is_ignored(monkeypatch) -> None:
    """Ctrl-C pressed again while the console closes the sweep's parent (store calls that
    would raise inside MLflow and print their traceback) changes nothing: the line comes."""
    import os
    import signal
    import time

    def close_slowly(why: str, tags: object = None) -> str:
        os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C, in the middle of the close
        time.sleep(0.05)  # Python runs a pending handler between bytecodes: here
        return "sweep parent p marked KILLED (1 job started, 0 finished)"

    monkeypatch.setattr(sweep, "stop_active_sweep", close_slowly)
    handler = signal.getsignal(signal.SIGINT)
    line = interrupted_line(KeyboardInterrupt())
    assert line == "interrupted (Ctrl-C); sweep parent p marked KILLED (1 job started, 0 finished)"
    assert signal.getsignal(signal.SIGINT) is handler, "Ctrl-C is handled again afterwards"


def test_a_stopped_ray_sweep_cancels_the_tasks_it_submitted(monkeypatch) -> None:
    """hydra-ray-launcher's launch, stopped while it waits: every task not ended is cancelled
    (a KeyboardInterrupt in the task), and one still running after the grace period is
    cancelled with force (its worker killed). Ray itself is replaced by a recorder."""
    import types

    import pytest

    from graphssl.tracking import launchers

    done: set[str] = {"finished"}
    cancelled: list[tuple[str, bool]] = []

    def wait(refs, num_returns=1, timeout=None):
        ready = [r for r in refs if r in done]
        return ready, [r for r in refs if r not in done]

    def cancel(ref, force=False):
        cancelled.append((ref, force))
        if ref == "stops":  # ends on its KeyboardInterrupt
            done.add(ref)

    core = types.ModuleType("hydra_plugins.hydra_ray_launcher._core")
    core.launch_job_on_ray = lambda name: name  # type: ignore[attr-defined]
    package = types.ModuleType("hydra_plugins.hydra_ray_launcher")
    package._core = core  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "hydra_plugins.hydra_ray_launcher", package)
    monkeypatch.setitem(sys.modules, "hydra_plugins.hydra_ray_launcher._core", core)
    ray = types.SimpleNamespace(wait=wait, cancel=cancel)
    monkeypatch.setitem(sys.modules, "ray", ray)

    def original(launcher, job_overrides, initial_job_idx):
        for name in ("finished", "stops", "hangs"):
            core.launch_job_on_ray(name)  # type: ignore[attr-defined]
        raise KeyboardInterrupt  # Ctrl-C while hydra-ray-launcher waits in ray.get

    with pytest.raises(KeyboardInterrupt):
        launchers.ray_launch(original)(None, [], 0)
    assert cancelled == [("stops", False), ("hangs", False), ("hangs", True)]
