"""Sweeps on a real SLURM cluster: ``hydra/launcher=submitit_slurm`` against slurmctld + slurmd.

A one-node cluster (``tests/cluster/slurm_up.sh``: munged, slurmctld and slurmd on 127.0.0.1, a
generated ``slurm.conf`` with this machine's cores and memory) is started once for this module
and stopped at its end. Each job is a SLURM array task, ``srun`` runs it in a process of its
own and it logs to the same SQLite store as the launching process (one machine). Needs root and
Debian's ``slurm-wlm`` and ``munge`` packages (``.ci/run`` installs them); skips with the reason
otherwise.

SLURM ends a job that is cancelled or runs out of time with SIGTERM, then SIGKILL ``KillWait``
(5 s here) later. submitit's job wrapper ignores SIGTERM ("Bypassing signal SIGTERM"), but the
train task installs its own SIGTERM handler for the duration of the run (it replaces submitit's
and restores it after): the run finishes its epoch, checkpoints it and ends ``KILLED`` well
within those 5 s. Before the time limit, submitit's own warning signal
(``--signal=USR2@<signal_delay_s>``) ends a job that cannot be requeued with an error, which the
run records as ``FAILED``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from test_launchers import FAST, assert_all_finished, sweep_runs

from graphssl.training.checkpoint import load_checkpoint

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CLUSTER = Path(__file__).resolve().parents[1] / "cluster"
PARTITION = "debug"
# what every job asks SLURM for: one core of the two, 2 GB, ten minutes
SLURM = (
    "hydra/launcher=submitit_slurm",
    f"hydra.launcher.partition={PARTITION}",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.mem_gb=2",
    "hydra.launcher.timeout_min=10",
)


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "a SLURM cluster needs root (slurmd starts jobs as their owner)"
    missing = [
        exe for exe in ("munged", "slurmctld", "slurmd", "sbatch", "srun") if not shutil.which(exe)
    ]
    if missing:
        return (
            f"SLURM/munge not installed ({', '.join(missing)} missing): "
            "apt-get install slurm-wlm munge"
        )
    return None


@pytest.fixture(scope="module")
def slurm_env() -> Iterator[dict[str, str]]:
    """Start the one-node cluster; yields the environment (``SLURM_CONF``, ``PATH``) to use it."""
    pytest.importorskip(
        "hydra_plugins.hydra_submitit_launcher",
        reason="hydra-submitit-launcher not installed (pip install -e '.[submitit]')",
    )
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    root = Path(tempfile.mkdtemp(prefix="graphssl-slurm-"))
    try:
        res = subprocess.run(
            ["bash", str(CLUSTER / "slurm_up.sh"), str(root)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, f"slurm_up.sh failed:\n{res.stdout}\n{res.stderr}"
        env = {
            "SLURM_CONF": str(root / "slurm.conf"),
            "PATH": f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        yield env
    finally:
        subprocess.run(["bash", str(CLUSTER / "slurm_down.sh"), str(root)], timeout=60)
        shutil.rmtree(root, ignore_errors=True)


def slurm(env: dict[str, str], *args: str) -> str:
    res = subprocess.run(
        args, env={**os.environ, **env}, capture_output=True, text=True, timeout=30
    )
    assert res.returncode == 0, f"{' '.join(args)} failed: {res.stderr}"
    return res.stdout


def job_states(env: dict[str, str], array_id: str) -> dict[str, str]:
    """``{"<array>_<task>": state}`` of an array job, from slurmctld (finished ones included)."""
    out = slurm(env, "sacct", "-o", "JobID,State,NodeList", "--parsable2", "-j", array_id)
    rows = [line.split("|") for line in out.splitlines()[1:]]
    return {r[0]: r[1] for r in rows}


def wait_queue_empty(env: dict[str, str], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not slurm(env, "squeue", "-h", "-o", "%i").strip():
            return
        time.sleep(1)
    raise AssertionError(f"SLURM jobs still queued after {timeout} s:\n{slurm(env, 'squeue')}")


def array_id_of(sweep_dir: Path) -> str:
    """The SLURM (array) job id submitit used for a sweep (its ``.submitit/<id>`` folder)."""
    ids = [p.name for p in (sweep_dir / ".submitit").iterdir() if p.name.isdigit()]
    assert len(ids) == 1, f"expected one array job under {sweep_dir}/.submitit, got {ids}"
    return ids[0]


def job_log(outputs: Path, job: str, tail: int = 4000) -> str:
    """The end of a job's stdout and stderr, as submitit keeps them in the sweep folder."""
    text = []
    for path in sorted(outputs.glob(f"multiruns/*/*/.submitit/{job}/*_log.*")):
        text.append(f"--- {path.name}\n{path.read_text(errors='replace')[-tail:]}")
    return "\n".join(text) or f"(no log of job {job} under {outputs})"


def children_by_epochs(children: list) -> dict[str, object]:
    return {r.data.params["trainer.epochs"]: r for r in children}


def test_slurm_sweep_two_by_two(slurm_env, graphssl_cmd, cli_env, outputs_dir, tmp_path) -> None:
    env = {**cli_env, **slurm_env}
    res = subprocess.run(
        [*graphssl_cmd, "-m", *FAST, *SLURM, "model=dgi,grace", "trainer.epochs=2,3"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    client, parent, children = sweep_runs(outputs_dir)
    assert_all_finished(parent, children, 4)
    combos = {
        (r.data.params["model._target_"].rsplit(".", 1)[-1], r.data.params["trainer.epochs"])
        for r in children
    }
    assert combos == {("DGI", "2"), ("DGI", "3"), ("GRACE", "2"), ("GRACE", "3")}
    for child in children:
        epochs = int(child.data.params["trainer.epochs"])
        assert len(client.get_metric_history(child.info.run_id, "train/loss")) == epochs
        assert "probe/logreg/val_acc" in child.data.metrics
        artifacts = {a.path for a in client.list_artifacts(child.info.run_id)}
        assert "config.yaml" in artifacts, artifacts
    # the four jobs were tasks of one SLURM array, each COMPLETED on this node
    sweep_dir = Path(parent.data.tags["graphssl.sweep_dir"])
    array = array_id_of(sweep_dir)
    wait_queue_empty(env)
    assert job_states(env, array) == {f"{array}_{i}": "COMPLETED" for i in range(4)}


def test_slurm_scancel_one_job(slurm_env, graphssl_cmd, cli_env, outputs_dir, tmp_path) -> None:
    """Job 0 trains for ever and is cancelled once it logs; jobs 1 and 2 still finish."""
    env = {**cli_env, **slurm_env}
    proc = subprocess.Popen(
        [
            *graphssl_cmd,
            "-m",
            *FAST,
            *SLURM,
            "model=dgi",
            "trainer.patience=null",
            "trainer.epochs=100000,2,3",
        ],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        client = MlflowClient(tracking_uri=f"sqlite:///{outputs_dir / 'mlflow.db'}")
        run_id = _wait_for_training_run(client, proc, epochs="100000")
        sweep_dir = _sweep_dir(client)
        array = array_id_of(sweep_dir)
        slurm(env, "scancel", f"{array}_0")
        _, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    # Hydra's launcher reports the cancelled job and the sweep exits non-zero
    assert proc.returncode != 0
    assert "CANCELLED" in stderr, stderr[-3000:]
    wait_queue_empty(env)
    states = job_states(env, array)
    assert states[f"{array}_0"] == "CANCELLED"
    assert states[f"{array}_1"] == states[f"{array}_2"] == "COMPLETED"
    _, parent, children = sweep_runs(outputs_dir)
    runs = children_by_epochs(children)
    assert set(runs) == {"100000", "2", "3"}
    assert runs["2"].info.status == runs["3"].info.status == "FINISHED"
    assert parent.info.status == "FAILED"
    cancelled = client.get_run(run_id)
    assert cancelled.info.run_id == runs["100000"].info.run_id
    assert cancelled.info.status == "KILLED", "SLURM's SIGTERM must end the run KILLED"
    assert "SIGTERM" in cancelled.data.tags.get("error", ""), cancelled.data.tags


def test_slurm_timeout_ends_runs_with_checkpoint(
    slurm_env, graphssl_cmd, cli_env, outputs_dir, _mlflow_template, tmp_path
) -> None:
    """Two jobs past their time limit, one sweep each, run side by side on the two cores.

    ``warned`` (submitit's way): ``timeout_min=2``, USR2 ``signal_delay_s=60`` s before the limit
    and no requeue left (``max_num_timeout=0``): the job stops with submitit's "timed-out" error,
    which graphssl records as FAILED. (SLURM checks limits every ~30 s; a delay longer than the
    limit would signal the job before it has created its run.)
    ``hard``: ``timeout_min=1``, ``signal_delay_s=0``, no warning: at the limit SLURM sends
    SIGTERM, then SIGKILL. Both keep the checkpoint of an epoch (``trainer.checkpoint_every=1``).
    """
    outputs = {"warned": outputs_dir, "hard": tmp_path / "outputs-hard"}
    outputs["hard"].mkdir()
    shutil.copyfile(_mlflow_template, outputs["hard"] / "mlflow.db")
    extra = {
        "warned": ("hydra.launcher.timeout_min=2", "hydra.launcher.signal_delay_s=60"),
        "hard": ("hydra.launcher.timeout_min=1", "hydra.launcher.signal_delay_s=0"),
    }
    procs = {}
    for name, out in outputs.items():
        cwd = tmp_path / name
        cwd.mkdir()
        procs[name] = subprocess.Popen(
            [
                *graphssl_cmd,
                "-m",
                *FAST,
                *SLURM,
                *extra[name],
                "model=dgi",
                "trainer.patience=null",
                "trainer.epochs=100000",
                "trainer.checkpoint_every=1",
            ],
            env={**cli_env, **slurm_env, "GRAPHSSL_OUTPUTS": str(out)},
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
    stderr = {}
    try:
        for name, proc in procs.items():
            stderr[name] = proc.communicate(timeout=480)[1]
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    wait_queue_empty(slurm_env)
    runs = {}
    for name, out in outputs.items():
        assert procs[name].returncode != 0, f"{name}: a timed-out job must fail the sweep"
        client, parent, children = sweep_runs(out)
        assert len(children) == 1, f"{name}: no run (the job ended before it created one)"
        assert parent.info.status == "FAILED"
        assert parent.data.tags["children_failed"] == "1"
        # submitit submits a one-job sweep as a plain job, not as an array
        job = array_id_of(Path(parent.data.tags["graphssl.sweep_dir"]))
        states = job_states(slurm_env, job)
        assert len(states) == 1, states
        runs[name] = (client, children[0], next(iter(states.values())), job_log(out, job))
        # the checkpoint of a completed epoch is there and loads
        run = children[0]
        chash = run.data.tags["graphssl.config_hash"]
        ckpt = out / "checkpoints" / chash / "last.pt"
        assert ckpt.is_file(), f"{name}: no checkpoint at {ckpt}"
        epochs = int(load_checkpoint(ckpt, chash)["epoch"]) + 1
        # every checkpointed epoch reached the store — sent by the job, or from its journal by
        # the sweep when SIGKILL came between a checkpoint and the job's next flush
        stored = sorted(m.step for m in client.get_metric_history(run.info.run_id, "train/loss"))
        assert stored[:epochs] == list(range(epochs)), (
            f"{name}: checkpoint of {epochs} epochs, store has {len(stored)} "
            f"(error tag: {run.data.tags.get('error')!r}); sweep stderr: {stderr[name][-2000:]}"
        )
    # warned: the job ended itself before the limit, with the reason on the run; the warning
    # stopped training after an epoch, so the error was raised outside any store call
    _, run, slurm_state, log = runs["warned"]
    assert run.info.status == "FAILED", f"{run.data.tags}\njob log:\n{log}"
    assert "timed-out" in run.data.tags.get("error", ""), f"{run.data.tags}\njob log:\n{log}"
    assert slurm_state == "COMPLETED", f"job log:\n{log}"
    assert "SIGUSR2 received" in log, log
    # hard: SLURM ended it at the limit; the launcher says so, and so must the run
    _, run, slurm_state, _ = runs["hard"]
    assert slurm_state == "TIMEOUT"
    assert "state: TIMEOUT" in stderr["hard"], stderr["hard"][-3000:]
    assert run.info.status == "KILLED", "SLURM's SIGTERM at the limit must end the run KILLED"
    assert "SIGTERM" in run.data.tags.get("error", ""), run.data.tags


def _sweep_dir(client: MlflowClient) -> Path:
    exp = client.get_experiment_by_name("graphssl")
    assert exp is not None
    parents = client.search_runs([exp.experiment_id], "tags.`graphssl.role` = 'sweep'")
    assert len(parents) == 1
    return Path(parents[0].data.tags["graphssl.sweep_dir"])


def _wait_for_training_run(
    client: MlflowClient, proc: subprocess.Popen[str], epochs: str, timeout: float = 240
) -> str:
    """The id of the sweep child with ``trainer.epochs=epochs`` once it has logged an epoch."""
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
                    return str(run.info.run_id)
        time.sleep(1)
    raise AssertionError(f"no run with trainer.epochs={epochs} logged an epoch in {timeout} s")


#: one model on two processes, small enough for two tasks on this machine's two cores
RANKS = (
    "model=grace",
    "encoder=sage",
    "encoder.hidden_channels=16",
    "model.projection_dim=8",
    "trainer.mini_batch=true",
    "trainer.batch_size=32",
    "trainer.epochs=2",
    "trainer.limit_batches=3",
    "trainer.checkpoint_every=1",
    "trainer.devices=2",
    "num_threads=1",
    "eval.baseline=false",
    "eval.extraction.mode=mini_batch",
    "logger.log_model=false",
)


def test_slurm_job_of_two_tasks_trains_one_model_as_two_processes(
    slurm_env, graphssl_cmd, cli_env, outputs_dir, _mlflow_template, tmp_path
) -> None:
    """``hydra/launcher=submitit_slurm_ranks`` asks SLURM for ``trainer.devices`` tasks on
    ``trainer.num_nodes`` machines; each task is one rank (nothing spawned), task 0 holds the
    job's one run, and the result is that of ``trainer.devices=2`` on one process's spawned
    ranks: the same losses and weights."""
    import torch
    from hydra import compose, initialize_config_dir

    from graphssl.tasks.train import train

    env = {**cli_env, **slurm_env}
    launcher = ("hydra/launcher=submitit_slurm_ranks", *SLURM[1:])
    res = subprocess.run(
        [*graphssl_cmd, "-m", *FAST, *launcher, *RANKS, "trainer.num_nodes=1"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    client, parent, children = sweep_runs(outputs_dir)
    sweep_dir = Path(parent.data.tags["graphssl.sweep_dir"])
    job = array_id_of(sweep_dir)
    assert res.returncode == 0, f"{res.stderr[-3000:]}\n{job_log(outputs_dir, job)}"
    assert_all_finished(parent, children, 1)  # one run for the two tasks
    (run,) = children
    assert run.data.metrics["dist/world_size"] == 2.0
    assert run.data.tags["extract/ranks"] == "2"
    log = job_log(outputs_dir, job, tail=100_000)
    assert "training on 2 SLURM tasks" in log, log[-3000:]  # ranks from SLURM, not spawned
    wait_queue_empty(env)
    assert set(job_states(env, job).values()) == {"COMPLETED"}

    # the reference: trainer.devices=2 on this process, rank 1 spawned
    spawned = tmp_path / "spawned"
    spawned.mkdir()
    shutil.copyfile(_mlflow_template, spawned / "mlflow.db")
    with initialize_config_dir(config_dir=str(CLUSTER.parents[1] / "conf"), version_base="1.3"):
        cfg = compose(
            config_name="train", overrides=[*FAST, *RANKS, f"paths.outputs_dir={spawned}"]
        )
    metrics = train(cfg)
    history = [m.value for m in client.get_metric_history(run.info.run_id, "train/loss")]
    reference = MlflowClient(tracking_uri=f"sqlite:///{spawned / 'mlflow.db'}")
    (ref_run,) = reference.search_runs([reference.get_experiment_by_name("graphssl").experiment_id])
    ref_history = [m.value for m in reference.get_metric_history(ref_run.info.run_id, "train/loss")]
    assert len(history) == 2 and history == pytest.approx(ref_history, abs=1e-6, rel=0)
    assert run.data.metrics["train/final_loss"] == pytest.approx(metrics["train/final_loss"])
    (ckpt,) = (outputs_dir / "checkpoints").rglob("last.pt")
    (ref_ckpt,) = (spawned / "checkpoints").rglob("last.pt")
    weights = torch.load(ckpt, weights_only=True)["model"]
    ref_weights = torch.load(ref_ckpt, weights_only=True)["model"]
    assert weights.keys() == ref_weights.keys()
    assert max(float((weights[k] - ref_weights[k]).abs().max()) for k in weights) < 1e-6
