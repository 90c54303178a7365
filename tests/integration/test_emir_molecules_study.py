"""benchmarks/emir_molecules.py end to end at its --quick scale on the real MoleculeNet files:
the zoo trained on a few hundred HIV molecules, evaluated on the seven tasks, compared by EMIR;
the table and the correlations come out finite and are logged to the study run."""

from __future__ import annotations

import importlib.util
import math
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        importlib.util.find_spec("rdkit") is None,
        reason="MoleculeNet needs RDKit (pip install rdkit, or the 'molecules' extra)",
    ),
]


@pytest.fixture(scope="module")
def study() -> Iterator[ModuleType]:
    path = REPO / "benchmarks" / "emir_molecules.py"
    spec = importlib.util.spec_from_file_location("emir_molecules", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["emir_molecules"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("emir_molecules", None)


@pytest.fixture
def store(
    tmp_path: Path, _mlflow_template: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    out = tmp_path / "store"
    out.mkdir()
    shutil.copyfile(_mlflow_template, out / "mlflow.db")
    if not (data_dir / "MoleculeNet" / "hiv" / "raw" / "HIV.csv").is_file():
        pytest.skip(f"MoleculeNet/hiv/raw/HIV.csv not found under {data_dir}")
    monkeypatch.setenv("GRAPHSSL_DATA_DIR", str(data_dir))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # main() drops it; restored after
    return out


def test_quick_study_reports_finite_correlations(
    study: ModuleType, store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert study.main(["--quick", "--keep", str(store)]) == 0
    out = capsys.readouterr().out

    members = [m.name for m in study.QUICK.zoo]
    table = [line for line in out.splitlines() if line.startswith("| ") and "(" in line]
    assert sorted(line.split("|")[1].strip() for line in table) == sorted(members)
    for label in ("informativeness", "informativeness_held_out", "cross_encoder"):
        (row,) = [line for line in out.splitlines() if line.startswith(f"| {label} |")]
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 3 + len(study.TASKS)
        assert all(math.isfinite(float(c)) for c in cells[1:3]), row  # Spearman, Kendall

    from graphssl.tracking import artifacts
    from graphssl.tracking.store import TrackingStore

    s = TrackingStore(f"sqlite:///{store / 'mlflow.db'}", study.EXPERIMENT)
    # the members are the experiment's only input runs (the study and compare runs summarise)
    members_runs = artifacts.select_runs(s, experiment=study.EXPERIMENT)
    assert sorted(r.run_name for r in members_runs) == sorted(members)
    parent = artifacts.get_run(s, members_runs[0].tags["mlflow.parentRunId"])
    assert parent.tags["graphssl.study"] == study.EXPERIMENT
    for key in ("spearman_informativeness", "spearman_informativeness_held_out"):
        assert math.isfinite(parent.metrics[f"study/{key}"])
    assert math.isfinite(parent.metrics["study/spearman_cross_encoder"])
    assert "emir_molecules.md" in artifacts.artifact_names(s, parent)
    # every member is the study's child and carries the downstream score compare ranked on
    assert {r.tags["mlflow.parentRunId"] for r in members_runs} == {parent.run_id}
    ranks = [r.metrics["downstream/mean_rank"] for r in members_runs]
    assert all(1 <= r <= len(members) for r in ranks)
    assert sum(ranks) == pytest.approx(len(members) * (len(members) + 1) / 2)
    tasks = artifacts.select_runs(s, experiment=study.TASK_EXPERIMENT)
    assert len(tasks) == len(members) * len(study.TASKS)


def test_task_ranks_put_the_best_first_whatever_the_direction(study: ModuleType) -> None:
    scores = {
        "bace": {"a": 0.9, "b": 0.5, "c": 0.5},  # AP: higher is better; a tie shares 2.5
        "esol": {"a": 2.0, "b": 1.0, "c": math.nan},  # RMSE: lower is better; NaN ranks last
    }
    ranks = study.task_ranks(scores)
    assert ranks == {"bace": {"a": 1.0, "b": 2.5, "c": 2.5}, "esol": {"a": 2.0, "b": 1.0, "c": 3.0}}
    assert study.mean_ranks(ranks) == {"a": 1.5, "b": 1.75, "c": 2.75}
