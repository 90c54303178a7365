"""benchmarks/quality.py end to end on real CiteSeer: a kept store, and probes re-run on its
embeddings without training (``--store`` / ``--reprobe``)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def quality() -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location("quality", REPO / "benchmarks" / "quality.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["quality"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("quality", None)


@pytest.fixture
def store(
    tmp_path: Path, _mlflow_template: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """A kept store (an already-migrated MLflow database) and the real data."""
    out = tmp_path / "store"
    out.mkdir()
    shutil.copyfile(_mlflow_template, out / "mlflow.db")
    monkeypatch.setenv("GRAPHSSL_DATA_DIR", str(data_dir))
    # main() drops the first and sets the second; monkeypatch restores both after the test
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    return out


def run_count(store: Path) -> int:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    exp = client.get_experiment_by_name("quality-benchmark")
    return 0 if exp is None else len(client.search_runs([exp.experiment_id]))


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
    # ours, grid 0.1 … 0, papers' probe
    assert trained[4] != "—" and trained[5] != "—" and trained[8] != "—"
    assert trained[10] != "—" and trained[11] != "—"  # the untrained baseline and the gain

    assert run_count(store) == 2
    assert quality.main([*ARGS, "--store", str(store), "--reprobe"]) == 0
    captured = capsys.readouterr()
    again = table_row(captured.out)
    assert again[4:9] == trained[4:9]  # the same embeddings under the same (deterministic) probes
    assert again[10:12] == ["—", "—"]  # no untrained embeddings are stored to probe again
    assert captured.err.count("re-probed") == 2
    assert run_count(store) == 2  # re-probing trains nothing and logs no run

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
    assert "none of the 1 stored runs" in err and "model.optimizer.lr: 0.001 -> 0.5" in err

    with pytest.raises(SystemExit) as exit_info:  # seed 7 was never trained into this store
        quality.main([*one_seed, "--first-seed", "7", "--store", str(store), "--reprobe"])
    assert exit_info.value.code == 2
    assert "no finished run 'dgi-citeseer-seed7'" in capsys.readouterr().err

    with pytest.raises(SystemExit) as exit_info:  # --reprobe without a store
        quality.main([*one_seed, "--reprobe"])
    assert exit_info.value.code == 2
    assert "pass --store" in capsys.readouterr().err


def test_reprobe_takes_the_stored_run_of_the_same_training(
    quality: ModuleType, store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two stored runs of one name (3 and 6 epochs): each reprobe finds its own, newest first;
    a changed selection probe is a different training."""
    one_seed = ["--methods", "dgi", "--datasets", "citeseer", "--seeds", "1"]
    for scale in ("0.01", "0.02"):
        assert quality.main([*one_seed, "--epochs-scale", scale, "--store", str(store)]) == 0
    trained = [table_row(out) for out in capsys.readouterr().out.split("| method |")[1:]]
    assert [row[2] for row in trained] == ["3", "6"]
    for scale, row in zip(("0.01", "0.02"), trained, strict=True):
        assert (
            quality.main([*one_seed, "--epochs-scale", scale, "--store", str(store), "--reprobe"])
            == 0
        )
        assert table_row(capsys.readouterr().out)[2:9] == row[2:9]

    selecting = ["--override", "callbacks.selection.every=2"]
    assert (
        quality.main([*one_seed, "--epochs-scale", "0.01", "--store", str(store), *selecting]) == 0
    )
    capsys.readouterr()
    with pytest.raises(SystemExit):  # the probe that chose the weights may not change
        quality.main(
            [
                *one_seed,
                "--epochs-scale",
                "0.01",
                "--store",
                str(store),
                "--reprobe",
                *selecting,
                "eval.probes.logreg.weight_decay=[1.0]",
            ]
        )
    assert "eval.probes.logreg.weight_decay" in capsys.readouterr().err


def test_papers_column_prefers_the_methods_own_probe(quality: ModuleType) -> None:
    metrics = {"probe/adam/test_acc": 0.7, "probe/grace/test_acc": 0.71}
    assert quality.papers_metric("grace", "citeseer", metrics) == ("grace", "probe/grace/test_acc")
    assert quality.papers_metric("dgi", "citeseer", metrics) == ("adam", "probe/adam/test_acc")
    assert quality.papers_metric("graphcl", "mutag", {}) == ("svc", "probe/svc/test_acc")


def test_a_column_whose_probe_was_not_run_prints_a_dash(quality: ModuleType) -> None:
    nan = float("nan")
    assert quality.fmt([nan, nan, nan]) == "—"  # e.g. the SVM column under ~eval.probes.svc
    assert quality.fmt([0.5, nan, 0.7]) == quality.fmt([0.5, 0.7])  # mean ± std of the finite
    assert quality.fmt([]) == "—"
