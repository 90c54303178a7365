"""``debug=fast`` runs a node, a graph-level and an image preset end to end in seconds each."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("preset", "data"),
    [("dgi_cora", "Planetoid"), ("infograph_mutag", "TUDataset"), ("model_zoo", "FashionMNIST")],
)
def test_preset_runs_with_debug_fast(
    preset: str, data: str, graphssl_cmd, cli_env, outputs_dir: Path, data_dir: Path, tmp_path
) -> None:
    if not (data_dir / data).is_dir():
        pytest.skip(f"{data_dir / data} not found")
    store = outputs_dir / "debug" / "mlflow.db"
    store.parent.mkdir()
    shutil.copyfile(outputs_dir / "mlflow.db", store)  # already migrated: no 8 s schema setup
    res = subprocess.run(
        [*graphssl_cmd, f"experiment={preset}", "debug=fast"],
        env=cli_env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Epoch 001, loss " in res.stdout
    client = MlflowClient(f"sqlite:///{store}")
    experiment = client.get_experiment_by_name("debug")
    assert experiment is not None, "debug=fast must log to the throw-away store"
    runs = client.search_runs([experiment.experiment_id])
    assert [r.info.status for r in runs] == ["FINISHED"]  # one run, even for a sweep preset
    metrics = runs[0].data.metrics
    assert metrics["train/epochs"] == 1
    assert any(k.startswith("probe/") for k in metrics), sorted(metrics)
    artifacts = {a.path for a in client.list_artifacts(runs[0].info.run_id)}
    assert "embeddings.pt" not in artifacts and "figures" not in artifacts
    # nothing in the real store
    real = MlflowClient(f"sqlite:///{outputs_dir / 'mlflow.db'}").get_experiment_by_name("graphssl")
    assert real is None
