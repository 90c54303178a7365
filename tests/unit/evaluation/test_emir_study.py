"""The EMIR studies' tables and correlations (graphssl.evaluation.emir.study) on a planted
comparison: informativeness agrees with the downstream scores, L2 disagrees."""

from __future__ import annotations

import csv
import io
import math

import networkx as nx
import numpy as np
import pytest

from graphssl.evaluation.emir.compare import CompareResult
from graphssl.evaluation.emir.study import (
    RANKINGS,
    ZooMember,
    agreement,
    csv_text,
    fmt_rank,
    mean_ranks,
    rank_desc,
    ranking_correlations,
    task_correlation_table,
    task_ranks,
    task_table,
    zoo_correlation_table,
    zoo_correlations,
    zoo_metrics,
    zoo_table,
)

NAMES = ["a", "b", "c", "d"]
DOWNSTREAMS = {"supervised": "supervised/test_acc", "probe": "probe/logreg/test_acc"}


def _result(held_out: bool = True, n_rows: int = 600) -> CompareResult:
    """A comparison where ``d`` is the most informative and ``a`` the least."""
    info = {"a": 0.1, "b": 0.2, "c": 0.3, "d": 0.4}
    return CompareResult(
        names=list(NAMES),
        matrix=np.full((4, 4), math.nan),
        informativeness=info,
        communities=[set(NAMES)],
        graph=nx.DiGraph(),
        cross_encoder={"a": 0.9, "b": 0.7, "c": 0.5, "d": 0.3},
        informativeness_held_out={"a": 0.15, "b": 0.1, "c": 0.35, "d": 0.3} if held_out else {},
        n_rows=n_rows,
    )


def _members() -> list[ZooMember]:
    return [
        ZooMember(n, f"zoo-{n}", f"run-{n}", "resnet10t", i, 8 * (i + 1), 0.5 + 0.1 * i, 0.4 + i)
        for i, n in enumerate(NAMES)
    ]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_rank_desc_shares_ties_and_puts_nan_last() -> None:
    ranks = rank_desc({"x": 2.0, "y": 2.0, "z": math.nan, "w": 5.0})
    assert ranks == {"w": 1.0, "x": 2.5, "y": 2.5, "z": 4.0}
    assert (fmt_rank(3.0), fmt_rank(2.5)) == ("3", "2.5")


def test_agreement_is_the_in_sample_vs_held_out_spearman() -> None:
    assert agreement(_result()) == pytest.approx(0.6)  # ranks 1234 vs 2143: 1 - 6 * 4 / 60
    assert agreement(_result(held_out=False)) is None


def test_csv_text_keeps_the_first_rows_column_order() -> None:
    text = csv_text([{"b": 1, "a": 2}, {"b": 3, "a": 4}])
    assert list(csv.reader(io.StringIO(text))) == [["b", "a"], ["1", "2"], ["3", "4"]]


def test_zoo_table_rows_carry_each_members_values_and_ranks() -> None:
    members, result = _members(), _result()
    lines = zoo_table(members, result).splitlines()
    assert _cells(lines[0])[-3:] == list(RANKINGS.values())
    rows = [_cells(line) for line in lines[2:]]
    assert [r[0] for r in rows] == ["zoo-d", "zoo-c", "zoo-b", "zoo-a"]  # best supervised first
    for row in rows:
        m = next(m for m in members if m.label == row[0])
        _, arch, epochs, d, sup, probe, *ranked = row
        assert (arch, int(epochs), int(d)) == (m.architecture, m.epochs, m.dim)
        assert float(sup) == pytest.approx(m.supervised, abs=5e-4)
        assert float(probe) == pytest.approx(m.probe, abs=5e-4)
        assert len(ranked) == 3 and all("(" in c for c in ranked)  # I_S in/out, L2 with ranks
    # rank 1 = the highest I_S and the lowest L2: both d's
    assert rows[0][6].endswith("(1)") and rows[0][8].endswith("(1)")


def test_zoo_correlations_every_ranking_against_every_downstream() -> None:
    members, result = _members(), _result(n_rows=300)
    rows = zoo_correlations(members, result, DOWNSTREAMS)
    assert len(rows) == 3 * 2
    assert {(r["ranking"], r["downstream"]) for r in rows} == {
        (k, v) for k in RANKINGS for v in DOWNSTREAMS.values()
    }
    for r in rows:
        assert r["rows"] == 300 and r["n"] == 4 and r["note"] == ""
        assert -1 <= r["spearman"] <= 1 and -1 <= r["kendall"] <= 1
    by = {(r["ranking"], r["downstream"]): r for r in rows}
    assert by["informativeness", "supervised/test_acc"]["spearman"] == pytest.approx(1.0)
    assert by["cross_encoder", "probe/logreg/test_acc"]["spearman"] == pytest.approx(-1.0)
    table = [
        line for line in zoo_correlation_table(rows).splitlines() if line.startswith("| 300 |")
    ]
    assert len(table) == 6 and all(len(_cells(line)) == 6 for line in table)
    # without a held-out estimate there are two rankings
    assert len(zoo_correlations(members, _result(held_out=False), DOWNSTREAMS)) == 2 * 2


def test_zoo_metrics_name_each_correlation_under_its_prefix() -> None:
    result = _result(n_rows=300)
    rows = zoo_correlations(_members(), result, DOWNSTREAMS)
    for prefix in ("study", "study/rows_300"):
        metrics = zoo_metrics(rows, result, prefix, DOWNSTREAMS)
        for ranking in RANKINGS:
            for short in DOWNSTREAMS:
                assert -1 <= metrics[f"{prefix}/spearman_{ranking}_{short}"] <= 1
                assert -1 <= metrics[f"{prefix}/kendall_{ranking}_{short}"] <= 1
        assert metrics[f"{prefix}/n_rows"] == 300
        assert metrics[f"{prefix}/rho_in_out"] == pytest.approx(0.6)


def test_task_ranks_put_the_best_first_whatever_the_direction() -> None:
    scores = {
        "bace": {"a": 0.9, "b": 0.5, "c": 0.5},  # AP: higher is better; a tie shares 2.5
        "esol": {"a": 2.0, "b": 1.0, "c": math.nan},  # RMSE: lower is better; NaN ranks last
    }
    ranks = task_ranks(scores, {"bace": True, "esol": False})
    assert ranks == {"bace": {"a": 1.0, "b": 2.5, "c": 2.5}, "esol": {"a": 2.0, "b": 1.0, "c": 3.0}}
    means = mean_ranks(ranks)
    assert means == {"a": 1.5, "b": 1.75, "c": 2.75}
    assert sum(means.values()) == pytest.approx(3 * 4 / 2)  # ranks 1..n on every task


def test_task_tables_and_correlations_with_the_mean_downstream_rank() -> None:
    higher = {"bace": True, "esol": False}
    scores = {  # d best on both tasks, a worst
        "bace": {"a": 0.6, "b": 0.7, "c": 0.8, "d": 0.9},
        "esol": {"a": 2.0, "b": 1.5, "c": 1.2, "d": 1.0},
    }
    ranks = task_ranks(scores, higher)
    means = mean_ranks(ranks)
    result = _result()
    rows = ranking_correlations(result, scores, means, higher)
    assert [r["ranking"] for r in rows] == list(RANKINGS)
    by = {r["ranking"]: r for r in rows}
    assert by["informativeness"]["spearman"] == pytest.approx(1.0)
    assert by["cross_encoder"]["spearman"] == pytest.approx(-1.0)
    assert by["informativeness"]["spearman_esol"] == pytest.approx(1.0)  # signed: lower RMSE
    headers = {"bace": "BACE", "esol": "ESOL"}
    for label in RANKINGS:
        (line,) = [
            x
            for x in task_correlation_table(rows, headers).splitlines()
            if x.startswith(f"| {label} |")
        ]
        cells = _cells(line)
        assert len(cells) == 3 + len(headers)
        assert all(math.isfinite(float(c)) for c in cells[1:3])  # Spearman, Kendall
    dims = {n: 16 for n in NAMES}
    table = task_table(dims, scores, ranks, means, result, {"bace": "BACE AP", "esol": "ESOL RMSE"})
    body = [_cells(line) for line in table.splitlines()[2:]]
    assert [r[0] for r in body] == ["d", "c", "b", "a"]  # best mean rank first
    assert body[0][2] == "0.900 (1)" and body[0][4] == "1.00"
