"""The outputs of a correlation :class:`~graphssl.evaluation.correlation.Report`: Markdown and
CSV tables (Tables 3 and 4 of Tsitsulin et al. 2023, the untrained-baseline tables, the
long-form correlations), the scatter grid, and the metric values a report run logs.

:func:`write_outputs` writes every file into one folder and returns the Markdown text (what the
``graphssl-report`` command prints); :func:`report_metrics` names the values
``report/spearman/<metric>/<group>``, ``report/kendall/...``, ``report/gain/<group>`` and
``report/mean_spearman/<metric>[/<row>]``.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from graphssl.evaluation.correlation import SEP, Report, metric_safe

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "baseline_markdown",
    "markdown_table",
    "report_metrics",
    "scatter_figure",
    "write_outputs",
]


def baseline_markdown(report: Report) -> str:
    """The two baseline tables of ``report`` in Markdown (``""`` when it has neither)."""
    md: list[str] = []
    if report.baseline:
        md += [
            f"## Untrained-encoder baseline: {report.downstream}",
            "",
            "| group | runs | trained | untrained | gain |",
            "|---|---:|---:|---:|---:|",
        ]
        for b in report.baseline:
            spread = "" if math.isnan(b.gain_std) else f" ± {b.gain_std:.4f}"
            md.append(
                f"| {b.group} | {b.n} | {b.trained:.4f} | {b.baseline:.4f} "
                f"| {b.gain:+.4f}{spread} |"
            )
        md.append("")
    if report.separation:
        md += [
            "## Diagnostics: trained vs untrained encoders",
            "",
            "| metric | runs | trained (mean) | untrained (mean) | trained higher |",
            "|---|---:|---:|---:|---:|",
        ]
        for s in report.separation:
            md.append(
                f"| {s.metric} | {s.n} | {s.trained:.4g} | {s.baseline:.4g} "
                f"| {100 * s.trained_higher:.0f}% |"
            )
        md.append("")
    return "\n".join(md)


def _fmt(v: float) -> str:
    return "nan" if math.isnan(v) else f"{v:+.2f}"


def markdown_table(
    rows: Sequence[str], columns: Sequence[str], values: np.ndarray, corner: str = "metric"
) -> str:
    """A Markdown table with 2-decimal signed values (``nan`` for undefined cells)."""
    lines = [
        "| " + " | ".join([corner, *columns]) + " |",
        "|" + "|".join("---" for _ in range(len(columns) + 1)) + "|",
    ]
    for name, vals in zip(rows, values):
        lines.append("| " + " | ".join([name, *(_fmt(float(v)) for v in vals)]) + " |")
    return "\n".join(lines)


def _write_csv(
    path: Path, rows: Sequence[str], columns: Sequence[str], values: np.ndarray, corner: str
) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow([corner, *columns])
        for name, vals in zip(rows, values):
            w.writerow([name, *("" if math.isnan(v) else f"{v:.6f}" for v in vals)])


def scatter_figure(report: Report, columns: int = 4, max_names: int = 30) -> Figure:
    """One panel per metric: metric value (x) vs downstream (y), coloured by group; each
    point is labelled with its run's name when a panel has at most ``max_names`` points."""
    from graphssl.evaluation.plots import _figure

    k = max(1, len(report.metrics))
    ncols = min(columns, k)
    nrows = math.ceil(k / ncols)
    fig = _figure(3.2 * ncols, 2.8 * nrows)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    palette = [f"C{i}" for i in range(10)]
    colors = {g: palette[i % 10] for i, g in enumerate(report.groups)}
    for idx, metric in enumerate(report.metrics):
        ax = axes[idx // ncols][idx % ncols]
        all_pts = report.points.get(metric, [])
        for g in report.groups:
            pts = [(a, b) for gg, a, b in all_pts if gg == g]
            if pts:
                xs, ys = zip(*pts)
                ax.scatter(xs, ys, s=12, color=colors[g], label=g, alpha=0.8)
        names = report.point_names.get(metric, [])
        if len(names) == len(all_pts) and len(names) <= max_names:
            for name, (_, a, b) in zip(names, all_pts):
                ax.annotate(
                    name, (a, b), xytext=(3, 3), textcoords="offset points", fontsize=5, alpha=0.8
                )
        rho = [report.cell(g, metric) for g in report.groups]
        finite = [r for r in rho if math.isfinite(r)]
        mean = f"{np.mean(finite):+.2f}" if finite else "nan"
        ax.set_title(f"{metric} (mean ρ {mean})", fontsize=8)
        ax.set_xlabel(metric, fontsize=7)
        ax.set_ylabel(report.downstream, fontsize=7)
        ax.tick_params(labelsize=6)
    for idx in range(len(report.metrics), nrows * ncols):
        axes[idx // ncols][idx % ncols].set_visible(False)
    if len(report.groups) > 1:
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(
            handles, labels, loc="outside lower center", fontsize=7, ncols=min(len(labels), 4)
        )
    return fig


def write_outputs(report: Report, folder: Path) -> tuple[list[Path], str]:
    """Write the tables (CSV + Markdown), the long-form correlations and the scatter grid.

    Returns:
        ``(paths, markdown)`` where ``markdown`` is ``report.md`` (what the CLI prints).
    """
    folder.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    first = report.group_keys[0] if report.group_keys else "groups"
    corner3 = f"metric \\ {' | '.join(report.group_keys) or 'group'}"
    md = [
        f"# Correlation with {report.downstream} ({report.n_runs} runs, "
        f"groups by {report.group_keys or ['(none)']}"
        + (f", one point per {report.average_by}: mean of its runs)" if report.average_by else ")"),
        "",
    ]
    for stat in ("spearman", "kendall"):
        rows, cols, vals = report.table3(stat)
        p = folder / f"table3_{stat}.csv"
        _write_csv(p, rows, cols, vals, corner3)
        paths.append(p)
        md += [f"## Table 3 ({stat}): per group", "", markdown_table(rows, cols, vals), ""]
        rows4, cols4, vals4 = report.table4(stat)
        p = folder / f"table4_{stat}.csv"
        corner4 = SEP.join(report.group_keys[1:]) or "mean over groups"
        _write_csv(p, rows4, cols4, vals4, corner4)
        paths.append(p)
        md += [
            f"## Table 4 ({stat}): mean over {first}",
            "",
            markdown_table(rows4, cols4, vals4, corner=corner4),
            "",
        ]
    baseline = baseline_markdown(report)
    if baseline:
        md += [baseline]
        p = folder / "baseline.csv"
        with p.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["group", "runs", "trained", "untrained", "gain", "gain_std"])
            for b in report.baseline:
                w.writerow([b.group, b.n, b.trained, b.baseline, b.gain, b.gain_std])
        paths.append(p)
    notes = report.notes()
    if notes:
        md += ["## Notes (NaN cells)", "", *(f"- {n}" for n in notes), ""]
    p = folder / "correlations.csv"
    with p.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["group", "metric", "n", "spearman", "kendall", "note"])
        for r in report.rows:
            w.writerow([r.group, r.metric, r.n, r.spearman, r.kendall, r.note])
    paths.append(p)
    text = "\n".join(md)
    p = folder / "report.md"
    p.write_text(text)
    paths.append(p)
    p = folder / "scatter.png"
    scatter_figure(report).savefig(p)
    paths.append(p)
    return paths, text


_KEY = re.compile(r"[^0-9A-Za-z_\-.]+")


def report_metrics(report: Report) -> dict[str, float]:
    """``report/spearman/<metric>/<group>`` and ``report/mean_spearman/<metric>[/<row>]``."""
    out: dict[str, float] = {}
    for r in report.rows:
        group = _KEY.sub("_", r.group)
        out[f"report/spearman/{r.metric}/{group}"] = r.spearman
        out[f"report/kendall/{r.metric}/{group}"] = r.kendall
    for b in report.baseline:
        out[f"report/gain/{_KEY.sub('_', b.group)}"] = b.gain
    rows, cols, vals = report.table4("spearman")
    for i, row in enumerate(rows):
        for j, m in enumerate(cols):
            suffix = "" if row == "mean" else "/" + _KEY.sub("_", row)
            out[metric_safe(f"report/mean_spearman/{m}{suffix}")] = float(vals[i, j])
    return out
