"""Trained weights in MLflow, and runs that start from them or repeat a run by id.

One run on the SBM graph logs ``model/``; then ``rerun=<id>`` and Hydra's
``--experimental-rerun`` repeat it with the same metrics bit for bit, and ``from_run=<id>`` /
``ckpt_path=<weights.pt>`` with ``trainer.epochs=0`` evaluate its weights, again with the
same probe results; ``load_method(<id>)`` rebuilds the method from the store alone.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ARGS = (
    "dataset=sbm",
    "trainer.epochs=3",
    "eval.figures=false",
    "logger.log_embeddings=false",
)


def run(cmd: list[str], env: dict[str, str], cwd: Path, *args: str) -> None:
    res = subprocess.run(
        [*cmd, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, res.stderr[-3000:]


def runs_by_start(outputs: Path) -> tuple[MlflowClient, list]:
    client = MlflowClient(tracking_uri=f"sqlite:///{outputs / 'mlflow.db'}")
    exp = client.get_experiment_by_name("graphssl")
    assert exp is not None
    found = client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"])
    return client, found


def measured(r) -> dict[str, float]:
    return {
        k: v
        for k, v in r.data.metrics.items()
        if not k.startswith(("time/", "mem/")) and not k.endswith("_seconds")
    }


def test_model_logged_rerun_and_from_run(graphssl_cmd, cli_env, outputs_dir, tmp_path) -> None:
    run(graphssl_cmd, cli_env, tmp_path, *ARGS)
    client, (first,) = runs_by_start(outputs_dir)
    rid = first.info.run_id
    assert first.info.status == "FINISHED"
    # MLflow's conventions: description, user, dataset input; choices as tags, not metrics
    tags = first.data.tags
    assert tags["mlflow.note.content"] == "`graphssl " + " ".join(ARGS) + "`"
    assert tags["mlflow.user"]
    assert "probe/logreg/weight_decay" not in first.data.metrics
    assert float(tags["probe/logreg/weight_decay"]) > 0
    inputs = client.get_run(rid).inputs.dataset_inputs
    assert [d.dataset.name for d in inputs] == ["SBM"]
    assert '"num_nodes"' in inputs[0].dataset.profile
    names = {a.path for a in client.list_artifacts(rid, "model")}
    assert names == {"model/weights.pt", "model/model.yaml", "model/config.yaml"}

    # rerun=<id>: the stored config again, the same metrics exactly
    run(graphssl_cmd, cli_env, tmp_path, f"rerun={rid}")
    # Hydra's own rerun of the first run's folder
    pickle = Path(tags["graphssl.output_dir"]) / ".hydra" / "config.pickle"
    run(graphssl_cmd, cli_env, tmp_path, "--experimental-rerun", str(pickle))
    _, (_, again, hydra_again) = runs_by_start(outputs_dir)
    assert again.data.tags["graphssl.rerun_of"] == rid
    assert again.data.params["trainer.epochs"] == "3"
    assert measured(again) == measured(first)
    assert measured(hydra_again) == measured(first)

    # the weights back by run id, without the dataset
    from graphssl.tracking.models import load_method

    method = load_method(rid, tracking_uri=f"sqlite:///{outputs_dir / 'mlflow.db'}")
    weights = Path(client.download_artifacts(rid, "model/weights.pt", str(tmp_path)))
    state = torch.load(weights, weights_only=True)
    assert state.keys() == method.state_dict().keys()
    assert all(torch.equal(state[k], v) for k, v in method.state_dict().items())

    # evaluate those weights: from_run= and ckpt_path= with no training
    run(graphssl_cmd, cli_env, tmp_path, *ARGS, f"from_run={rid}", "trainer.epochs=0")
    run(graphssl_cmd, cli_env, tmp_path, *ARGS, f"ckpt_path={weights}", "trainer.epochs=0")
    _, found = runs_by_start(outputs_dir)
    for evaluated in found[3:]:
        assert evaluated.info.status == "FINISHED"
        assert "train/epochs" not in evaluated.data.metrics
        for key in ("probe/logreg/test_acc", "probe/knn/test_acc", "diag/rankme"):
            assert evaluated.data.metrics[key] == first.data.metrics[key], key


def test_from_run_of_unknown_run_fails_clearly(graphssl_cmd, cli_env, tmp_path) -> None:
    res = subprocess.run(
        [*graphssl_cmd, *ARGS, "from_run=0123456789abcdef0123456789abcdef"],
        env=cli_env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 1
    assert "from_run='0123456789abcdef0123456789abcdef': no such run" in res.stderr


def test_rerun_refuses_other_overrides(graphssl_cmd, cli_env, tmp_path) -> None:
    res = subprocess.run(
        [*graphssl_cmd, "rerun=0123456789abcdef0123456789abcdef", "trainer.epochs=5"],
        env=cli_env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 1
    assert "runs the stored config unchanged" in res.stderr
