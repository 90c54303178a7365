"""The leaderboard: built by ``graphssl-report kind=leaderboard`` from a small generated MLflow
store (runs created with ``MlflowClient`` under the keys a train run logs), every cell checked
against the runs; the variance split on synthetic records whose components are known; the
published figures against BENCHMARKS.md; the documented command run in-process."""

from __future__ import annotations

import csv
import math
import re
import time
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig, OmegaConf

from graphssl.cli import _run_task
from graphssl.evaluation.leaderboard import (
    Leaderboard,
    leaderboard,
    leaderboard_markdown,
    method_label,
    published_figures,
    variance_split,
)
from graphssl.tasks.report import PUBLISHED_FILE, run_report
from graphssl.tracking.artifacts import RunRecord

REPO = Path(__file__).resolve().parents[3]
CONF = REPO / "conf"

DGI = "graphssl.methods.dgi.DGI"
GRACE = "graphssl.methods.grace.GRACE"


def _params(target: str, dataset: str, seed: int, **extra: object) -> dict[str, str]:
    """The params of a train run that matter here (names as in tests/integration/contract)."""
    out = {
        "model._target_": target,
        "model.optimizer.lr": "0.001",
        "dataset.name": dataset,
        "dataset.seed": str(seed),
        "dataset.split": "public",
        "dataset.data_dir": "/data",
        "eval.probes.knn.seed": str(seed),
        "callbacks.monitor.seed": str(seed),
        "seed": str(seed),
        "trainer.epochs": "300",
        "logger.run_name": f"{target.rsplit('.', 1)[-1]}-{dataset}-{seed}",
        "paths.outputs_dir": "/tmp/out",
    }
    out.update({k: str(v) for k, v in extra.items()})
    return out


#: (params, metrics, status) of each generated run
RUNS: list[tuple[dict[str, str], dict[str, float], str]] = [
    *(
        (
            _params(DGI, "Cora", s),
            {
                "probe/logreg/test_acc": acc,
                "probe/logreg/baseline_test_acc": base,
                "probe/logreg/gain": acc - base,
                "probe/knn/test_acc": knn,
                "probe/knn/baseline_test_acc": knn - 0.05,
                "train/epochs": 300.0,
                "time/train_seconds": secs,
                "mem/peak_rss_gb": mem,
            },
            "FINISHED",
        )
        for s, acc, base, knn, secs, mem in [
            (0, 0.80, 0.70, 0.75, 10.0, 1.0),
            (1, 0.82, 0.71, 0.76, 12.0, 1.5),
            (2, 0.81, 0.73, 0.74, 14.0, 1.2),
        ]
    ),
    # a failed run of the same row: not selected (statuses=[FINISHED])
    (_params(DGI, "Cora", 3), {"probe/logreg/test_acc": 0.1}, "FAILED"),
    # two GRACE runs that differ in their learning rate: flagged; they select their epoch
    *(
        (
            _params(GRACE, "CiteSeer", s, **{"model.optimizer.lr": lr}),
            {
                "probe/logreg/test_acc": acc,
                "train/epochs": 100.0,
                "select/best_epoch": best,
                "time/train_seconds": 5.0,
                "mem/peak_rss_gb": 0.5,
            },
            "FINISHED",
        )
        for s, lr, acc, best in [(0, 0.001, 0.70, 50.0), (1, 0.01, 0.66, 100.0)]
    ),
    # a run without probe results: left out with a note
    (_params(DGI, "PubMed", 0), {"train/epochs": 1.0}, "FINISHED"),
]


def _make_store(outputs: Path, experiment: str = "graphssl") -> tuple[MlflowClient, str]:
    """The runs of :data:`RUNS` (and a sweep parent, never a leaderboard row) in ``outputs``."""
    client = MlflowClient(tracking_uri=f"sqlite:///{outputs / 'mlflow.db'}")
    exp_id = str(
        client.create_experiment(experiment, artifact_location=(outputs / "mlart").as_uri())
    )
    parent = client.create_run(exp_id, run_name="sweep", tags={"graphssl.role": "sweep"})
    client.log_metric(parent.info.run_id, "probe/logreg/test_acc", 0.99)
    client.set_terminated(parent.info.run_id, "FINISHED")
    now = int(time.time() * 1000)
    for params, metrics, status in RUNS:
        run = client.create_run(
            exp_id,
            run_name=params["logger.run_name"],
            tags={"graphssl.config_hash": "x", "mlflow.parentRunId": parent.info.run_id},
        )
        client.log_batch(
            run.info.run_id,
            metrics=[Metric(k, v, now, 0) for k, v in metrics.items()],
            params=[Param(k, v) for k, v in params.items()],
        )
        client.set_terminated(run.info.run_id, status)
    return client, exp_id


def _cfg(outputs: Path, out: Path, *overrides: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(
            config_name="report",
            overrides=[f"paths.outputs_dir={outputs}", f"output_dir={out}", *overrides],
        )


@pytest.fixture
def store(outputs_dir: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, MlflowClient, str]:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    client, exp_id = _make_store(outputs_dir)
    return outputs_dir, client, exp_id


def _report_runs(client: MlflowClient, exp_id: str) -> list:  # type: ignore[type-arg]
    return client.search_runs([exp_id], filter_string="tags.`graphssl.role` = 'report'")


def test_leaderboard_from_a_store_matches_its_runs(
    store: tuple[Path, MlflowClient, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outputs, client, exp_id = store
    board = run_report(_cfg(outputs, tmp_path / "out", "kind=leaderboard"))
    assert isinstance(board, Leaderboard)
    assert board.probes == ["knn", "logreg"]
    assert [(r.method, r.dataset) for r in board.rows] == [("dgi", "Cora"), ("grace", "CiteSeer")]
    assert board.n_runs == 5 and any("DGI-PubMed-0" in n for n in board.notes)

    dgi = board.row("dgi", "cora")
    acc, base = np.array([0.80, 0.82, 0.81]), np.array([0.70, 0.71, 0.73])
    cell = dgi.cells["logreg"]
    assert (cell.value.n, cell.baseline.n, cell.gain.n) == (3, 3, 3)
    assert cell.value.mean == pytest.approx(acc.mean())
    assert cell.value.std == pytest.approx(acc.std(ddof=1))
    assert cell.baseline.mean == pytest.approx(base.mean())
    assert cell.baseline.std == pytest.approx(base.std(ddof=1))
    assert cell.gain.mean == pytest.approx((acc - base).mean())
    assert cell.gain.std == pytest.approx((acc - base).std(ddof=1))
    assert cell.published is not None and cell.published.value == pytest.approx(0.823)
    assert "GraphMAE" in cell.published.source
    assert cell.difference == pytest.approx(acc.mean() - 0.823)
    knn = dgi.cells["knn"]
    assert knn.value.mean == pytest.approx(0.75) and knn.gain.mean == pytest.approx(0.05)
    assert knn.published is None  # no published kNN figure
    assert sorted(dgi.seeds) == ["0", "1", "2"]  # the FAILED seed 3 is not selected
    assert dgi.epochs.mean == 300 and dgi.selected_epoch.n == 0
    assert dgi.train_seconds.mean == pytest.approx(12.0)
    assert dgi.peak_rss_gb == pytest.approx(1.5)  # the largest of the runs'
    assert dgi.differs == ()  # seeds, run names and paths may differ

    grace = board.row("grace", "citeseer")
    assert grace.differs == ("model.optimizer.lr",)
    g = grace.cells["logreg"]
    assert (g.value.n, g.baseline.n) == (2, 0) and math.isnan(g.gain.mean)
    assert g.value.mean == pytest.approx(0.68)
    assert g.published is not None and g.published.value == pytest.approx(0.712)
    assert grace.selected_epoch.mean == pytest.approx(75.0)  # (49 + 1 + 99 + 1) / 2
    assert grace.cells["knn"].value.n == 0

    printed = capsys.readouterr().out
    assert "| dgi | Cora | 3 | 75.0 ± 1.0 | 70.0 ± 1.0 | +5.0 ± 0.0 | — |" in printed
    assert "| 81.0 ± 1.0 | 71.3 ± 1.5 | +9.7 ± 1.5 | 82.3 (-1.3) [1] |" in printed
    assert "71.2 (-3.2) [1] |" in printed  # the same source, one footnote
    assert "Published: [1] GraphMAE (Hou et al., KDD 2022), Table 1" in printed
    assert "300 | 12 | 1.50 |" in printed and "100 (sel. 75)" in printed
    assert "⚠ differ: model.optimizer.lr" in printed

    (report,) = _report_runs(client, exp_id)
    files = {a.path for a in client.list_artifacts(report.info.run_id)}
    assert {"leaderboard.md", "leaderboard.html", "leaderboard.csv"} <= files
    assert report.data.metrics["leaderboard/logreg/dgi/Cora"] == pytest.approx(0.81)
    html = (tmp_path / "out" / "leaderboard.html").read_text()
    assert "<td>dgi</td>" in html and "GraphMAE (Hou et al., KDD 2022), Table 1" in html
    with (tmp_path / "out" / "leaderboard.csv").open() as f:
        lines = list(csv.DictReader(f))
    line = next(x for x in lines if x["method"] == "dgi" and x["probe"] == "logreg")
    assert float(line["mean"]) == pytest.approx(0.81) and line["n"] == "3"
    assert float(line["published"]) == pytest.approx(0.823)


def test_a_filter_narrows_the_rows_and_variants_split_them(
    store: tuple[Path, MlflowClient, str], tmp_path: Path
) -> None:
    outputs, _, _ = store
    board = run_report(
        _cfg(
            outputs,
            tmp_path / "out",
            "kind=leaderboard",
            "filter=\"params.`model._target_` LIKE '%GRACE'\"",
            "leaderboard.variant_by=[params.model.optimizer.lr]",
            "leaderboard.probes=[logreg]",
        )
    )
    assert [(r.method, r.variant) for r in board.rows] == [
        ("grace", "model.optimizer.lr=0.001"),
        ("grace", "model.optimizer.lr=0.01"),
    ]
    assert all(r.differs == () for r in board.rows)  # the variant key is no longer a difference
    assert board.probes == ["logreg"]


def test_a_sweep_parent_gets_the_leaderboard_of_its_children(
    store: tuple[Path, MlflowClient, str], tmp_path: Path
) -> None:
    outputs, client, exp_id = store
    (parent,) = client.search_runs([exp_id], filter_string="tags.`graphssl.role` = 'sweep'")
    pid = parent.info.run_id
    board = run_report(_cfg(outputs, tmp_path / "out", "kind=leaderboard", f"parent_run_id={pid}"))
    assert [(r.method, len(r.run_ids)) for r in board.rows] == [("dgi", 3), ("grace", 2)]
    files = {a.path for a in client.list_artifacts(pid, "leaderboard")}
    assert "leaderboard/leaderboard.html" in files and "leaderboard/leaderboard.csv" in files
    metrics = client.get_run(pid).data.metrics
    assert metrics["leaderboard/logreg/grace/CiteSeer"] == pytest.approx(0.68)
    assert _report_runs(client, exp_id) == []  # the parent holds it: no report run


def test_no_matching_runs_is_one_clear_error_and_no_report_run(
    store: tuple[Path, MlflowClient, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outputs, client, exp_id = store
    flt = "params.`model._target_` = 'nothing'"
    cfg = _cfg(outputs, tmp_path / "out", "kind=leaderboard", f'filter="{flt}"')
    with pytest.raises(SystemExit) as exit_info:  # what graphssl-report does with the error
        _run_task("graphssl-report", run_report, cfg)
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("graphssl-report: error: ValueError: no runs match the leaderboard's")
    assert flt in err and "Traceback" not in err
    with pytest.raises(ValueError, match="none of the 6 selected runs logged"):
        run_report(_cfg(outputs, tmp_path / "out", "kind=leaderboard", "leaderboard.metric=val_f1"))
    with pytest.raises(ValueError, match="kind='leader' is not a report kind"):
        run_report(_cfg(outputs, tmp_path / "out", "kind=leader"))
    assert _report_runs(client, exp_id) == []


# ---------------------------------------------------------------- variance split


def _crossed(probe_seed: bool = True) -> tuple[list[RunRecord], np.ndarray, np.ndarray, np.ndarray]:
    """12 runs crossing 3 pretraining seeds, 2 split seeds and 2 probe seeds, each value the sum
    of one effect per seed (known components: the variances of the effects)."""
    a, b, c = np.array([-0.02, 0.0, 0.02]), np.array([-0.01, 0.01]), np.array([-0.004, 0.004])
    runs = []
    for i, ea in enumerate(a):
        for j, eb in enumerate(b):
            for k, ec in enumerate(c):
                params = {"model._target_": DGI, "dataset.name": "Cora", "seed": str(i)}
                params["dataset.seed"] = str(10 + j)
                if probe_seed:
                    params["eval.probes.knn.seed"] = str(20 + k)
                runs.append(
                    RunRecord(
                        f"r{i}{j}{k}",
                        "",
                        "0",
                        "FINISHED",
                        params,
                        {"probe/knn/test_acc": 0.8 + ea + eb + ec},
                    )
                )
    return runs, a, b, c


def test_variance_split_recovers_known_components() -> None:
    runs, a, b, c = _crossed()
    board = leaderboard(runs, decompose=True)
    (row,) = board.rows
    assert row.differs == ()  # the seeds may differ
    split = row.cells["knn"].split
    assert split is not None and split.balanced and split.n == 12
    assert split.components["pretraining"] == pytest.approx(a.var())
    assert split.components["split"] == pytest.approx(b.var())
    assert split.components["probe"] == pytest.approx(c.var())
    assert split.residual == pytest.approx(0.0, abs=1e-12)
    assert split.total == pytest.approx(a.var() + b.var() + c.var())
    assert split.share("pretraining") == pytest.approx(a.var() / split.total)

    # without a probe seed, its effect is left in the residual
    runs, a, b, c = _crossed(probe_seed=False)
    split = leaderboard(runs, decompose=True).rows[0].cells["knn"].split
    assert split is not None and "probe" not in split.components
    assert split.residual == pytest.approx(c.var())
    assert "probe: not carried by the runs" in split.notes


def test_variance_split_merges_confounded_seeds_and_flags_unbalanced_designs() -> None:
    values = [0.1, 0.2, 0.4, 0.3]
    same = variance_split(values, {"pretraining": [0, 1, 2, 3], "split": [5, 6, 7, 8]})
    assert list(same.components) == ["pretraining = split"]
    assert same.share("pretraining = split") == pytest.approx(1.0)
    assert same.residual == pytest.approx(0.0, abs=1e-12)
    assert any("confounded" in n for n in same.notes)

    uneven = variance_split([1.0, 2.0, 3.0], {"pretraining": [0, 0, 1], "split": [0, 1, 1]})
    assert not uneven.balanced and any("unbalanced" in n for n in uneven.notes)
    with pytest.raises(ValueError, match="gives 2 levels for 3 values"):
        variance_split([1.0, 2.0, 3.0], {"pretraining": [0, 1]})


def test_each_probe_says_how_it_selected_its_l2_strength() -> None:
    def run(name: str, dataset: str, metrics: dict[str, float], **tags: str) -> RunRecord:
        params = {"model._target_": DGI, "dataset.name": dataset, "seed": name}
        tags = {k.replace("__", "/"): v for k, v in tags.items()}
        return RunRecord(name, "", "0", "FINISHED", params, metrics, tags)

    # a train run logs the strength it selected as a tag
    node = {"probe/logreg/test_acc": 0.8}
    graph = {
        "probe/logreg/test_acc": 0.7,
        "probe/logreg/weight_decay_fold0": 0.1,
        "probe/logreg/inner_folds": 5.0,
        "probe/logreg_split/test_acc": 0.7,
        "probe/logreg_split/weight_decay": 0.01,
    }
    runs = [
        run("1", "Cora", {**node, "probe/knn/test_acc": 0.75}, probe__logreg__weight_decay="1.0"),
        run("2", "MUTAG", graph),
        run("3", "MUTAG", {**graph, "probe/logreg/inner_folds": 4.0}),  # a rare class: 4 folds
    ]
    board = leaderboard(runs, probes=["logreg", "logreg_split", "knn"])
    assert board.row("dgi", "Cora").cells["logreg"].selection == "validation split"
    assert board.row("dgi", "MUTAG").cells["logreg"].selection == "4/5-fold inner CV"
    assert board.row("dgi", "MUTAG").cells["logreg_split"].selection == "validation split"
    assert board.row("dgi", "Cora").cells["knn"].selection == ""  # nothing to select
    md = leaderboard_markdown(board)
    assert (
        "L2 strength selected by: logreg: validation split (Cora); 4/5-fold inner CV (MUTAG) · "
        "logreg_split: validation split (MUTAG)"
    ) in md
    assert "knn:" not in md


def test_rows_with_fewer_than_three_runs_are_not_split() -> None:
    runs = _crossed()[0][:2]
    assert leaderboard(runs, decompose=True).rows[0].cells["knn"].split is None
    assert leaderboard(_crossed()[0]).rows[0].cells["knn"].split is None  # decompose off


# ---------------------------------------------------------------- published figures, labels


def test_published_figures_are_those_of_benchmarks_md() -> None:
    data = OmegaConf.to_container(OmegaConf.load(PUBLISHED_FILE))
    assert isinstance(data, dict)
    figures = published_figures(data["figures"], data["scale"])
    ours = {(f.method, f.dataset.replace("-", "_")): round(f.value * 100, 1) for f in figures}
    # the table between the markers benchmarks/quality.py writes: its published column (the
    # leaderboard's `logreg published`, "82.3 (-0.6) [1]", or a typed `published`)
    text = (REPO / "BENCHMARKS.md").read_text().split("<!-- quality-table:start -->", 1)[1]
    block = text.split("<!-- quality-table:end -->", 1)[0]
    first = block[block.index("\n|") + 1 :].split("\n\n", 1)[0]
    head, _, *rows = ([c.strip() for c in ln.strip("|").split("|")] for ln in first.splitlines())
    col = next(i for i, h in enumerate(head) if h in ("published", "logreg published"))
    table = {(r[0], r[1].casefold().replace("-", "_")): float(r[col].split()[0]) for r in rows}
    assert len(table) >= 12  # every row the table shows has its published figure
    assert {key: ours.get(key) for key in table} == table
    assert all(f.source and f.probe == "logreg" and f.metric == "test_acc" for f in figures)


def test_published_figures_refuse_incomplete_or_repeated_entries() -> None:
    entry = {"method": "dgi", "dataset": "cora", "probe": "logreg", "metric": "test_acc"}
    with pytest.raises(ValueError, match=r"lacks \['value', 'source'\]"):
        published_figures([entry])
    full = {**entry, "value": 82.3, "source": "paper"}
    with pytest.raises(ValueError, match="both give dgi on Cora"):
        published_figures([full, {**full, "dataset": "Cora"}])
    with pytest.raises(ValueError, match="value 'high' is not a number"):
        published_figures([{**full, "value": "high"}])


def test_method_labels() -> None:
    assert method_label("graphssl.methods.cca_ssg.CCASSG") == "cca_ssg"
    assert method_label("mypkg.methods.MyMethod") == "MyMethod"
    assert method_label(None) == "-"


# ---------------------------------------------------------------- the documented command


def test_the_documented_leaderboard_command_runs(
    store: tuple[Path, MlflowClient, str], tmp_path: Path
) -> None:
    text = (REPO / "docs" / "evaluation.md").read_text()
    section = text.split("\n## Leaderboard", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```bash\n(.*?)```", section, re.S)
    (command,) = [line for line in block.splitlines() if line.strip()]
    script, *overrides = command.split()
    assert script.endswith("graphssl-report") and "kind=leaderboard" in overrides
    outputs, client, exp_id = store
    board = run_report(_cfg(outputs, tmp_path / "out", *overrides))
    assert isinstance(board, Leaderboard) and len(board.rows) == 2
    # decompose=true: the generated runs draw every seed from `seed`, one confounded component
    split = board.row("dgi", "cora").cells["knn"].split
    assert split is not None and list(split.components) == ["pretraining = split = probe"]
    assert split.share("pretraining = split = probe") == pytest.approx(1.0)
    assert board.row("grace", "citeseer").cells["logreg"].split is None  # 2 runs
    assert len(_report_runs(client, exp_id)) == 1
