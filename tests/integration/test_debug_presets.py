"""``debug=fast`` runs a node, a graph-level and an image preset end to end in seconds each
(the train task in-process, on the composed preset)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    ("preset", "data"),
    [
        ("dgi_cora", "Planetoid"),
        pytest.param("infograph_mutag", "TUDataset", marks=pytest.mark.slow),
        pytest.param("model_zoo", "FashionMNIST", marks=pytest.mark.slow),
    ],
)
def test_preset_runs_with_debug_fast(
    preset: str, data: str, tasks, outputs_dir: Path, data_dir: Path, caplog
) -> None:
    if not (data_dir / data).is_dir():
        pytest.skip(f"{data_dir / data} not found")
    store = outputs_dir / "debug" / "mlflow.db"
    store.parent.mkdir()
    shutil.copyfile(outputs_dir / "mlflow.db", store)  # already migrated: no 8 s schema setup
    with caplog.at_level(logging.INFO):
        metrics = tasks.train(f"experiment={preset}", "debug=fast")
    assert "Epoch 001, loss " in caplog.text
    runs = tasks.runs("debug", db=store)
    assert runs, "debug=fast must log to the throw-away store"
    assert [r.info.status for r in runs] == ["FINISHED"]  # one run, even for a sweep preset
    logged = runs[0].data.metrics
    assert logged["train/epochs"] == 1 == metrics["train/epochs"]
    assert any(k.startswith("probe/") for k in logged), sorted(logged)
    artifacts = {a.path for a in tasks.client(store).list_artifacts(runs[0].info.run_id)}
    assert "embeddings.pt" not in artifacts and "figures" not in artifacts
    # nothing in the real store
    assert tasks.client().get_experiment_by_name("graphssl") is None
