"""benchmarks/emir_zoo.py end to end at its --quick scale on the real Fashion-MNIST files: a
four-member timm zoo trained as one Hydra multirun, compared by EMIR on two row counts with the
members projected onto their leading principal components; the tables, the correlations, the
study run and the compare runs come out in the store."""

from __future__ import annotations

import csv
import importlib.util
import math
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def study() -> Iterator[ModuleType]:
    path = REPO / "benchmarks" / "emir_zoo.py"
    spec = importlib.util.spec_from_file_location("emir_zoo", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["emir_zoo"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("emir_zoo", None)


@pytest.fixture
def store(tmp_path: Path, _mlflow_template: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty, already-migrated store folder (no 8 s schema setup in the training process)."""
    out = tmp_path / "store"
    out.mkdir()
    shutil.copyfile(_mlflow_template, out / "mlflow.db")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # main() drops it; restored after
    return out


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_quick_study_logs_tables_correlations_and_runs(
    study: ModuleType,
    store: Path,
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if not (data_dir / "FashionMNIST" / "raw").is_dir():
        pytest.skip(
            f"the Fashion-MNIST raw files are not under {data_dir}/FashionMNIST/raw: point "
            "GRAPHSSL_DATA_DIR at a data folder that has them (the study trains on them)"
        )
    monkeypatch.setenv("GRAPHSSL_DATA_DIR", str(data_dir))
    assert study.main(["--quick", "--store", str(store)]) == 0
    out = capsys.readouterr().out

    from graphssl.tracking import artifacts
    from graphssl.tracking.store import TrackingStore

    s = TrackingStore(f"sqlite:///{store / 'mlflow.db'}", study.EXPERIMENT)
    zoo = study.find_zoo(s)
    assert zoo is not None and zoo.status == "FINISHED"
    members = artifacts.select_runs(s, parent_run_id=zoo.run_id)
    assert len(members) == 4  # lcnet_050, resnet10t x {0, 4} epochs
    labels = sorted(r.run_name.split("[")[0] for r in members)
    assert labels == sorted(f"zoo-{a}-e{e}" for a in ("lcnet_050", "resnet10t") for e in (0, 4))

    # the study table: one row per member, its accuracies as the member run logged them
    table = [line for line in out.splitlines() if line.startswith("| zoo-")]
    assert sorted(_cells(line)[0] for line in table) == labels
    by_label = {r.run_name.split("[")[0]: r for r in members}
    for line in table:
        name, arch, epochs, d, sup, probe, *ranked = _cells(line)
        run = by_label[name]
        assert (arch, epochs) == (run.params["encoder.name"], run.params["trainer.epochs"])
        assert int(d) == int(run.tags["embeddings.shape"].split("x")[1])
        assert float(sup) == pytest.approx(run.metrics["supervised/test_acc"], abs=5e-4)
        assert float(probe) == pytest.approx(run.metrics["probe/logreg/test_acc"], abs=5e-4)
        assert len(ranked) == 3 and all("(" in c for c in ranked)  # I_S in/out, L2 with ranks

    # the correlation table: 2 row counts x 3 rankings x 2 downstream scores, all defined
    corr = [line for line in out.splitlines() if line.startswith(("| 300 |", "| 600 |"))]
    assert len(corr) == 2 * 3 * 2
    for line in corr:
        rows, ranking, downstream, rho, tau, n = _cells(line)
        assert rows in ("300", "600")
        assert ranking in study.RANKINGS and downstream in study.DOWNSTREAMS.values()
        assert -1 <= float(rho) <= 1 and -1 <= float(tau) <= 1, line
        assert n == "4"

    # the study run: the zoo it read, the correlations, the tables
    (run,) = s.client.search_runs(
        [artifacts.experiment_id_of(s, study.EXPERIMENT)],
        filter_string="tags.`graphssl.study` = 'emir_zoo'",
    )
    study_run = artifacts.get_run(s, run.info.run_id)
    assert study_run.status == "FINISHED"
    assert study_run.tags["graphssl.role"] == "sweep"
    assert study_run.tags["graphssl.study.zoo_parent"] == zoo.run_id
    for ranking in study.RANKINGS:
        for short in study.DOWNSTREAMS:
            for prefix in ("study", "study/rows_300"):
                value = study_run.metrics[f"{prefix}/spearman_{ranking}_{short}"]
                assert -1 <= value <= 1
    assert study_run.metrics["study/n_rows"] == 600
    assert study_run.metrics["study/rows_300/n_rows"] == 300
    assert math.isfinite(study_run.metrics["study/spearman_supervised_probe"])
    assert math.isfinite(study_run.metrics["study/rho_in_out"])
    names = artifacts.artifact_names(s, study_run)
    for name in ("emir_zoo.md", "emir_zoo.csv", "emir_zoo_correlations.csv"):
        assert name in names
        assert (store / name).is_file()
    with (store / "emir_zoo.csv").open() as f:
        member_rows = list(csv.DictReader(f))
    assert sorted((r["rows"], r["member"]) for r in member_rows) == sorted(
        (str(n), label) for n in (300, 600) for label in labels
    )

    # the compare runs: children of the study run, reading the zoo's members, every member
    # projected from its original width onto 16 principal components
    compares = [
        artifacts.get_run(s, study_run.tags[f"graphssl.study.compare_{n}"]) for n in (300, 600)
    ]
    widths = {r.run_id: int(r.tags["embeddings.shape"].split("x")[1]) for r in members}
    for n, compare in zip((300, 600), compares):
        assert compare.status == "FINISHED"
        assert compare.tags["graphssl.role"] == "compare"
        assert compare.tags["mlflow.parentRunId"] == study_run.run_id
        assert compare.tags["graphssl.compare.parent_run_id"] == zoo.run_id
        assert compare.metrics["emir/n_rows"] == n
        assert compare.params["max_dims"] == "16"
        assert set(compare.tags["graphssl.compare.input_run_ids"].split(",")) == set(widths)
        inputs = [compare.tags[f"graphssl.compare.input.{i}"] for i in range(len(members))]
        for entry in inputs:
            name, _, source = entry.partition("=")
            assert compare.metrics[f"emir/original_dim/{name}"] == widths[source[len("run ") :]]
            assert math.isfinite(compare.metrics[f"emir/informativeness/{name}"])


def test_a_store_without_a_zoo_names_the_store_and_the_fix(
    study: ModuleType, store: Path, tmp_path: Path
) -> None:
    with pytest.raises(SystemExit, match=r"no mlflow\.db in the MLflow store .*--train"):
        study.main(["--store", str(tmp_path / "nothing")])
    with pytest.raises(SystemExit, match=r"no sweep parent run in experiment 'emir_zoo'") as err:
        study.main(["--store", str(store)])
    assert str(store) in str(err.value) and "experiment=emir_zoo" in str(err.value)
