"""benchmarks/quality.py end to end on real CiteSeer: a kept store, and probes re-run on its
embeddings without training (``--store`` / ``--reprobe``)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def quality() -> ModuleType:
    spec = importlib.util.spec_from_file_location("quality", REPO / "benchmarks" / "quality.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["quality"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def store(
    tmp_path: Path, _mlflow_template: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """A kept store (an already-migrated MLflow database) and the real data."""
    out = tmp_path / "store"
    out.mkdir()
    shutil.copyfile(_mlflow_template, out / "mlflow.db")
    monkeypatch.setenv("GRAPHSSL_DATA_DIR", str(data_dir))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # main() drops it; restored after
    return out


# DGI's CiteSeer preset, 3 of its 300 epochs: a few seconds a seed
ARGS = ["--methods", "dgi", "--datasets", "citeseer", "--seeds", "2", "--epochs-scale", "0.01"]


def table_row(out: str) -> list[str]:
    """The cells of the one data row of the printed Markdown table."""
    rows = [line for line in out.splitlines() if line.startswith("| dgi | citeseer |")]
    assert len(rows) == 1, out
    return [c.strip() for c in rows[0].strip("|").split("|")]


def test_reprobe_reproduces_the_stored_runs_and_applies_new_probes(
    quality: ModuleType, store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert quality.main([*ARGS, "--store", str(store)]) == 0
    trained = table_row(capsys.readouterr().out)
    # ours, wide grid, papers' probe
    assert trained[4] != "—" and trained[5] != "—" and trained[8] != "—"

    assert quality.main([*ARGS, "--store", str(store), "--reprobe"]) == 0
    captured = capsys.readouterr()
    again = table_row(captured.out)
    assert again[4:9] == trained[4:9]  # the same embeddings under the same (deterministic) probes
    assert captured.err.count("re-probed") == 2

    # a stronger weight decay for the papers' probe changes only its column
    override = ["--override", "eval.probes.adam.weight_decay=10.0"]
    assert quality.main([*ARGS, "--store", str(store), "--reprobe", *override]) == 0
    stronger = table_row(capsys.readouterr().out)
    assert stronger[4:6] == trained[4:6]
    assert stronger[8] != trained[8]


def test_reprobe_refuses_other_training_and_missing_runs(
    quality: ModuleType, store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one_seed = [*ARGS[:-4], "--seeds", "1", "--epochs-scale", "0.01"]
    assert quality.main([*one_seed, "--store", str(store)]) == 0
    capsys.readouterr()

    with pytest.raises(SystemExit) as exit_info:  # a training key changed: not the same run
        quality.main(
            [*one_seed, "--store", str(store), "--reprobe", "--override", "model.optimizer.lr=0.5"]
        )
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "trained under another config" in err and "model." in err

    with pytest.raises(SystemExit) as exit_info:  # seed 7 was never trained into this store
        quality.main([*one_seed, "--first-seed", "7", "--store", str(store), "--reprobe"])
    assert exit_info.value.code == 2
    assert "no finished run 'dgi-citeseer-seed7'" in capsys.readouterr().err

    with pytest.raises(SystemExit):  # --reprobe without a store
        quality.main([*one_seed, "--reprobe"])
    assert "pass --store" in capsys.readouterr().err
