"""``trainer.num_nodes``: one rank per task of a SLURM job step, without SLURM.

Two processes get the environment ``srun`` gives the two tasks of a step on two machines
(``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``, ``SLURM_NODEID``, ``SLURM_JOB_NODELIST``,
``SLURM_JOB_ID``), here both on this machine, and each runs the train task with
``trainer.num_nodes=2 trainer.devices=1``. The run must be the one of ``trainer.devices=2`` on
one machine (spawned ranks): the same per-epoch losses and final weights, one MLflow run, and
the extraction shared out across the two tasks. The rendezvous port is derived from the job id,
which is chosen so that the port is free.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from mlflow.tracking import MlflowClient

from graphssl.training.distributed.cluster import PORT_SPAN, port_for_job

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TOL = 1e-6
OVERRIDES = (
    "dataset=sbm",
    "model=grace",
    "encoder=sage",
    "encoder.hidden_channels=16",
    "model.projection_dim=8",
    "trainer.mini_batch=true",
    "trainer.batch_size=32",
    "trainer.epochs=2",
    "trainer.limit_batches=3",
    "trainer.checkpoint_every=1",
    "trainer.progress=false",
    "num_threads=1",
    "eval.figures=false",
    "eval.baseline=false",
    "eval.extraction.mode=mini_batch",
    "logger.log_embeddings=false",
    "logger.log_model=false",
)
#: a train task composed from the command line's overrides, as the ``graphssl`` command does
TASK = (
    "import sys\n"
    "from hydra import compose, initialize_config_dir\n"
    "from graphssl.tasks.train import train\n"
    f"with initialize_config_dir(config_dir={str(ROOT / 'conf')!r}, version_base='1.3'):\n"
    "    cfg = compose(config_name='train', overrides=sys.argv[1:])\n"
    "print('metrics', train(cfg))\n"
)


def _job_with_free_port() -> str:
    """A job id whose rendezvous port (:func:`port_for_job`) is free on this machine."""
    for job in random.Random().sample(range(1, PORT_SPAN), 500):
        with socket.socket() as sock:
            try:
                sock.bind(("", port_for_job(job)))
            except OSError:
                continue
            return str(job)
    raise AssertionError("no free port among 500 job ids")


def _run(outputs: Path) -> Any:
    client = MlflowClient(f"sqlite:///{outputs / 'mlflow.db'}")
    exp = client.get_experiment_by_name("graphssl")
    assert exp is not None
    (run,) = client.search_runs([exp.experiment_id])  # one run for the whole job
    losses = [m.value for m in client.get_metric_history(run.info.run_id, "train/loss")]
    (checkpoint,) = (outputs / "checkpoints").rglob("last.pt")  # rank 0's only
    return run, losses, torch.load(checkpoint, weights_only=True)["model"]


def test_two_slurm_tasks_train_as_two_spawned_processes(
    outputs_dir: Path, tmp_path: Path, _mlflow_template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hydra import compose, initialize_config_dir

    from graphssl.tasks.train import train

    # the reference: trainer.devices=2 on this machine, rank 1 spawned by this process
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    spawned_dir = tmp_path / "spawned"
    spawned_dir.mkdir()
    (spawned_dir / "mlflow.db").write_bytes(_mlflow_template.read_bytes())
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(
            config_name="train",
            overrides=[*OVERRIDES, "trainer.devices=2", f"paths.outputs_dir={spawned_dir}"],
        )
    train(cfg)

    # two tasks of a SLURM step on "two machines", each a train task of its own
    job = _job_with_free_port()
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "SUBMITIT_", "MASTER_", "MLFLOW_TRACKING_URI"))
    }
    base.update(
        PYTHONPATH=str(ROOT),
        OMP_NUM_THREADS="1",
        MLFLOW_DISABLE_TELEMETRY="true",
        SLURM_JOB_ID=job,
        SLURM_STEP_ID="0",
        SLURM_NTASKS="2",
        SLURM_LOCALID="0",
        SLURM_JOB_NODELIST="localhost",
    )
    args = [*OVERRIDES, "trainer.num_nodes=2", "trainer.devices=1"]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", TASK, *args, f"paths.outputs_dir={outputs_dir}"],
            env={**base, "SLURM_PROCID": str(rank), "SLURM_NODEID": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = []
    try:
        for proc in procs:  # the timeout only guards against a hang
            outputs.append(proc.communicate(timeout=300)[0])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    for rank, (proc, out) in enumerate(zip(procs, outputs, strict=True)):
        assert proc.returncode == 0, f"task {rank} failed:\n{out[-4000:]}"
    assert "metrics {}" in outputs[1]  # task 1 trained a rank and logged nothing itself

    run, losses, weights = _run(outputs_dir)  # exactly one run for the two tasks
    ref_run, ref_losses, ref_weights = _run(spawned_dir)
    assert run.info.status == "FINISHED"
    assert run.data.params["trainer.num_nodes"] == "2" and run.data.params["trainer.devices"] == "1"
    assert run.data.metrics["dist/world_size"] == 2.0
    assert run.data.tags["dist/backend"] == "gloo"
    assert run.data.tags["extract/ranks"] == "2"
    assert len(losses) == len(ref_losses) == 2
    assert losses == pytest.approx(ref_losses, abs=TOL, rel=0)
    assert weights.keys() == ref_weights.keys()
    assert max(float((weights[k] - ref_weights[k]).abs().max()) for k in weights) < TOL
    # the probe saw the same embeddings
    probe = [k for k in ref_run.data.metrics if k.startswith("probe/")]
    assert probe and all(
        run.data.metrics[k] == pytest.approx(ref_run.data.metrics[k], abs=1e-4) for k in probe
    )
