"""``benchmarks/probe_early_stop.py``: the stored runs' own probe fitted again, with and
without the early stop of its L2 walk."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture(scope="module")
def script(load_benchmark: Callable[[str], ModuleType]) -> ModuleType:
    return load_benchmark("probe_early_stop")


def test_the_selected_strength_is_one_value_or_one_per_fold(script: ModuleType) -> None:
    assert script.selected({"probe/logreg/weight_decay": 0.3}) == "0.3"
    folds = {f"probe/logreg/weight_decay_fold{i}": v for i, v in [(10, 1.0), (2, 0.01), (1, 3.0)]}
    assert script.selected(folds) == "3,0.01,1"  # in fold order, 10 after 2
    assert script.selected({}) == "?"


def test_a_folder_without_a_store_is_refused(
    script: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        script.main(["--store", str(tmp_path)])
    assert stop.value.code == 2
    assert f"no MLflow store there (expected {tmp_path / 'mlflow.db'})" in capsys.readouterr().err


def test_the_whole_grid_reproduces_the_run_and_the_table_compares_both(
    script: ModuleType, tasks, outputs_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    metrics = tasks.train(
        "dataset=sbm",
        "trainer.epochs=2",
        "trainer.progress=false",
        "eval.figures=false",
        "eval.diagnostics.enabled=false",
        "eval.probes.knn=null",
        "logger.log_embeddings=true",
        "logger.experiment_name=early-stop-test",
        "logger.run_name=dgi-sbm-seed0",
    )
    capsys.readouterr()
    assert script.main(["--store", str(outputs_dir), "--experiment", "early-stop-test"]) == 0
    out = capsys.readouterr().out
    (line,) = [row for row in out.splitlines() if row.startswith("dgi-sbm-seed0")]
    whole = float(line.split("test ")[1].split(" →")[0])
    assert whole == pytest.approx(100 * metrics["probe/logreg/test_acc"], abs=0.005)
    assert "| dgi-sbm | 1 |" in out
    assert "(tolerance 0.1)" in out

    # the solver as before against now, on the same stored run: the same fit on this small graph
    argv = ["--store", str(outputs_dir), "--experiment", "early-stop-test", "--compare", "solver"]
    assert script.main(argv) == 0
    out = capsys.readouterr().out
    (line,) = [row for row in out.splitlines() if row.startswith("dgi-sbm-seed0")]
    before, now = (float(part.split(";")[0]) for part in line.split("test ")[1].split(" → ")[:2])
    assert before == pytest.approx(now, abs=1e-9)
    assert before == pytest.approx(100 * metrics["probe/logreg/test_acc"], abs=0.005)
    assert "CPU now / before" in out and "| dgi-sbm | 1 | 1 |" in out
    from graphssl.evaluation import logreg_probe  # the solver is put back

    assert logreg_probe._minimize_lbfgs.__module__ == "graphssl.evaluation.logreg_probe"
