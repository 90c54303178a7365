"""What a run logs, pinned: for a few representative configs, the metric keys, params, tags and
artifacts a train run leaves in the store, and the metrics it returns.

``contract/runs.json`` holds the expected sets. A change that adds, drops or renames a logged key
fails here; when the change is meant, regenerate the file with ``GRAPHSSL_UPDATE_CONTRACT=1``
and review the diff. Tags that name this machine's package versions or git state are left out.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from mlflow.tracking import MlflowClient

from graphssl.tasks.train import train

CONF = Path(__file__).resolve().parents[2] / "conf"
CONTRACT = Path(__file__).with_name("contract") / "runs.json"

#: representative configs: node-level with the default evaluation; graph-level; the
#: training-time callbacks; a method without an untrained baseline; an image method with its
#: own classifier
CONFIGS: dict[str, list[str]] = {
    "dgi_cora": ["dataset=cora", "model=dgi", "trainer.epochs=2"],
    "grace_mutag_graph": [
        "experiment=graphcl_mutag",
        "trainer.epochs=1",
        "eval.probes.logreg.max_iter=50",
    ],
    "bgrl_select": [
        "dataset=cora",
        "model=bgrl",
        "trainer.epochs=2",
        "callbacks.selection.every=1",
        "callbacks.monitor.every=1",
        "eval.figures=false",
    ],
    "deepwalk": ["dataset=cora", "model=deepwalk", "trainer.epochs=1"],
    "supervised_digits": [
        "dataset=digits",
        "model=supervised",
        "trainer.epochs=1",
        "eval.probes.logreg.max_iter=50",
    ],
}
#: tags whose presence depends on the machine (installed packages, a git checkout)
_MACHINE_TAGS = ("version.", "mlflow.source.")


def _artifacts(client: MlflowClient, run_id: str, path: str | None = None) -> list[str]:
    out: list[str] = []
    for item in client.list_artifacts(run_id, path):
        out += _artifacts(client, run_id, item.path) if item.is_dir else [item.path]
    return out


def _logged(outputs: Path, data: Path, overrides: list[str]) -> dict[str, Any]:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            config_name="train",
            overrides=[
                *overrides,
                f"paths.outputs_dir={outputs}",
                f"paths.data_dir={data}",
                "logger.experiment_name=contract",
                "trainer.progress=false",
            ],
        )
    returned = train(cfg)
    client = MlflowClient(f"sqlite:///{outputs / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("contract")
    assert experiment is not None
    [run] = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED"
    return {
        "returned": sorted(returned),
        "metrics": sorted(run.data.metrics),
        "params": sorted(run.data.params),
        "tags": sorted(k for k in run.data.tags if not k.startswith(_MACHINE_TAGS)),
        "artifacts": sorted(_artifacts(client, run.info.run_id)),
    }


@pytest.mark.parametrize(
    "name",
    [pytest.param(name, marks=() if name == "dgi_cora" else pytest.mark.slow) for name in CONFIGS],
)
def test_a_run_logs_the_pinned_keys(
    name: str, outputs_dir: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    logged = _logged(outputs_dir, data_dir, CONFIGS[name])
    expected = json.loads(CONTRACT.read_text())
    if os.environ.get("GRAPHSSL_UPDATE_CONTRACT"):
        expected[name] = logged
        CONTRACT.write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    pinned = expected[name]
    pinned["tags"] = [t for t in pinned["tags"] if not t.startswith(_MACHINE_TAGS)]
    for part in ("returned", "metrics", "params", "tags", "artifacts"):
        extra = sorted(set(logged[part]) - set(pinned[part]))
        missing = sorted(set(pinned[part]) - set(logged[part]))
        assert not extra and not missing, f"{name} {part}: new {extra}, gone {missing}"
