"""A sweep survives the death of one worker: that job's run ends KILLED with every metric point
it had journaled, the others run to the end, and the parent run records the counts (joblib with
two workers, and submitit_local)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
from runkit import FAST, all_runs, store_client, wait_for_run

from graphssl.tracking.buffer import read_journal

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LAUNCHERS = {
    "joblib": (
        "hydra_plugins.hydra_joblib_launcher",
        ("hydra/launcher=joblib", "hydra.launcher.n_jobs=2"),
    ),
    "submitit_local": (
        "hydra_plugins.hydra_submitit_launcher",
        ("hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10"),
    ),
}


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_sigkill_one_worker_of_a_three_job_sweep(
    launcher, graphssl_cmd, cli_env, outputs_dir, tmp_path
) -> None:
    plugin, overrides = LAUNCHERS[launcher]
    pytest.importorskip(plugin, reason=f"{plugin} not installed (pip install -e '.[{launcher}]')")
    proc = subprocess.Popen(
        [
            *graphssl_cmd,
            "-m",
            *FAST,
            *overrides,
            "model=dgi",
            "trainer.patience=null",
            "trainer.epochs=100000,2,3",
        ],
        env=cli_env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    client = store_client(outputs_dir)
    try:
        victim = wait_for_run(client, proc, "100000", journal_step=3, outputs=outputs_dir)
        os.kill(int(victim.data.tags["graphssl.pid"]), signal.SIGKILL)
        _, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0, "a sweep with a dead job must exit non-zero"
    runs = all_runs(client)
    parents = [r for r in runs if r.data.tags.get("graphssl.role") == "sweep"]
    assert len(parents) == 1
    parent = parents[0]
    children = {r.data.params["trainer.epochs"]: r for r in runs if r is not parent}
    assert set(children) == {"100000", "2", "3"}, "every job ran, each once"
    killed = children.pop("100000")
    assert killed.info.run_id == victim.info.run_id
    assert killed.info.status == "KILLED"
    assert "marked KILLED when the sweep ended" in killed.data.tags["error"]
    # every epoch its process journaled reached the store, though SIGKILL left them unsent
    owner, records = read_journal(Path(killed.data.tags["graphssl.journal"]))
    assert owner == killed.info.run_id
    journaled = sorted(r["s"] for r in records if r.get("k") == "train/loss")
    stored = sorted(m.step for m in client.get_metric_history(killed.info.run_id, "train/loss"))
    assert len(journaled) >= 3 and stored == journaled
    assert {c.info.status for c in children.values()} == {"FINISHED"}
    for epochs, child in children.items():
        assert len(client.get_metric_history(child.info.run_id, "train/loss")) == int(epochs)
    assert parent.info.status == "FAILED"
    tags = parent.data.tags
    assert (tags["children_total"], tags["children_finished"], tags["children_failed"]) == (
        "3",
        "2",
        "1",
    )
    assert "job #0" in stderr and ("worker process died" in stderr or "without a result" in stderr)
