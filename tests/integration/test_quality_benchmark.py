"""benchmarks/quality.py end to end on real Cora: one multirun of DGI's preset (1 epoch, 2
seeds) through ``graphssl -m``, the leaderboard it prints checked against the runs in the store,
then the table rebuilt from the store alone into a file's markers (``--report-only --write``)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def quality(load_benchmark: Callable[[str], ModuleType]) -> ModuleType:
    return load_benchmark("quality")


@pytest.fixture
def store(
    tmp_path: Path, _mlflow_template: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """A kept store (an already-migrated MLflow database) and the real data."""
    out = tmp_path / "store"
    out.mkdir()
    shutil.copyfile(_mlflow_template, out / "mlflow.db")
    monkeypatch.setenv("GRAPHSSL_DATA_DIR", str(data_dir))
    return out


def training_runs(store: Path) -> list:
    """The benchmark's training runs in ``store`` (not the sweep parents, not the reports)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    exp = client.get_experiment_by_name("quality-benchmark")
    assert exp is not None
    runs = client.search_runs([exp.experiment_id], max_results=100)
    return [r for r in runs if r.data.tags.get("graphssl.role") not in ("sweep", "report")]


def table(markdown: str) -> tuple[list[str], list[list[str]]]:
    """The header and the rows of the first Markdown table in ``markdown``."""
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    head, _, *rows = ([c.strip() for c in line.strip("|").split("|")] for line in lines)
    return head, rows


def pm(values: list[float]) -> str:
    """``mean ± std`` in % as the leaderboard prints it (``ddof=1``)."""
    v = 100.0 * np.asarray(values)
    return f"{v.mean():.1f} ± {v.std(ddof=1):.1f}"


# DGI's Cora preset, 1 of its 300 epochs, seeds 5 and 6
ARGS = ["--methods", "dgi", "--datasets", "cora", "--seeds", "2", "--first-seed", "5"]
ARGS += ["--epochs-scale", "0.004", "--threads", "1"]


def test_the_printed_leaderboard_is_that_of_the_stored_runs(
    quality: ModuleType, store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert quality.main([*ARGS, "--store", str(store)]) == 0
    captured = capsys.readouterr()
    assert "$ graphssl -m hydra/launcher=basic experiment=dgi_cora" in captured.err
    head, rows = table(captured.out)
    assert [r[:3] for r in rows] == [["dgi", "Cora", "2"]]
    (row,) = rows
    cell = dict(zip(head, row, strict=True))

    runs = training_runs(store)
    assert sorted(r.data.params["seed"] for r in runs) == ["5", "6"]
    assert all(r.info.status == "FINISHED" for r in runs)
    for probe in ("logreg", "logreg_spec", "adam"):  # the probes of the runs, in this order
        values = [r.data.metrics[f"probe/{probe}/test_acc"] for r in runs]
        assert cell[f"{probe} test_acc"] == pm(values), probe
    gains = [r.data.metrics["probe/logreg/gain"] for r in runs]
    assert cell["logreg gain"].lstrip("+") == pm(gains).lstrip("+")
    assert cell["logreg published"].startswith("82.3 ")  # conf/published.yaml
    assert cell["epochs"] == "1" and "adam published" in head and "knn test_acc" not in head

    # the table again from the store alone, one probe, into a file's markers
    doc = tmp_path / "BENCHMARKS.md"
    before = f"## Method quality\n\ntext\n\n{quality.START}\n| old |\n"
    after = f"{quality.END}\n\n## Next\n"
    doc.write_text(before + after)
    only = ["--report-only", "--store", str(store), "--probes", "logreg", "--write", str(doc)]
    assert quality.main(only) == 0
    printed = capsys.readouterr().out
    written = doc.read_text()
    assert written.startswith(f"## Method quality\n\ntext\n\n{quality.START}\n### Leaderboard")
    assert written.endswith(f"\n{quality.END}\n\n## Next\n") and "| old |" not in written
    head2, rows2 = table(written)
    assert table(printed) == (head2, rows2)
    assert [h for h in head2 if "test_acc" in h] == ["logreg test_acc"]
    assert rows2[0][head2.index("logreg test_acc")] == cell["logreg test_acc"]
    assert len(training_runs(store)) == 2  # nothing trained
