"""The CLI end to end: help, a real run (and Hydra's ``--experimental-rerun`` of it) and a 2×2
multirun in subprocesses (the CLI smoke tests); a user error without a traceback and the default
run without a data folder through the console entry in-process (the ``commands`` fixture);
typos, missing data and model selection with the train task in-process (the ``tasks``
fixture)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient


def run_cli(
    cmd: list[str], env: dict[str, str], *args: str, timeout: int = 600, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*cmd, *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd
    )


def client_for(outputs: Path) -> MlflowClient:
    return MlflowClient(tracking_uri=f"sqlite:///{outputs / 'mlflow.db'}")


def all_runs(outputs: Path, order_by: list[str] | None = None):
    client = client_for(outputs)
    exp = client.get_experiment_by_name("graphssl")
    assert exp is not None, "the experiment 'graphssl' was not created"
    return client, client.search_runs([exp.experiment_id], max_results=1000, order_by=order_by)


def measured(run) -> dict[str, float]:
    """A run's metrics less the measurements of the machine (timings, memory)."""
    return {
        k: v
        for k, v in run.data.metrics.items()
        if not k.startswith(("time/", "mem/")) and not k.endswith("_seconds")
    }


@pytest.mark.integration
@pytest.mark.slow
def test_help_lists_config_groups(graphssl_cmd, cli_env) -> None:
    res = run_cli(graphssl_cmd, cli_env, "--help", timeout=120)
    assert res.returncode == 0, res.stderr
    for line in (
        "dataset: ",
        "model: ",
        "encoder: ",
        "trainer: ",
        "eval: ",
        "logger: ",
        "experiment: ",
    ):
        assert line in res.stdout, f"{line!r} missing from --help"
    assert "cora" in res.stdout and "dgi" in res.stdout and "grace" in res.stdout


def test_typo_in_override_lists_options(tasks) -> None:
    from hydra.errors import MissingConfigException

    with pytest.raises(MissingConfigException) as info:
        tasks.compose("train", "model=dgii")
    assert "Could not find 'model/dgii'" in str(info.value)
    assert "Available options in 'model'" in str(info.value)
    assert "grace" in str(info.value)


def test_missing_data_folder_fails_fast(tasks, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("GRAPHSSL_DATA_DIR", str(tmp_path / "nowhere"))
    # the tests run with downloads off (GRAPHSSL_DOWNLOAD=false), so the run fails before any
    # request; a download that fails or stalls is tested against a local server in
    # tests/unit/data/test_downloads.py
    with pytest.raises(Exception, match="dataset 'CiteSeer'") as info:
        tasks.train("dataset=citeseer", "trainer.epochs=1")
    text = str(info.value)
    assert type(info.value).__name__ == "DatasetNotFoundError"
    assert str(tmp_path / "nowhere" / "Planetoid") in text
    assert "ind.citeseer.x" in text
    assert "does not download data when downloads are off" in text, text[-2000:]
    # the data is loaded before the run is opened: no run, none FAILED
    assert tasks.runs() == []


@pytest.mark.integration
@pytest.mark.slow
def test_default_run_works_without_a_data_folder(commands, cli_env, tmp_path, outputs_dir) -> None:
    """A fresh clone, offline, no data folder: `make run` (DGI on Cora) trains on the copy of
    Cora packaged with graphssl."""
    env = dict(cli_env, GRAPHSSL_DATA_DIR=str(tmp_path / "nowhere"))
    res = commands.run(
        "graphssl",
        "trainer.epochs=1",
        "eval.figures=false",
        "eval.baseline=false",
        "logger.log_embeddings=false",
        env=env,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    # one warning line (Hydra's console log is stdout)
    assert (res.stdout + res.stderr).count("public split packaged with graphssl") == 1
    _, runs = all_runs(outputs_dir)
    assert [r.info.status for r in runs] == ["FINISHED"]
    assert runs[0].data.metrics["data/num_nodes"] == 2708


@pytest.mark.integration
@pytest.mark.slow
def test_failed_run_is_one_paragraph_and_marked_failed(commands, outputs_dir) -> None:
    """The CLI reports a bad value without a traceback, and the run is marked FAILED."""
    res = commands.run("graphssl", "dataset=sbm", "trainer.epochs=-3")
    assert res.returncode != 0
    assert "trainer.epochs must be >= 0, got -3" in res.stderr
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    _, runs = all_runs(outputs_dir)
    assert [r.info.status for r in runs] == ["FAILED"]


@pytest.mark.integration
@pytest.mark.slow
def test_run_on_cora_logs_everything(graphssl_cmd, cli_env, outputs_dir, data_dir) -> None:
    res = run_cli(graphssl_cmd, cli_env, "trainer.epochs=3")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "probe/logreg/test_acc" in res.stdout  # the summary table
    client, runs = all_runs(outputs_dir)
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    params = run.data.params
    assert params["dataset.name"] == "Cora"
    assert params["model._target_"] == "graphssl.methods.dgi.DGI"
    assert params["trainer.epochs"] == "3"
    history = client.get_metric_history(run.info.run_id, "train/loss")
    assert [m.step for m in history] == [0, 1, 2]
    metrics = run.data.metrics
    for key in (
        "probe/logreg/val_acc",
        "probe/logreg/test_acc",
        "diag/rankme",
        "diag/effective_rank",
        "diag/alpha_req",
        "diag/stable_rank",
    ):
        assert key in metrics, key
    assert 0.0 < metrics["probe/logreg/test_acc"] <= 1.0
    tags = run.data.tags
    assert tags["graphssl.overrides"] == "trainer.epochs=3"
    assert tags["mlflow.note.content"] == "`graphssl trainer.epochs=3`"
    assert tags["version.torch"].startswith("2.14.1")
    assert "git.commit" in tags
    # the chosen weight decay is a configuration value: a tag, not a one-point metric
    assert float(tags["probe/logreg/weight_decay"]) > 0
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", ".hydra", "embeddings.pt", "figures"} <= artifacts
    hydra_files = {a.path for a in client.list_artifacts(run.info.run_id, ".hydra")}
    assert ".hydra/overrides.yaml" in hydra_files

    # Hydra's own rerun of the run folder: the same run again, the same metrics exactly
    pickle = Path(tags["graphssl.output_dir"]) / ".hydra" / "config.pickle"
    res = run_cli(graphssl_cmd, cli_env, "--experimental-rerun", str(pickle))
    assert res.returncode == 0, res.stderr[-3000:]
    _, (first, again) = all_runs(outputs_dir, order_by=["attributes.start_time ASC"])
    assert first.info.run_id == run.info.run_id and again.info.status == "FINISHED"
    assert measured(again) == measured(run)


def test_selection_on_the_validation_probe(tasks, capsys) -> None:
    tasks.train(
        "dataset=sbm",
        "model=grace",
        "trainer.epochs=6",
        "callbacks.selection.every=2",
        "eval.figures=false",
        "logger.log_embeddings=false",
    )
    printed = capsys.readouterr().out
    assert "select/best_epoch" in printed  # the summary table
    client = tasks.client()
    (run,) = tasks.runs()
    assert run.info.status == "FINISHED"
    assert run.data.params["callbacks.selection.every"] == "2"
    history = client.get_metric_history(run.info.run_id, "select/val_acc")
    assert [m.step for m in history] == [1, 3, 5]
    metrics = run.data.metrics
    best = max(history, key=lambda m: m.value)
    assert metrics["select/best_val_acc"] == best.value
    assert metrics["select/best_epoch"] in (2, 4, 6)  # counted from 1, as the Epoch lines
    assert metrics["select/measurements"] == 3
    # the evaluated weights are the selected ones: the final probe sees the same validation score
    assert metrics["probe/logreg/val_acc"] == pytest.approx(best.value)
    # the untrained-encoder baseline, on by default for an SSL method
    for p in ("logreg", "knn"):
        assert metrics[f"probe/{p}/gain"] == pytest.approx(
            metrics[f"probe/{p}/test_acc"] - metrics[f"probe/{p}/baseline_test_acc"]
        )
        assert f"probe/{p}/baseline_val_acc" in metrics
    assert "diag_baseline/rankme" in metrics and "diag_baseline/mean_cosine" in metrics
    assert "probe/logreg/gain" in printed and "probe/logreg/baseline_test_acc" in printed


@pytest.mark.integration
@pytest.mark.slow
def test_multirun_two_by_two(graphssl_cmd, cli_env, outputs_dir, data_dir) -> None:
    res = run_cli(
        graphssl_cmd,
        cli_env,
        "-m",
        "model=dgi,grace",
        "dataset=cora,citeseer",
        "trainer.epochs=2",
        "eval.figures=false",
        "logger.log_embeddings=false",
    )
    assert res.returncode == 0, res.stderr[-3000:]
    client, runs = all_runs(outputs_dir)
    parents = [r for r in runs if r.data.tags.get("graphssl.role") == "sweep"]
    assert len(parents) == 1
    parent = parents[0]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(children) == 4
    assert {r.info.status for r in children} == {"FINISHED"}
    combos = {
        (r.data.params["model._target_"].rsplit(".", 1)[-1], r.data.params["dataset.name"])
        for r in children
    }
    assert combos == {
        ("DGI", "Cora"),
        ("DGI", "CiteSeer"),
        ("GRACE", "Cora"),
        ("GRACE", "CiteSeer"),
    }
    for child in children:
        assert "probe/logreg/test_acc" in child.data.metrics
        assert len(client.get_metric_history(child.info.run_id, "train/loss")) == 2
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["children_total"] == "4"
    assert parent.data.tags["children_failed"] == "0"
