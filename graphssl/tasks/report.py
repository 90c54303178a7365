"""``graphssl-report``: which unsupervised diagnostic predicts downstream accuracy?

Reads the runs of an MLflow experiment (or the children of a sweep parent), groups them by
configurable keys (default: dataset name and corruption type), and computes, per group, the
Spearman (and Kendall) correlation across runs between every ``diag/*`` metric and a downstream
metric (default ``probe/logreg/test_acc``; ``supervised/test_acc`` for a supervised model zoo).
The tables are shaped like those of Tsitsulin et al. (2023):

* Table 3: rows = metrics, columns = groups, values = ρ per group;
* Table 4: the unweighted mean of Table 3 over the first group key (the dataset), one row per
  value of the remaining keys (the corruption), columns = metrics.

Where the runs logged the untrained-encoder baseline (``eval.baseline``), two more tables:
the downstream metric per group beside its baseline and their gain (``probe/<p>/gain``), and,
per diagnostic, its mean on trained and untrained encoders and how often the trained one is
the higher — whether the diagnostic separates trained from untrained.

Constant inputs (or fewer than 3 runs) give NaN with a note, never an error.
:func:`correlation_table` works on plain :class:`~graphssl.tracking.artifacts.RunRecord` lists;
:func:`run_report` is the task the CLI calls (``graphssl-report``, config ``conf/report.yaml``).
"""

from __future__ import annotations

import csv
import logging
import math
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from graphssl.evaluation.evaluator import HEADLINE
from graphssl.tasks.compare import correlation, metric_safe
from graphssl.tracking import artifacts
from graphssl.tracking.artifacts import RunRecord
from graphssl.tracking.mlflow_store import flatten
from graphssl.tracking.store import TrackingStore

if TYPE_CHECKING:
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)

__all__ = [
    "BaselineRow",
    "CorrelationRow",
    "Report",
    "SeparationRow",
    "baseline_key",
    "correlation_table",
    "markdown_table",
    "run_report",
]

ALL = "all"
#: joins the values of several group keys into one label (not "|": Markdown tables)
SEP = " / "


@dataclass(frozen=True)
class CorrelationRow:
    """One (group, metric) cell: correlation of the metric with the downstream metric."""

    group: str
    metric: str
    n: int
    spearman: float
    kendall: float
    note: str = ""


@dataclass(frozen=True)
class BaselineRow:
    """One group: the downstream metric of the trained encoders, of their untrained baselines,
    and the gain (means over the runs that have both; ``gain_std`` over those runs)."""

    group: str
    n: int
    trained: float
    baseline: float
    gain: float
    gain_std: float


@dataclass(frozen=True)
class SeparationRow:
    """One diagnostic: its mean on trained (``diag/<m>``) and untrained (``diag_baseline/<m>``)
    encoders over the runs that have both, and the share of them where the trained is higher."""

    metric: str
    n: int
    trained: float
    baseline: float
    trained_higher: float


def baseline_key(downstream: str) -> tuple[str, bool] | None:
    """``(key of the baseline's value, whether higher is better)`` of a ``probe/<p>/<key>``
    downstream metric; ``None`` for other metrics (e.g. ``supervised/test_acc``)."""
    parts = downstream.split("/")
    if len(parts) != 3 or parts[0] != "probe":
        return None
    higher = dict(HEADLINE).get(parts[2], not parts[2].endswith(("mae", "rmse")))
    return f"probe/{parts[1]}/baseline_{parts[2]}", higher


@dataclass
class Report:
    """Result of :func:`correlation_table`.

    Attributes:
        group_keys: the grouping keys actually used (keys no run has are dropped).
        groups: group labels in order (``"all"`` when there are no keys).
        metrics: the correlated metric names in order.
        rows: one :class:`CorrelationRow` per (group, metric).
        downstream: the downstream metric name.
        points: ``{metric: [(group, metric value, downstream value), ...]}`` for the scatter
            plots.
        point_names: the name of each of those points (run name, or ``key=value`` when
            averaged).
        n_runs: runs used (those with a finite downstream value).
        average_by: the key whose runs were averaged into one point (``None``: none).
        baseline: per group, the downstream metric beside the untrained baseline's (empty when
            no run logged one).
        separation: per diagnostic, trained vs untrained (empty without ``diag_baseline/*``).
    """

    group_keys: list[str]
    groups: list[str]
    metrics: list[str]
    rows: list[CorrelationRow]
    downstream: str
    points: dict[str, list[tuple[str, float, float]]] = field(default_factory=dict)
    n_runs: int = 0
    average_by: str | None = None
    baseline: list[BaselineRow] = field(default_factory=list)
    separation: list[SeparationRow] = field(default_factory=list)
    #: ``{metric: [name of each point in points[metric]]}``: the run's name, or
    #: ``<average_by>=<value>`` for averaged points
    point_names: dict[str, list[str]] = field(default_factory=dict)

    def cell(self, group: str, metric: str, stat: str = "spearman") -> float:
        for r in self.rows:
            if r.group == group and r.metric == metric:
                return float(getattr(r, stat))
        return math.nan

    def table3(self, stat: str = "spearman") -> tuple[list[str], list[str], np.ndarray]:
        """``(row names = metrics, column names = groups, values)``."""
        values = np.array([[self.cell(g, m, stat) for g in self.groups] for m in self.metrics])
        return self.metrics, self.groups, values.reshape(len(self.metrics), len(self.groups))

    def table4(self, stat: str = "spearman") -> tuple[list[str], list[str], np.ndarray]:
        """Mean of Table 3 over the first group key: ``(rows, columns = metrics, values)``.

        Rows are the values of the remaining group keys (``"mean"`` when there is at most one
        key). NaN cells are left out of a mean; a mean of only NaN cells is NaN.
        """
        rows: list[str] = []
        members: dict[str, list[str]] = {}
        for g in self.groups:
            parts = g.split(SEP)
            rest = SEP.join(parts[1:]) if len(self.group_keys) > 1 else "mean"
            if rest not in members:
                rows.append(rest)
                members[rest] = []
            members[rest].append(g)
        values = np.full((len(rows), len(self.metrics)), math.nan)
        for i, r in enumerate(rows):
            for j, m in enumerate(self.metrics):
                cells = np.array([self.cell(g, m, stat) for g in members[r]])
                if np.isfinite(cells).any():
                    values[i, j] = float(np.nanmean(cells))
        return rows, self.metrics, values

    def notes(self) -> list[str]:
        return [f"{r.group} / {r.metric}: {r.note}" for r in self.rows if r.note]


def _label(value: Any) -> str:
    return "-" if value is None else str(value)


def _present(runs: Sequence[RunRecord], keys: Sequence[str]) -> list[str]:
    """The keys at least one run has (``params.dataset.corruption`` is optional)."""
    return [k for k in keys if any(r.value(k) is not None for r in runs)]


def correlation_table(
    runs: Sequence[RunRecord],
    downstream: str = "probe/logreg/test_acc",
    group_by: Sequence[str] = ("params.dataset.name", "params.dataset.corruption._target_"),
    metric_prefix: str = "diag/",
    metrics: Sequence[str] | None = None,
    exclude: Sequence[str] = (),
    average_by: str | None = None,
) -> Report:
    """Per-group Spearman / Kendall correlation of every diagnostic with ``downstream``.

    Args:
        runs: the runs of a sweep (any order).
        downstream: the metric the diagnostics should predict (default:
            ``probe/logreg/test_acc``).
        group_by: ``params.x`` / ``tags.x`` / ``metrics.x`` keys; keys that no run has are
            dropped, and no key at all means one group ``"all"``.
        metric_prefix: metrics starting with this are correlated (default: ``"diag/"``).
        metrics: an explicit list instead of the prefix (default: ``None``).
        exclude: metric names to leave out (e.g. ``diag/selfcluster_zero_rows``).
        average_by: a key (as in ``group_by``) whose value names one data point: the runs of a
            group that share it are averaged (mean of the finite values of every metric and of
            ``downstream``) before correlating, as Tsitsulin et al. average their 10 embeddings
            per target degree. With ``metrics.data/avg_degree`` the achieved degree, every target
            ``t`` at or above a graph's own degree (all the original graph) is one point. Runs
            without the key are points of their own (default: ``None``, every run is a point).

    Returns:
        a :class:`Report`; runs without a finite ``downstream`` value are left out.
    """
    used = [r for r in runs if math.isfinite(r.metrics.get(downstream, math.nan))]
    keys = _present(used, group_by)
    if metrics is None:
        names = sorted(
            {m for r in used for m in r.metrics if m.startswith(metric_prefix) and m != downstream}
        )
    else:
        names = list(metrics)
    names = [m for m in names if m not in set(exclude)]
    grouped: dict[str, list[RunRecord]] = {}
    for r in used:
        label = SEP.join(_label(r.value(k)) for k in keys) if keys else ALL
        grouped.setdefault(label, []).append(r)
    groups = sorted(grouped)
    rows: list[CorrelationRow] = []
    points: dict[str, list[tuple[str, float, float]]] = {m: [] for m in names}
    point_names: dict[str, list[str]] = {m: [] for m in names}
    for g in groups:
        members = _average(grouped[g], average_by, [downstream, *names])
        labels = _point_names(grouped[g], average_by)
        y = [r[downstream] for r in members]
        for m in names:
            x = [r.get(m, math.nan) for r in members]
            rho, tau, n, note = correlation(x, y)
            rows.append(CorrelationRow(g, m, n, rho, tau, note))
            points[m].extend((g, a, b) for a, b in zip(x, y) if math.isfinite(a))
            point_names[m].extend(nm for nm, a in zip(labels, x) if math.isfinite(a))
    return Report(
        list(keys),
        groups,
        names,
        rows,
        downstream,
        points,
        len(used),
        average_by,
        _baseline_rows(grouped, groups, downstream),
        _separation_rows(used, names),
        point_names,
    )


def _baseline_rows(
    grouped: dict[str, list[RunRecord]], groups: Sequence[str], downstream: str
) -> list[BaselineRow]:
    found = baseline_key(downstream)
    if found is None:
        return []
    key, higher = found
    out = []
    for g in groups:
        pairs = [
            (r.metrics[downstream], r.metrics[key])
            for r in grouped[g]
            if math.isfinite(r.metrics.get(key, math.nan))
        ]
        if not pairs:
            continue
        trained, base = (np.array(v, dtype=float) for v in zip(*pairs))
        gain = trained - base if higher else base - trained
        std = float(gain.std(ddof=1)) if gain.size > 1 else math.nan
        out.append(
            BaselineRow(
                g, len(pairs), float(trained.mean()), float(base.mean()), float(gain.mean()), std
            )
        )
    return out


def _separation_rows(runs: Sequence[RunRecord], names: Sequence[str]) -> list[SeparationRow]:
    out = []
    for m in names:
        if not m.startswith("diag/"):
            continue
        twin = "diag_baseline/" + m.split("/", 1)[1]
        pairs = [
            (r.metrics[m], r.metrics[twin])
            for r in runs
            if math.isfinite(r.metrics.get(m, math.nan))
            and math.isfinite(r.metrics.get(twin, math.nan))
        ]
        if not pairs:
            continue
        trained, base = (np.array(v, dtype=float) for v in zip(*pairs))
        out.append(
            SeparationRow(
                m,
                len(pairs),
                float(trained.mean()),
                float(base.mean()),
                float((trained > base).mean()),
            )
        )
    return out


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


def _point_names(runs: Sequence[RunRecord], key: str | None) -> list[str]:
    """The names of :func:`_average`'s points, in its order."""
    if key is None:
        return [r.run_name or r.run_id[:8] for r in runs]
    names: dict[str, None] = {}
    for i, r in enumerate(runs):
        value = r.value(key)
        names.setdefault(f"#{i}" if value is None else _point_label(value), None)
    return [f"{key}={n}" for n in names]


def _average(
    runs: Sequence[RunRecord], key: str | None, names: Sequence[str]
) -> list[dict[str, float]]:
    """The metrics ``names`` of each data point: one per run, or with ``key`` one per value of
    ``key`` (mean of the finite values of the runs sharing it; NaN when none is finite)."""
    if key is None:
        return [{m: r.metrics.get(m, math.nan) for m in names} for r in runs]
    buckets: dict[str, list[RunRecord]] = {}
    for i, r in enumerate(runs):
        value = r.value(key)
        label = f"#{i}" if value is None else _point_label(value)
        buckets.setdefault(label, []).append(r)
    points = []
    for members in buckets.values():
        point = {}
        for m in names:
            vals = [r.metrics.get(m, math.nan) for r in members]
            finite = [v for v in vals if math.isfinite(v)]
            point[m] = float(np.mean(finite)) if finite else math.nan
        points.append(point)
    return points


def _point_label(value: Any) -> str:
    """A float metric and its string param spell the same number the same way."""
    try:
        return f"{float(value):.6g}"
    except (TypeError, ValueError):
        return str(value)


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------


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


def run_report(cfg: DictConfig) -> Report:
    """Select runs, correlate, write and log the tables; prints the Markdown report.

    With ``parent_run_id`` the files go to the parent run under ``report/``; otherwise a new run
    tagged ``graphssl.role=report`` is created in the selected experiment.
    """
    store = TrackingStore.from_config(cfg)
    out_dir = Path(str(cfg.get("output_dir") or tempfile.mkdtemp(prefix="graphssl-report-")))
    parent = cfg.get("parent_run_id")
    experiment = cfg.get("experiment_name") or (None if parent else str(cfg.logger.experiment_name))
    runs = artifacts.select_runs(
        store,
        experiment=experiment,
        parent_run_id=parent,
        filter_string=cfg.get("filter"),
        statuses=tuple(cfg.get("statuses") or ("FINISHED",)),
    )
    if not runs:
        raise ValueError(
            f"no runs selected (experiment_name={experiment!r}, parent_run_id={parent!r},"
            f" filter={cfg.get('filter')!r}) in {store.tracking_uri}"
        )
    report = correlation_table(
        runs,
        downstream=str(cfg.downstream),
        group_by=list(cfg.group_by or []),
        metric_prefix=str(cfg.metric_prefix),
        metrics=list(cfg.metrics) if cfg.get("metrics") else None,
        exclude=list(cfg.get("exclude") or []),
        average_by=cfg.get("average_by"),
    )
    if report.n_runs == 0:
        raise ValueError(
            f"none of the {len(runs)} selected runs has the downstream metric "
            f"{cfg.downstream!r}; set downstream=<metric> (e.g. supervised/test_acc)"
        )
    if not report.metrics:
        raise ValueError(f"no metric starting with {cfg.metric_prefix!r} in the selected runs")
    paths, text = write_outputs(report, out_dir)
    metrics = report_metrics(report)
    tags = {
        "graphssl.report.downstream": str(cfg.downstream),
        "graphssl.report.group_by": ",".join(report.group_keys),
        "graphssl.report.n_runs": str(report.n_runs),
        "graphssl.report.average_by": str(cfg.get("average_by")),
    }
    if parent:
        artifacts.log_folder(store, str(parent), out_dir, "report")
        artifacts.log_metrics_to(store, str(parent), metrics)
        artifacts.set_tags_on(store, str(parent), tags)
        where = f"parent run {parent}, artifacts under report/"
    else:
        assert experiment is not None
        with store.start_run(
            str(cfg.run_name),
            experiment_name=experiment,
            tags={artifacts.ROLE_TAG: "report", **tags},
        ) as tracker:
            params = flatten(OmegaConf.to_container(cfg, resolve=True))  # type: ignore[arg-type]
            tracker.log_params({k: v for k, v in params.items() if not k.startswith("paths.")})
            tracker.log_metrics(metrics)
            for p in paths:
                tracker.log_artifact(p)
            where = f"report run {tracker.run_id}"
    print(text)
    print(f"\n(logged to {where}; files in {out_dir})")
    return report
