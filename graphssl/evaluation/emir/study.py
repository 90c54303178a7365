"""Tables and correlations of the EMIR studies: does an EMIR ranking of a model zoo agree with
the zoo's downstream scores?

Two studies use them (``benchmarks/emir_zoo.py``: a supervised image model zoo against its test
and linear-probe accuracies; ``benchmarks/emir_molecules.py``: a molecular GNN zoo against its
mean rank over several MoleculeNet tasks). Everything here takes a
:class:`~graphssl.evaluation.emir.compare.CompareResult` and plain scores; the studies read the
runs and log the results through the tracking layer.

The three rankings a comparison makes (:data:`RANKINGS`) are informativeness in-sample (the
authors' figure), informativeness on held-out rows, and the cross-encoder L2 baseline (lower is
better, so agreement with a downstream score is a negative correlation).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import rankdata

from graphssl.evaluation.correlation import correlation
from graphssl.evaluation.emir.compare import CompareResult, nan_as_lowest

__all__ = [
    "RANKINGS",
    "ZooMember",
    "agreement",
    "csv_text",
    "fmt_rank",
    "mean_ranks",
    "rank_desc",
    "ranking_correlations",
    "ranking_scores",
    "task_correlation_table",
    "task_ranks",
    "task_table",
    "zoo_correlation_table",
    "zoo_correlations",
    "zoo_metrics",
    "zoo_table",
]

#: compare result attribute → how the tables call it
RANKINGS: dict[str, str] = {
    "informativeness": "I_S in-sample",
    "informativeness_held_out": "I_S held-out",
    "cross_encoder": "L2",
}


def rank_desc(values: Mapping[str, float]) -> dict[str, float]:
    """Rank 1 = the largest value (ties averaged, NaN last)."""
    names = list(values)
    v = np.array([values[n] for n in names], dtype=np.float64)
    v = np.where(np.isnan(v), -np.inf, v)
    return dict(zip(names, (float(r) for r in rankdata(-v, method="average"))))


def fmt_rank(r: float) -> str:
    """``3`` for a whole rank, ``2.5`` for a shared one."""
    return f"{r:.0f}" if float(r).is_integer() else f"{r:.1f}"


def agreement(result: CompareResult) -> float | None:
    """Spearman between a comparison's in-sample and held-out informativeness over its
    embedders (``None`` when it has no held-out estimate)."""
    if not result.informativeness_held_out:
        return None
    names = list(result.informativeness)
    return correlation(
        [result.informativeness[n] for n in names],
        [result.informativeness_held_out[n] for n in names],
    )[0]


def csv_text(rows: Sequence[Mapping[str, Any]]) -> str:
    """``rows`` (same keys, in the first row's order) as CSV text with a header line."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def ranking_scores(result: CompareResult) -> dict[str, dict[str, float]]:
    """``{ranking: {embedder: score}}`` of the rankings ``result`` made (:data:`RANKINGS`)."""
    scores = {key: dict(getattr(result, key)) for key in RANKINGS}
    return {key: s for key, s in scores.items() if s}


def _rank_best_first(key: str, score: Mapping[str, float]) -> dict[str, float]:
    """Rank 1 = the best score: the highest I_S, the lowest L2."""
    return rank_desc({k: -v for k, v in score.items()} if key == "cross_encoder" else score)


# ------------------------------------------------------------------------ a zoo of models
@dataclass(frozen=True)
class ZooMember:
    """One trained member of a model zoo, as the comparison names it."""

    name: str  # the compare run's embedder name (the metric-safe run name)
    label: str  # the run name without its swept values, e.g. zoo-resnet18-e4
    run_id: str
    architecture: str
    epochs: int
    dim: int  # the embedding width before any max_dims projection
    supervised: float
    probe: float

    def score(self, downstream: str) -> float:
        """The member's ``supervised`` or ``probe`` score."""
        return self.supervised if downstream == "supervised" else self.probe


def zoo_table(members: Sequence[ZooMember], result: CompareResult) -> str:
    """The Markdown table: one row per member, best supervised test accuracy first, each
    ranking's score with its rank (1 = best: the highest I_S, the lowest L2)."""
    scores = {key: getattr(result, key) for key in RANKINGS}
    ranks = {key: _rank_best_first(key, s) for key, s in scores.items() if s}
    head = ["member", "architecture", "epochs", "d", "supervised test acc", "probe test acc"]
    head += list(RANKINGS.values())
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
    for m in sorted(members, key=lambda m: (-nan_as_lowest(m.supervised), m.label)):
        cells = [m.label, m.architecture, str(m.epochs), str(m.dim)]
        cells += [f"{m.supervised:.3f}", f"{m.probe:.3f}"]
        for key, s in scores.items():
            digits = 4 if key == "cross_encoder" else 3
            cells.append(f"{s[m.name]:.{digits}f} ({fmt_rank(ranks[key][m.name])})" if s else "—")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def zoo_correlations(
    members: Sequence[ZooMember], result: CompareResult, downstreams: Mapping[str, str]
) -> list[dict[str, Any]]:
    """Spearman and Kendall of each ranking with each downstream score, over the members.

    Args:
        members: the members, any order.
        result: their comparison.
        downstreams: ``{short label: metric name}``; the label picks :meth:`ZooMember.score`.
    """
    rows = []
    for key, score in ranking_scores(result).items():
        for label, metric in downstreams.items():
            rho, tau, n, note = correlation(
                [score[m.name] for m in members], [m.score(label) for m in members]
            )
            rows.append(
                {
                    "rows": result.n_rows,
                    "ranking": key,
                    "downstream": metric,
                    "spearman": rho,
                    "kendall": tau,
                    "n": n,
                    "note": note,
                }
            )
    return rows


def zoo_correlation_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows of :func:`zoo_correlations` as a Markdown table."""
    out = [
        "| rows | ranking | downstream | Spearman | Kendall | n |",
        "|---:|---|---|---:|---:|---:|",
    ]
    for r in rows:
        cells = [str(r["rows"]), r["ranking"], r["downstream"]]
        cells += [f"{r['spearman']:+.3f}", f"{r['kendall']:+.3f}", str(r["n"])]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def zoo_metrics(
    rows: Sequence[Mapping[str, Any]],
    result: CompareResult,
    prefix: str,
    downstreams: Mapping[str, str],
) -> dict[str, float]:
    """``<prefix>/spearman_<ranking>_<short>`` and ``kendall`` of every row of
    :func:`zoo_correlations`, ``<prefix>/rho_in_out`` (:func:`agreement`) and
    ``<prefix>/n_rows``."""
    short_of = {metric: short for short, metric in downstreams.items()}
    out: dict[str, float] = {}
    for r in rows:
        short = short_of[r["downstream"]]
        out[f"{prefix}/spearman_{r['ranking']}_{short}"] = r["spearman"]
        out[f"{prefix}/kendall_{r['ranking']}_{short}"] = r["kendall"]
    agree = agreement(result)
    if agree is not None:
        out[f"{prefix}/rho_in_out"] = agree
    out[f"{prefix}/n_rows"] = float(result.n_rows)
    return out


# ------------------------------------------------------------- a zoo scored on several tasks
def task_ranks(
    scores: Mapping[str, Mapping[str, float]], higher_is_better: Mapping[str, bool]
) -> dict[str, dict[str, float]]:
    """Per task, each embedder's rank (1 = best, ties averaged; a NaN score ranks last).

    Args:
        scores: ``{task: {embedder: metric}}``.
        higher_is_better: ``{task: whether a higher metric is better}`` (AP: yes; RMSE: no).
    """
    out: dict[str, dict[str, float]] = {}
    for task, per_member in scores.items():
        names = list(per_member)
        values = np.array([per_member[n] for n in names], dtype=np.float64)
        badness = -values if higher_is_better[task] else values
        badness = np.where(np.isnan(badness), np.inf, badness)
        out[task] = dict(zip(names, (float(r) for r in rankdata(badness, method="average"))))
    return out


def mean_ranks(ranks: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Each embedder's mean rank over the tasks (1 = best everywhere)."""
    names = list(next(iter(ranks.values())))
    return {n: float(np.mean([ranks[t][n] for t in ranks])) for n in names}


def task_table(
    dims: Mapping[str, int],
    scores: Mapping[str, Mapping[str, float]],
    ranks: Mapping[str, Mapping[str, float]],
    means: Mapping[str, float],
    result: CompareResult,
    headers: Mapping[str, str],
) -> str:
    """The Markdown table: one row per embedder (``dims``: its width), best mean downstream
    rank first, each task's metric with its rank, then each EMIR ranking's score and rank.

    Args:
        headers: ``{task: column header}``, e.g. ``{"bace": "BACE AP"}``.
    """
    info, held, l2 = result.informativeness, result.informativeness_held_out, result.cross_encoder
    info_rank, held_rank = rank_desc(info), rank_desc(held) if held else {}
    l2_rank = rank_desc({k: -v for k, v in l2.items()}) if l2 else {}
    head = ["embedder", "d", *(headers[t] for t in scores)]
    head += ["mean rank", "I_S in-sample", "I_S held-out", "L2"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1))]
    lines[1] += "|"
    for n in sorted(dims, key=lambda n: (means[n], n)):
        cells = [n, str(dims[n])]
        cells += [f"{scores[t][n]:.3f} ({fmt_rank(ranks[t][n])})" for t in scores]
        cells.append(f"{means[n]:.2f}")
        cells.append(f"{info[n]:.3f} ({fmt_rank(info_rank[n])})")
        cells.append(f"{held[n]:.3f} ({fmt_rank(held_rank[n])})" if held else "—")
        cells.append(f"{l2[n]:.4f} ({fmt_rank(l2_rank[n])})" if l2 else "—")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ranking_correlations(
    result: CompareResult,
    scores: Mapping[str, Mapping[str, float]],
    means: Mapping[str, float],
    higher_is_better: Mapping[str, bool],
) -> list[dict[str, Any]]:
    """Spearman / Kendall of each ranking (in-sample, held-out, L2) with the mean downstream
    rank (``-mean rank``: higher = better) and Spearman with each task's metric (signed so that
    higher = better), one row per ranking."""
    rows = []
    for label, score in ranking_scores(result).items():
        names = list(score)
        rho, tau, n, note = correlation([score[k] for k in names], [-means[k] for k in names])
        row: dict[str, Any] = {"ranking": label, "spearman": rho, "kendall": tau, "n": n}
        row["note"] = note
        for task, per_member in scores.items():
            sign = 1.0 if higher_is_better[task] else -1.0
            r, _, _, _ = correlation(
                [score[k] for k in names], [sign * per_member[k] for k in names]
            )
            row[f"spearman_{task}"] = r
        rows.append(row)
    return rows


def task_correlation_table(rows: Sequence[Mapping[str, Any]], headers: Mapping[str, str]) -> str:
    """The rows of :func:`ranking_correlations` as a Markdown table (``headers``: ``{task:
    display name}``, in column order)."""
    head = ["ranking", "Spearman", "Kendall", *(f"ρ {h}" for h in headers.values())]
    out = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for r in rows:
        cells = [r["ranking"], f"{r['spearman']:+.3f}", f"{r['kendall']:+.3f}"]
        cells += [f"{r[f'spearman_{t}']:+.2f}" for t in headers]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)
