"""Stopping a command stops every process it started: SIGTERM (or SIGKILL) to the launcher of a
joblib sweep, to ``graphssl-compare`` with its EMIR workers, and Ctrl-C on a sweep. The runs end
``KILLED``, the sweep parent says what ran, and the terminal gets one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
from runkit import FAST, all_runs, assert_one_paragraph, store_client, wait_for_run

pytestmark = [pytest.mark.integration, pytest.mark.slow]

COMPARE = [sys.executable, "-c", "from graphssl.cli import compare_main; compare_main()"]
JOBLIB = ("hydra/launcher=joblib", "hydra.launcher.n_jobs=2")


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def gone(procs: list[psutil.Process], timeout: float = 120) -> list[psutil.Process]:
    """Those of ``procs`` still running (not zombies) after up to ``timeout`` s (hang guard)."""
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    return [p for p in alive if _running(p)]


def _running(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


# ------------------------------------------------------------------------------ compare
def _embeddings(folder: Path, n: int = 3) -> list[Path]:
    paths = []
    for i in range(n):
        g = torch.Generator().manual_seed(i)
        path = folder / f"e{i}.pt"
        torch.save(
            {"embeddings": torch.randn(600, 16, generator=g), "ids": torch.arange(600)}, path
        )
        paths.append(path)
    return paths


def _start_compare(tmp_path: Path, cli_env: dict[str, str]) -> subprocess.Popen[str]:
    files = ",".join(str(p) for p in _embeddings(tmp_path))
    return subprocess.Popen(
        [
            *COMPARE,
            f"embedding_files=[{files}]",
            "emir.n_jobs=2",
            "emir.n_epochs=100000",  # the workers compute until they are stopped
            "cross_encoder.enabled=false",
            f"output_dir={tmp_path / 'compare'}",
        ],
        env=cli_env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_workers(proc: subprocess.Popen[str], n: int) -> list[psutil.Process]:
    deadline = time.monotonic() + 300  # hang guard
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"compare ended early:\n{proc.communicate()[1][-3000:]}"
        workers = [
            p
            for p in descendants(proc.pid)
            if "multiprocessing" in " ".join(p.cmdline()) and "spawn_main" in " ".join(p.cmdline())
        ]
        if len(workers) >= n:
            return workers
        time.sleep(0.2)
    raise AssertionError("the EMIR workers did not start")


def test_sigterm_to_compare_ends_its_workers_and_its_run(tmp_path, cli_env, outputs_dir) -> None:
    proc = _start_compare(tmp_path, cli_env)
    try:
        workers = _wait_for_workers(proc, 2)
        time.sleep(1)  # the workers are computing their columns
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=300)
    finally:
        stop(proc)
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    assert not gone(workers), "EMIR workers outlived graphssl-compare"
    (run,) = all_runs(store_client(outputs_dir))
    assert run.info.status == "KILLED"
    lines = stderr.strip().splitlines()
    assert lines[-1] == (
        f"graphssl-compare: stopped: SIGTERM received; MLflow run {run.info.run_id} marked KILLED"
    ), stderr[-3000:]
    assert_one_paragraph(stderr)


def test_sigkill_to_compare_ends_its_workers_and_the_next_compare_marks_its_run(
    tmp_path, cli_env, outputs_dir, tasks
) -> None:
    from graphssl.tasks.compare import run_compare

    proc = _start_compare(tmp_path, cli_env)
    try:
        workers = _wait_for_workers(proc, 2)
        proc.kill()
        proc.communicate(timeout=60)
        assert not gone(workers), "EMIR workers outlived graphssl-compare (SIGKILL)"
    finally:
        stop(proc)
    (killed,) = all_runs(store_client(outputs_dir))
    assert killed.info.status == "RUNNING", "nothing closed it: its process was killed"
    # the next compare (in-process, 2 EMIR epochs) marks it KILLED before it opens its own run
    files = ",".join(str(p) for p in _embeddings(tmp_path, 2))
    result = run_compare(
        tasks.compose(
            "compare",
            f"embedding_files=[{files}]",
            "emir.n_jobs=1",
            "emir.n_epochs=2",
            "emir.n_epochs_marg=1",
            "cross_encoder.enabled=false",
            f"output_dir={tmp_path / 'compare2'}",
        )
    )
    client = store_client(outputs_dir)
    old = client.get_run(killed.info.run_id)
    assert old.info.status == "KILLED"
    assert "graphssl-compare process ended without closing the run" in old.data.tags["error"]
    assert client.get_run(result.run_id).info.status == "FINISHED"


# ------------------------------------------------------------------------------ sweeps
def _start_sweep(
    graphssl_cmd: list[str],
    cli_env: dict[str, str],
    cwd: Path,
    *args: str,
    group: bool = False,
    stdout: int = subprocess.DEVNULL,
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*graphssl_cmd, "-m", *FAST, "model=dgi", "trainer.patience=null", *args],
        env=cli_env,
        cwd=cwd,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=group,  # its own process group, as a terminal's foreground job
        # a shell's background job (CI) ignores SIGINT, and the child would inherit that
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _sweep_runs(outputs: Path) -> tuple[list, dict[str, object]]:
    runs = all_runs(store_client(outputs))
    parents = [r for r in runs if r.data.tags.get("graphssl.role") == "sweep"]
    children = {r.data.params["trainer.epochs"]: r for r in runs if r not in parents}
    return parents, children


def _training_workers(
    graphssl_cmd, cli_env, outputs_dir, tmp_path
) -> tuple[subprocess.Popen[str], list[psutil.Process], list]:
    """A 4-job joblib sweep (2 workers) whose two long jobs are both training."""
    pytest.importorskip(
        "hydra_plugins.hydra_joblib_launcher",
        reason="hydra-joblib-launcher is not installed (it comes with the dev extra: make install)",
    )
    proc = _start_sweep(
        graphssl_cmd, cli_env, tmp_path, *JOBLIB, "trainer.epochs=100000,100001,3,4"
    )
    client = store_client(outputs_dir)
    try:
        runs = [
            wait_for_run(client, proc, epochs, journal_step=1, outputs=outputs_dir)
            for epochs in ("100000", "100001")
        ]
    except BaseException:
        stop(proc)
        raise
    pids = {int(r.data.tags["graphssl.pid"]) for r in runs}
    workers = [p for p in descendants(proc.pid) if p.pid in pids]
    assert len(workers) == 2, "each long job trains in a worker of its own"
    return proc, workers, runs


def test_sigterm_to_a_joblib_sweep_ends_its_workers_and_runs(
    graphssl_cmd, cli_env, outputs_dir, tmp_path
) -> None:
    proc, workers, runs = _training_workers(graphssl_cmd, cli_env, outputs_dir, tmp_path)
    try:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=300)
    finally:
        stop(proc)
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    assert not gone(workers), "a worker outlived the launcher"
    (parent,), children = _sweep_runs(outputs_dir)
    assert set(children) == {"100000", "100001"}, "jobs 3-4 are never started"
    assert {c.info.status for c in children.values()} == {"KILLED"}
    assert parent.info.status == "KILLED"
    tags = parent.data.tags
    assert (tags["children_total"], tags["children_finished"], tags["children_killed"]) == (
        "2",
        "0",
        "2",
    )
    assert tags["jobs_not_started"] == "2"
    assert_one_paragraph(stderr)
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("graphssl: interrupted (SIGTERM received); runs "), stderr[-3000:]
    for run in (*runs, parent):
        assert run.info.run_id in last, last
    assert "(2 jobs started, 0 finished, 2 never started)" in last


def test_sigkill_to_a_joblib_sweep_then_a_rerun_marks_its_parent(
    graphssl_cmd, commands, cli_env, outputs_dir, tmp_path
) -> None:
    proc, workers, runs = _training_workers(graphssl_cmd, cli_env, outputs_dir, tmp_path)
    try:
        proc.kill()
        proc.wait(timeout=60)
        assert proc.stderr is not None
        proc.stderr.close()  # the workers inherited it: no reading until they are gone
        # the workers get SIGTERM from the kernel (parent-death signal) and end their runs
        assert not gone(workers, timeout=300), "a worker outlived the killed launcher"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    (old_parent,), children = _sweep_runs(outputs_dir)
    assert old_parent.info.status == "RUNNING", "nothing closed it: its process was killed"
    assert {c.info.status for c in children.values()} <= {"KILLED", "RUNNING"}
    # the next sweep marks the parent (and any child whose worker died first) KILLED
    # (its console entry in this process: the process that died is the one killed above)
    rerun = commands.run("graphssl", "-m", *FAST, "model=dgi", "trainer.epochs=2")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    client = store_client(outputs_dir)
    old = client.get_run(old_parent.info.run_id)
    assert old.info.status == "KILLED"
    assert "launching process ended" in old.data.tags["error"]
    assert (old.data.tags["children_total"], old.data.tags["children_killed"]) == ("2", "2")
    for run in runs:
        assert client.get_run(run.info.run_id).info.status == "KILLED"


def test_ctrl_c_on_a_sweep_is_one_line(graphssl_cmd, cli_env, outputs_dir, tmp_path) -> None:
    """Ctrl-C reaches the whole foreground process group (here: the sweep's own group), and is
    pressed again and again until the command ends: one line, exit 130, no run left RUNNING,
    and the next sweep runs."""
    proc = _start_sweep(
        graphssl_cmd,
        cli_env,
        tmp_path,
        "trainer.epochs=100000,2,3,4,5,6,7,8",
        group=True,
        stdout=subprocess.PIPE,
    )
    try:
        run = wait_for_run(
            store_client(outputs_dir), proc, "100000", journal_step=1, outputs=outputs_dir
        )
        os.killpg(proc.pid, signal.SIGINT)
        presses = _press_ctrl_c_until_it_ends(proc)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        stop(proc)
    assert proc.returncode == 130, stderr[-3000:]
    assert presses >= 1, "the command ended before a second Ctrl-C reached it"
    for text in (stdout, stderr):
        assert "Traceback" not in text, text[-4000:]
    lines = stderr.strip().splitlines()
    assert len(lines) <= 3, stderr[-3000:]  # the interrupted line, no wall of text
    (parent,), children = _sweep_runs(outputs_dir)
    assert set(children) == {"100000"}
    assert children["100000"].info.status == "KILLED"
    assert parent.info.status == "KILLED"
    assert (parent.data.tags["children_total"], parent.data.tags["children_killed"]) == ("1", "1")
    last = lines[-1]
    assert last.startswith(f"graphssl: interrupted (Ctrl-C); run {run.info.run_id} marked KILLED")
    assert f"sweep parent {parent.info.run_id} marked KILLED (1 job started, 0 finished)" in last
    # the store is left consistent: the next sweep runs and leaves the stopped one as it was
    rerun = _start_sweep(graphssl_cmd, cli_env, tmp_path, "trainer.epochs=2,3")
    _, stderr = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, stderr[-3000:]
    runs = all_runs(store_client(outputs_dir))
    assert sorted(r.info.status for r in runs) == ["FINISHED"] * 3 + ["KILLED"] * 2
    assert store_client(outputs_dir).get_run(parent.info.run_id).data.tags == parent.data.tags


def _press_ctrl_c_until_it_ends(proc: subprocess.Popen[str]) -> int:
    """SIGINT to ``proc``'s group every 0.2 s while it runs (a user pressing Ctrl-C again);
    how many were sent."""
    sent = 0
    deadline = time.monotonic() + 300  # hang guard
    while time.monotonic() < deadline:
        try:
            proc.wait(timeout=0.2)
            return sent
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(proc.pid, signal.SIGINT)
        except ProcessLookupError:
            return sent
        sent += 1
    raise AssertionError("the interrupted sweep did not end")


def test_sigterm_to_a_submitit_local_sweep_cancels_its_jobs(
    graphssl_cmd, cli_env, outputs_dir, tmp_path
) -> None:
    """submitit_local runs each job under a controller process of its own; stopping the
    launcher cancels them (SIGTERM through the controller, as ``scancel``), then closes the
    parent run."""
    pytest.importorskip(
        "hydra_plugins.hydra_submitit_launcher",
        reason="hydra-submitit-launcher is not installed (it comes with the dev extra: "
        "make install)",
    )
    proc = _start_sweep(
        graphssl_cmd,
        cli_env,
        tmp_path,
        "hydra/launcher=submitit_local",
        "hydra.launcher.timeout_min=10",
        "trainer.epochs=100000,100001",
    )
    client = store_client(outputs_dir)
    try:
        runs = [
            wait_for_run(client, proc, epochs, journal_step=1, outputs=outputs_dir)
            for epochs in ("100000", "100001")
        ]
        jobs = descendants(proc.pid)  # the controllers and the job processes below them
        pids = {int(r.data.tags["graphssl.pid"]) for r in runs}
        assert pids <= {p.pid for p in jobs}, "each job runs below the launcher"
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=300)
    finally:
        stop(proc)
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    assert not gone(jobs, timeout=60), "a submitit job outlived the stopped launcher"
    (parent,), children = _sweep_runs(outputs_dir)
    assert {c.info.status for c in children.values()} == {"KILLED"}
    assert parent.info.status == "KILLED"
    assert (parent.data.tags["children_total"], parent.data.tags["children_killed"]) == ("2", "2")
    assert_one_paragraph(stderr)
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("graphssl: interrupted (SIGTERM received); runs "), stderr[-3000:]
