"""Faults during one run, with real processes, signals, servers and a filesystem that fills up:

- SIGTERM ends the run ``KILLED`` with its epoch checkpointed, and ``resume=true`` finishes it;
- SIGKILL between two checkpoints, then ``resume=true``: every (metric, step) exactly once;
- the tracking server stopped mid-run: training goes on, the points are sent when it is back;
- the server still down at the end: one paragraph saying what was kept, then ``resume=true``
  sends everything once and finishes the run;
- the disk filling up mid-run (a small tmpfs; skipped where it cannot be mounted).

Each asserts a clear message without a traceback, no run left ``RUNNING``, none ``FINISHED``
that did not complete, and that the next start is not blocked.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from runkit import FAST, all_runs, assert_one_paragraph, last_journal_step, store_client
from runkit import wait_for_run as _wait

from graphssl.tracking.ui import MlflowServer
from graphssl.training.checkpoint import load_checkpoint

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DGI = ("model=dgi", "trainer.patience=null")


def start(cmd: list[str], env: dict[str, str], cwd: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*cmd, *FAST, *DGI, *args],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # the log lines (stdout) and the error (stderr), in order
        text=True,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 600) -> str:
    try:
        return proc.communicate(timeout=timeout)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def run_cli(commands, env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The next start (a resume): the console entry in this process; the process that died
    before it is the one the test killed."""
    return commands.run("graphssl", *FAST, *DGI, *args, env=env, cwd=cwd)


def assert_each_step_once(client, run_id: str, epochs: int) -> None:
    run = client.get_run(run_id)
    for key in run.data.metrics:
        steps = [m.step for m in client.get_metric_history(run_id, key)]
        assert len(steps) == len(set(steps)), f"{key}: a step logged twice ({len(steps)} points)"
    steps = sorted(m.step for m in client.get_metric_history(run_id, "train/loss"))
    assert steps == list(range(epochs)), f"train/loss: {len(steps)} points for {epochs} epochs"


def wait_journal(outputs: Path, chash: str, step: int, proc, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while last_journal_step(outputs, chash) < step:
        assert proc.poll() is None, f"the run ended early:\n{finish(proc)[-3000:]}"
        assert time.monotonic() < deadline, f"epoch {step} not reached in {timeout} s"
        time.sleep(0.1)


# ------------------------------------------------------------------------------ signals
def test_sigterm_ends_the_run_killed_with_its_checkpoint(
    graphssl_cmd, commands, cli_env, outputs_dir, tmp_path
) -> None:
    args = ("trainer.epochs=300", "trainer.checkpoint_every=1000")
    proc = start(graphssl_cmd, cli_env, tmp_path, *args)
    client = store_client(outputs_dir)
    run = _wait(client, proc, "300", journal_step=5, outputs=outputs_dir)
    proc.send_signal(signal.SIGTERM)
    stderr = finish(proc)
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    assert_one_paragraph(stderr)
    assert "SIGTERM" in stderr and "marked KILLED" in stderr, stderr[-2000:]
    killed = client.get_run(run.info.run_id)
    assert killed.info.status == "KILLED"
    chash = killed.data.tags["graphssl.config_hash"]
    state = load_checkpoint(outputs_dir / "checkpoints" / chash / "last.pt", chash)
    logged = client.get_metric_history(run.info.run_id, "train/loss")
    assert int(state["epoch"]) == max(m.step for m in logged), "the last epoch is checkpointed"
    assert int(state["epoch"]) < 299, "stopped before the end"
    # the next start continues it
    res = run_cli(commands, cli_env, tmp_path, *args, "resume=true")
    assert res.returncode == 0, res.stderr[-3000:]
    (done,) = all_runs(client)
    assert done.info.run_id == run.info.run_id and done.info.status == "FINISHED"
    assert_each_step_once(client, run.info.run_id, 300)


def test_sigkill_between_checkpoints_then_resume_logs_each_step_once(
    graphssl_cmd, commands, cli_env, outputs_dir, tmp_path
) -> None:
    """Checkpoints every 75 epochs, points sent every 50, killed after epoch 124: resume
    retrains from the last checkpoint. 1,000 epochs leave the kill far from the end even when
    the test's polling lags behind fast epochs."""
    args = ("trainer.epochs=1000", "trainer.checkpoint_every=75")
    proc = start(graphssl_cmd, cli_env, tmp_path, *args)
    client = store_client(outputs_dir)
    run = _wait(client, proc, "1000", journal_step=124, outputs=outputs_dir)
    proc.send_signal(signal.SIGKILL)
    finish(proc)
    sent = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
    chash = run.data.tags["graphssl.config_hash"]
    state = load_checkpoint(outputs_dir / "checkpoints" / chash / "last.pt", chash)
    # Usually the store holds points past the checkpoint's epoch (resume must not send them
    # twice); on a loaded machine the sender may lag behind a later checkpoint instead (resume
    # must then send the journal's unsent points). Either way every step ends up logged once.
    assert sent and int(state["epoch"]) < 999, "killed between checkpoints, before the end"
    res = run_cli(commands, cli_env, tmp_path, *args, "resume=true")
    assert res.returncode == 0, res.stderr[-3000:]
    (done,) = all_runs(client)
    assert done.info.run_id == run.info.run_id and done.info.status == "FINISHED"
    assert_each_step_once(client, run.info.run_id, 1000)


# ------------------------------------------------------------------------ tracking server
@pytest.fixture
def server(tmp_path, free_port) -> MlflowServer:
    srv = MlflowServer(
        f"sqlite:///{tmp_path / 'server' / 'mlflow.db'}",
        str(tmp_path / "server" / "artifacts"),
        port=free_port(),
        log_path=tmp_path / "server.log",
    )
    (tmp_path / "server").mkdir()
    srv.start(timeout=240)
    yield srv
    srv.stop()


@pytest.fixture
def free_port():
    import socket

    def pick() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    return pick


def restart(srv: MlflowServer) -> None:
    srv.start(timeout=240)


def test_server_stopped_mid_run_loses_nothing(graphssl_cmd, cli_env, tmp_path, server) -> None:
    env = dict(cli_env, MLFLOW_TRACKING_URI=server.url)
    outputs = Path(env["GRAPHSSL_OUTPUTS"])
    proc = start(graphssl_cmd, env, tmp_path, "trainer.epochs=1200", "trainer.checkpoint_every=400")
    client = store_client(server.url)
    run = _wait(client, proc, "1200", journal_step=10, outputs=outputs)
    chash = run.data.tags["graphssl.config_hash"]
    server.stop()
    at_stop = last_journal_step(outputs, chash)
    wait_journal(outputs, chash, at_stop + 100, proc)  # it trains on while the server is away
    restart(server)
    stderr = finish(proc)
    assert proc.returncode == 0, stderr[-3000:]
    assert_one_paragraph(stderr)
    assert "unreachable" in stderr and "reachable again" in stderr, stderr[-3000:]
    done = client.get_run(run.info.run_id)
    assert done.info.status == "FINISHED"
    assert "probe/logreg/val_acc" in done.data.metrics
    assert_each_step_once(client, run.info.run_id, 1200)


def test_server_down_at_the_end_then_resume(
    graphssl_cmd, commands, cli_env, tmp_path, server
) -> None:
    env = dict(cli_env, MLFLOW_TRACKING_URI=server.url)
    outputs = Path(env["GRAPHSSL_OUTPUTS"])
    args = ("trainer.epochs=300", "logger.store_wait_s=3")  # no checkpoint_every
    proc = start(graphssl_cmd, env, tmp_path, *args)
    client = store_client(server.url)
    run = _wait(client, proc, "300", journal_step=10, outputs=outputs)
    server.stop()
    stderr = finish(proc)
    assert proc.returncode == 1, stderr[-3000:]
    assert_one_paragraph(stderr)
    journal = run.data.tags["graphssl.journal"]  # the run's own journal beside its checkpoint
    for part in ("stayed unreachable", "resume=true", journal, "last.pt"):
        assert part in stderr, f"{part!r} not in:\n{stderr[-3000:]}"
    restart(server)
    assert client.get_run(run.info.run_id).info.status != "FINISHED"
    res = run_cli(commands, env, tmp_path, *args, "resume=true")
    assert res.returncode == 0, res.stderr[-3000:]
    done = client.get_run(run.info.run_id)
    assert done.info.status == "FINISHED" and done.data.tags["graphssl.resumed"] == "true"
    assert "probe/logreg/val_acc" in done.data.metrics
    assert_each_step_once(client, run.info.run_id, 300)
    assert [r.info.status for r in all_runs(client)] == ["FINISHED"]


# ----------------------------------------------------------------------------- full disk
@pytest.fixture
def small_disk(tmp_path: Path, _mlflow_template: Path):
    """A 24 MB tmpfs holding the outputs folder (skips where mounting is not permitted)."""
    mnt = tmp_path / "small-disk"
    mnt.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root (mount -t tmpfs); not root here")
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        (mnt / "outputs").mkdir()
        shutil.copyfile(_mlflow_template, mnt / "outputs" / "mlflow.db")
        yield mnt / "outputs"
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(folder: Path) -> Path:
    filler = folder / "filler.bin"
    with open(filler, "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * (1 << 20))
                fh.flush()
        except OSError:
            pass
    return filler


def test_disk_full_mid_run(graphssl_cmd, commands, cli_env, tmp_path, small_disk) -> None:
    env = dict(cli_env, GRAPHSSL_OUTPUTS=str(small_disk))
    args = ("trainer.epochs=400", "trainer.checkpoint_every=20", f"hydra.run.dir={tmp_path}/run")
    proc = start(graphssl_cmd, env, tmp_path, *args)
    client = store_client(small_disk)
    run = _wait(client, proc, "400", journal_step=45, outputs=small_disk)
    filler = fill(small_disk)
    stderr = finish(proc, timeout=300)
    assert proc.returncode == 1, stderr[-3000:]
    assert_one_paragraph(stderr)
    assert "the disk is full" in stderr and "resume=true" in stderr, stderr[-3000:]
    assert str(small_disk / "checkpoints") in stderr, stderr[-3000:]
    filler.unlink()
    status = client.get_run(run.info.run_id).info.status
    assert status in ("FAILED", "RUNNING"), status  # RUNNING: the store itself could not write
    chash = run.data.tags["graphssl.config_hash"]
    assert not (small_disk / "checkpoints" / chash / "last.pt.tmp").exists()
    load_checkpoint(small_disk / "checkpoints" / chash / "last.pt", chash)  # intact
    # with space again, the next start continues (resume) or starts clean; never blocked
    res = run_cli(commands, env, tmp_path, *args, "resume=true")
    assert res.returncode == 0, res.stderr[-3000:]
    statuses = sorted(r.info.status for r in all_runs(client))
    assert "RUNNING" not in statuses and statuses.count("FINISHED") == 1, statuses
