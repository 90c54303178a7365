"""Rank correlation between a score and a downstream metric, and the per-group correlation
tables of a sweep ("which diagnostic predicts downstream accuracy?").

:func:`correlation` is the Spearman / Kendall pair every comparison uses (EMIR rankings,
diagnostics, study tables). :func:`correlation_table` groups the runs of a sweep by configurable
keys (default: dataset name and corruption type) and correlates, per group and across runs,
every ``diag/*`` metric with a downstream metric (default ``probe/logreg/test_acc``). The tables
are shaped like those of Tsitsulin et al. (2023):

* Table 3: rows = metrics, columns = groups, values = ρ per group;
* Table 4: the unweighted mean of Table 3 over the first group key (the dataset), one row per
  value of the remaining keys (the corruption), columns = metrics.

Where the runs logged the untrained-encoder baseline, two more results: the downstream metric
per group beside its baseline and their gain, and, per diagnostic, its mean on trained and
untrained encoders and how often the trained one is the higher — whether the diagnostic
separates trained from untrained.

Runs are plain records (:class:`RunValues`: a run id and name, metrics, and a ``value(key)``
lookup); constant inputs (or fewer than 3 runs) give NaN with a note, never an error.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from graphssl.evaluation.probe import HEADLINE

__all__ = [
    "ALL",
    "SEP",
    "BaselineRow",
    "CorrelationRow",
    "Report",
    "RunValues",
    "SeparationRow",
    "baseline_key",
    "correlation",
    "correlation_table",
    "metric_safe",
]

ALL = "all"
#: joins the values of several group keys into one label (not "|": Markdown tables)
SEP = " / "

_SAFE = re.compile(r"[^0-9A-Za-z_\-. /]")


def metric_safe(name: str) -> str:
    """``name`` with the characters metric keys may not hold (MLflow's rule) replaced by ``_``."""
    return _SAFE.sub("_", name)


def correlation(x: Sequence[float], y: Sequence[float]) -> tuple[float, float, int, str]:
    """Spearman and Kendall correlation of the finite pairs of ``x`` and ``y``.

    ``scipy.stats`` semantics (average ranks for ties). Fewer than 3 finite pairs or a constant
    input give NaN with a note instead of an error.

    Returns:
        ``(spearman, kendall, n_pairs, note)``; ``note`` is ``""`` when both are defined.
    """
    from scipy.stats import kendalltau, spearmanr

    a = np.asarray(x, dtype=np.float64)
    b = np.asarray(y, dtype=np.float64)
    keep = np.isfinite(a) & np.isfinite(b)
    a, b = a[keep], b[keep]
    n = int(a.size)
    if n < 3:
        return math.nan, math.nan, n, f"only {n} finite pair(s); need at least 3"
    if np.all(a == a[0]) or np.all(b == b[0]):
        which = "metric" if np.all(a == a[0]) else "downstream"
        return math.nan, math.nan, n, f"{which} is constant over the {n} runs"
    rho = float(spearmanr(a, b).statistic)
    tau = float(kendalltau(a, b).statistic)
    return rho, tau, n, ""


class RunValues(Protocol):
    """What :func:`correlation_table` reads of a run (a tracking ``RunRecord`` is one)."""

    @property
    def run_id(self) -> str: ...

    @property
    def run_name(self) -> str: ...

    @property
    def metrics(self) -> Mapping[str, float]: ...

    def value(self, key: str) -> Any:
        """``params.x`` / ``metrics.x`` / ``tags.x``; ``None`` if absent."""
        ...


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


def _present(runs: Sequence[RunValues], keys: Sequence[str]) -> list[str]:
    """The keys at least one run has (``params.dataset.corruption`` is optional)."""
    return [k for k in keys if any(r.value(k) is not None for r in runs)]


def correlation_table(
    runs: Sequence[RunValues],
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
    grouped: dict[str, list[RunValues]] = {}
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
    grouped: dict[str, list[RunValues]], groups: Sequence[str], downstream: str
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


def _separation_rows(runs: Sequence[RunValues], names: Sequence[str]) -> list[SeparationRow]:
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


def _point_names(runs: Sequence[RunValues], key: str | None) -> list[str]:
    """The names of :func:`_average`'s points, in its order."""
    if key is None:
        return [r.run_name or r.run_id[:8] for r in runs]
    names: dict[str, None] = {}
    for i, r in enumerate(runs):
        value = r.value(key)
        names.setdefault(f"#{i}" if value is None else _point_label(value), None)
    return [f"{key}={n}" for n in names]


def _average(
    runs: Sequence[RunValues], key: str | None, names: Sequence[str]
) -> list[dict[str, float]]:
    """The metrics ``names`` of each data point: one per run, or with ``key`` one per value of
    ``key`` (mean of the finite values of the runs sharing it; NaN when none is finite)."""
    if key is None:
        return [{m: r.metrics.get(m, math.nan) for m in names} for r in runs]
    buckets: dict[str, list[RunValues]] = {}
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
