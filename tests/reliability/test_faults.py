"""Faults a sweep must survive: a crashing job, concurrent first use of a fresh store, and
reruns that must reproduce results bit for bit.

The sweeps and the six concurrent starts are ``graphssl`` processes: a sweep whose job failed
leaves Hydra before ``on_multirun_end``, and its parent run is closed FAILED at interpreter exit
(``atexit``), which only a process that exits shows; processes racing for one store are what the
six starts test. The reruns run the train task in-process.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

FAST = [
    "dataset=sbm",
    "encoder.hidden_channels=16",
    "encoder.num_layers=1",
    "eval.figures=false",
    "eval.probes.knn=null",
]


def runs(outputs: Path):
    client = MlflowClient(tracking_uri=f"sqlite:///{outputs / 'mlflow.db'}")
    exp = client.get_experiment_by_name("graphssl")
    return client.search_runs([exp.experiment_id]) if exp else []


def split_sweep(all_runs):
    parents = [r for r in all_runs if r.data.tags.get("graphssl.role") == "sweep"]
    assert len(parents) == 1
    parent = parents[0]
    children = [r for r in all_runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    return parent, children


@pytest.mark.integration
@pytest.mark.slow
def test_crash_in_one_job_keeps_the_sweep_going(graphssl_cmd, cli_env, outputs_dir) -> None:
    res = subprocess.run(
        [*graphssl_cmd, "-m", *FAST, "trainer.epochs=2,-1,3"],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode != 0, "a sweep with a failed job must exit non-zero"
    parent, children = split_sweep(runs(outputs_dir))
    by_epochs = {c.data.params.get("trainer.epochs"): c for c in children}
    assert by_epochs["2"].info.status == "FINISHED"
    assert by_epochs["3"].info.status == "FINISHED", "the job after the crash must still run"
    failed = by_epochs["-1"]
    assert failed.info.status == "FAILED"
    assert "trainer.epochs must be >= 0, got -1" in failed.data.tags["error"]
    assert parent.info.status == "FAILED"
    assert parent.data.tags["children_failed"] == "1"
    assert parent.data.tags["children_finished"] == "2"


@pytest.mark.integration
@pytest.mark.slow
def test_fail_fast_stops_the_sweep(graphssl_cmd, cli_env, outputs_dir) -> None:
    res = subprocess.run(
        [*graphssl_cmd, "-m", *FAST, "fail_fast=true", "trainer.epochs=-1,2,3"],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode != 0
    parent, children = split_sweep(runs(outputs_dir))
    assert [c.info.status for c in children] == ["FAILED"], "no job may start after the failure"
    assert parent.info.status == "FAILED"
    assert parent.data.tags["children_failed"] == "1"


@pytest.mark.integration
@pytest.mark.slow
def test_six_jobs_at_once_on_a_fresh_store(graphssl_cmd, cli_env, tmp_path) -> None:
    outputs = tmp_path / "fresh-outputs"  # no pre-migrated store: they race to create it
    env = dict(cli_env, GRAPHSSL_OUTPUTS=str(outputs))
    procs = [
        subprocess.Popen(
            [*graphssl_cmd, *FAST, "trainer.epochs=2", f"seed={i}"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(6)
    ]
    results = [p.communicate(timeout=900) for p in procs]
    for p, (_, err) in zip(procs, results):
        assert p.returncode == 0, err[-2000:]
    recorded = runs(outputs)
    assert len(recorded) == 6
    assert {r.info.status for r in recorded} == {"FINISHED"}
    assert sorted(int(r.data.params["seed"]) for r in recorded) == list(range(6))


@pytest.mark.parametrize("model", ["grace", "dgi"])
def test_same_config_and_seed_is_bitwise_reproducible(
    tasks, tmp_path, _mlflow_template, monkeypatch, model
) -> None:
    """Two runs of one config and seed, one after the other in one process (so nothing the
    first leaves behind may change the second), each into its own store."""
    found = []
    for i in range(2):
        outputs = tmp_path / f"out{i}"
        outputs.mkdir()
        (outputs / "mlflow.db").write_bytes(_mlflow_template.read_bytes())
        monkeypatch.setenv("GRAPHSSL_OUTPUTS", str(outputs))
        tasks.train(*FAST, f"model={model}", "trainer.epochs=15")
        (run,) = runs(outputs)
        found.append(run)
    a, b = found
    assert a.data.tags["embeddings.sha256"] == b.data.tags["embeddings.sha256"]
    # timings and the process's peak memory are measurements of the machine, not results
    measured = ("time/", "mem/", "train/epoch_seconds")
    keys = [k for k in a.data.metrics if not k.startswith(measured)]
    assert keys
    for k in keys:
        assert a.data.metrics[k] == b.data.metrics[k], k
