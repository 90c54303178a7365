"""Trained weights in MLflow, and runs that start from them or repeat a run by id.

One run on the SBM graph logs ``model/``; then ``rerun=<id>`` repeats it with the same metrics
bit for bit, and ``from_run=<id>`` / ``ckpt_path=<weights.pt>`` with ``trainer.epochs=0``
evaluate its weights, again with the same probe results; ``load_method(<id>)`` rebuilds the
method from the store alone. These run the train task in-process (the ``tasks`` fixture).
The refusal of ``rerun=`` with other overrides needs a command line: the ``graphssl`` command,
run in this process (the ``commands`` fixture). Hydra's ``--experimental-rerun`` of a run folder
is tested by test_cli's plain run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

ARGS = (
    "dataset=sbm",
    "trainer.epochs=3",
    "eval.figures=false",
    "logger.log_embeddings=false",
)


def measured(r) -> dict[str, float]:
    return {
        k: v
        for k, v in r.data.metrics.items()
        if not k.startswith(("time/", "mem/")) and not k.endswith("_seconds")
    }


def test_model_logged_rerun_and_from_run(tasks, tmp_path) -> None:
    tasks.train(*ARGS)
    client = tasks.client()
    (first,) = tasks.runs()
    rid = first.info.run_id
    assert first.info.status == "FINISHED"
    # MLflow's conventions: user, dataset input; choices as tags, not metrics (the description
    # with the command line is checked by test_cli's plain run)
    tags = first.data.tags
    assert tags["mlflow.note.content"].startswith("`graphssl")
    assert tags["mlflow.user"]
    assert "probe/logreg/weight_decay" not in first.data.metrics
    assert float(tags["probe/logreg/weight_decay"]) > 0
    inputs = client.get_run(rid).inputs.dataset_inputs
    assert [d.dataset.name for d in inputs] == ["SBM"]
    assert '"num_nodes"' in inputs[0].dataset.profile
    names = {a.path for a in client.list_artifacts(rid, "model")}
    assert names == {"model/weights.pt", "model/model.yaml", "model/config.yaml"}

    # rerun=<id>: the stored config again, the same metrics exactly
    tasks.rerun(rid)
    (_, again) = tasks.runs()
    assert again.data.tags["graphssl.rerun_of"] == rid
    assert again.data.params["trainer.epochs"] == "3"
    assert measured(again) == measured(first)

    # the weights back by run id, without the dataset
    from graphssl.tracking.models import load_method

    method = load_method(rid, tracking_uri=f"sqlite:///{tasks.outputs / 'mlflow.db'}")
    weights = Path(client.download_artifacts(rid, "model/weights.pt", str(tmp_path)))
    state = torch.load(weights, weights_only=True)
    assert state.keys() == method.state_dict().keys()
    assert all(torch.equal(state[k], v) for k, v in method.state_dict().items())

    # evaluate those weights: from_run= and ckpt_path= with no training
    tasks.train(*ARGS, f"from_run={rid}", "trainer.epochs=0")
    tasks.train(*ARGS, f"ckpt_path={weights}", "trainer.epochs=0")
    found = tasks.runs()
    assert len(found) == 4
    for evaluated in found[2:]:
        assert evaluated.info.status == "FINISHED"
        assert "train/epochs" not in evaluated.data.metrics
        for key in ("probe/logreg/test_acc", "probe/knn/test_acc", "diag/rankme"):
            assert evaluated.data.metrics[key] == first.data.metrics[key], key


def test_from_run_of_unknown_run_fails_clearly(tasks) -> None:
    with pytest.raises(LookupError) as info:
        tasks.train(*ARGS, "from_run=0123456789abcdef0123456789abcdef")
    assert "from_run='0123456789abcdef0123456789abcdef': no such run" in str(info.value)


@pytest.mark.integration
def test_rerun_refuses_other_overrides(commands) -> None:
    """The overrides of the command line are Hydra's: only the CLI can refuse them."""
    res = commands.run("graphssl", "rerun=0123456789abcdef0123456789abcdef", "trainer.epochs=5")
    assert res.returncode == 1
    assert "runs the stored config unchanged" in res.stderr
