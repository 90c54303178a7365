"""The correlation tables (graphssl.evaluation.correlation) and their outputs
(graphssl.evaluation.report) on plain run records."""

from __future__ import annotations

import math

import numpy as np
import pytest

from graphssl.evaluation.correlation import correlation, correlation_table
from graphssl.evaluation.report import markdown_table
from graphssl.tracking.artifacts import RunRecord


def _run(i: int, acc: float, params: dict[str, str] | None = None, **diags: float) -> RunRecord:
    """A finished run with the downstream accuracy and ``diag/<name>`` metrics."""
    metrics = {"probe/logreg/test_acc": acc, **{f"diag/{k}": v for k, v in diags.items()}}
    return RunRecord(f"r{i}", f"job{i}", "0", "FINISHED", dict(params or {}), metrics, {})


def test_correlation_matches_scipy_docs_example() -> None:
    rho, tau, n, note = correlation([1, 2, 3, 4, 5], [5, 6, 7, 8, 7])
    assert rho == pytest.approx(0.820783, abs=1e-6)  # scipy's value for these pairs
    assert n == 5 and note == "" and -1 <= tau <= 1


def test_correlation_constant_and_short_inputs_are_nan_with_note() -> None:
    rho, tau, _, note = correlation([1, 1, 1, 1], [1, 2, 3, 4])
    assert math.isnan(rho) and math.isnan(tau) and "constant" in note
    rho, _, n, note = correlation([1, 2, float("nan")], [1, 2, 3])
    assert math.isnan(rho) and n == 2 and "need at least 3" in note


def test_table3_and_table4_shapes_with_dataset_and_corruption() -> None:
    runs = []
    for ds in ("cora", "citeseer"):
        for corruption, sign in (("naive", 1.0), ("connected", -1.0)):
            for k in range(5):
                acc = 0.5 + 0.1 * k
                params = {"dataset.name": ds, "dataset.corruption._target_": corruption}
                runs.append(_run(len(runs), acc, params, rankme=sign * acc, alpha=float(k % 2)))
    report = correlation_table(runs)
    assert report.group_keys == ["params.dataset.name", "params.dataset.corruption._target_"]
    assert report.groups == [
        "citeseer / connected",
        "citeseer / naive",
        "cora / connected",
        "cora / naive",
    ]
    rows, _, vals = report.table3()
    assert rows == ["diag/alpha", "diag/rankme"] and vals.shape == (2, 4)
    np.testing.assert_allclose(vals[1], [-1, 1, -1, 1])
    rows4, cols4, vals4 = report.table4()
    assert rows4 == ["connected", "naive"] and cols4 == ["diag/alpha", "diag/rankme"]
    np.testing.assert_allclose(vals4[:, 1], [-1, 1])
    text = markdown_table(rows4, cols4, vals4)
    assert "| naive |" in text and "+1.00" in text


def test_no_group_keys_gives_one_group_and_skips_runs_without_downstream() -> None:
    runs = [_run(i, 0.1 * i, x=float(i)) for i in range(5)]
    runs.append(RunRecord("r9", "nodown", "0", "FINISHED", {}, {"diag/x": 1.0}, {}))
    report = correlation_table(runs, group_by=["params.dataset.name"])
    assert report.group_keys == [] and report.groups == ["all"] and report.n_runs == 5
    assert report.cell("all", "diag/x") == pytest.approx(1.0)
    rows4, _, vals4 = report.table4()
    assert rows4 == ["mean"] and vals4[0, 0] == pytest.approx(1.0)


def test_any_downstream_metric_name_works() -> None:
    runs = [
        RunRecord(
            f"r{i}",
            "",
            "0",
            "FINISHED",
            {},
            {"supervised/test_acc": 0.1 * i, "diag/nesum": -float(i)},
            {},
        )
        for i in range(4)
    ]
    report = correlation_table(runs, downstream="supervised/test_acc")
    assert report.cell("all", "diag/nesum") == pytest.approx(-1.0)


def test_average_by_merges_the_runs_of_one_point() -> None:
    # 3 degrees x 4 seeds; the accuracy follows the degree, the per-seed noise is anticorrelated
    # with it, so run-level rho is low while the per-degree means are perfectly ordered
    runs = []
    for t in (1.1, 1.5, 2.0, 2.0):  # the last two: targets t at/above the graph's own degree
        for seed in range(4):
            noise = (-1) ** seed * 0.3
            metrics = {"data/avg_degree": min(t, 2.0)}
            runs.append(_run(len(runs), t + noise, {"seed": str(seed)}, x=t - 3 * noise))
            runs[-1].metrics.update(metrics)
    pooled = correlation_table(runs, group_by=[])
    averaged = correlation_table(runs, group_by=[], average_by="metrics.data/avg_degree")
    assert pooled.cell("all", "diag/x") < 0.5
    assert averaged.cell("all", "diag/x") == pytest.approx(1.0)
    # one point per achieved degree: 1.1, 1.5 and 2.0 (both t = 2.0 jobs merged)
    assert [r.n for r in averaged.rows] == [3]
    assert sorted(round(a, 6) for _, a, _ in averaged.points["diag/x"]) == [1.1, 1.5, 2.0]
    assert averaged.n_runs == 16 and averaged.average_by == "metrics.data/avg_degree"
    # runs without the key stay points of their own
    runs.append(_run(99, 5.0, {}, x=9.0))
    runs.append(_run(98, 6.0, {}, x=10.0))
    assert correlation_table(runs, group_by=[], average_by="params.missing").rows[0].n == 18


def test_baseline_and_separation_tables_where_runs_logged_a_baseline(tmp_path) -> None:
    from graphssl.evaluation.correlation import baseline_key
    from graphssl.evaluation.report import report_metrics, write_outputs

    runs = []
    for i in range(4):
        r = _run(i, 0.7 + 0.05 * i, {"dataset.name": "A" if i < 2 else "B"}, x=float(i), y=1.0)
        r.metrics["probe/logreg/baseline_test_acc"] = 0.6
        r.metrics["diag_baseline/x"] = 1.5  # trained x is higher in runs 2, 3
        runs.append(r)
    runs.append(_run(9, 0.5, {"dataset.name": "B"}, x=9.0, y=2.0))  # no baseline logged
    report = correlation_table(runs, group_by=["params.dataset.name"])
    assert [(b.group, b.n) for b in report.baseline] == [("A", 2), ("B", 2)]
    a, b = report.baseline
    assert a.trained == pytest.approx(0.725) and a.baseline == pytest.approx(0.6)
    assert a.gain == pytest.approx(0.125) and b.gain == pytest.approx(0.225)
    assert a.gain_std == pytest.approx(np.std([0.1, 0.15], ddof=1))
    (sep,) = report.separation  # diag/y has no baseline twin
    assert sep.metric == "diag/x" and sep.n == 4 and sep.trained_higher == pytest.approx(0.5)
    assert sep.baseline == pytest.approx(1.5)
    _, text = write_outputs(report, tmp_path)
    assert "| A | 2 | 0.7250 | 0.6000 | +0.1250" in text
    assert "| diag/x | 4 | 1.5 | 1.5 | 50% |" in text
    assert (tmp_path / "baseline.csv").read_text().startswith("group,runs,trained,untrained")
    assert report_metrics(report)["report/gain/B"] == pytest.approx(0.225)
    # no baseline for a downstream metric that is not a probe's; error metrics flip the sign
    assert correlation_table(runs, downstream="diag/y").baseline == []
    assert baseline_key("probe/ridge/test_mae") == ("probe/ridge/baseline_test_mae", False)
    assert baseline_key("supervised/test_acc") is None


def test_no_baseline_tables_without_baseline_metrics(tmp_path) -> None:
    from graphssl.evaluation.report import write_outputs

    report = correlation_table([_run(i, 0.1 * i, x=float(i)) for i in range(4)])
    assert report.baseline == [] and report.separation == []
    _, text = write_outputs(report, tmp_path)
    assert "baseline" not in text and not (tmp_path / "baseline.csv").exists()


def test_scatter_has_axis_labels_and_run_names() -> None:
    from graphssl.evaluation.report import scatter_figure

    runs = [_run(i, 0.5 + 0.1 * i, x=float(i), y=float(-i)) for i in range(4)]
    report = correlation_table(runs, group_by=[])
    assert report.point_names["diag/x"] == ["job0", "job1", "job2", "job3"]
    ax = scatter_figure(report).axes[0]
    assert ax.get_xlabel() == report.metrics[0]
    assert ax.get_ylabel() == "probe/logreg/test_acc"
    assert sorted(t.get_text() for t in ax.texts) == ["job0", "job1", "job2", "job3"]
    averaged = correlation_table(
        [_run(i, 0.5 + 0.1 * i, {"seed": str(i % 2)}, x=float(i)) for i in range(4)],
        group_by=[],
        average_by="params.seed",
    )
    assert averaged.point_names["diag/x"] == ["params.seed=0", "params.seed=1"]
