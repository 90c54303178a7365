"""A leaderboard of trained runs: one row per (method, dataset[, variant]), one column group per
probe, beside the published figures.

:func:`leaderboard` takes plain run records (a run id and name, metrics, params and a
``value(key)`` lookup, as :class:`~graphssl.evaluation.correlation.RunValues`) and returns a
:class:`Leaderboard`. Per row and probe ``p`` it gives the mean, standard deviation (``ddof=1``)
and count over the row's runs of ``probe/<p>/<metric>``, of the untrained baseline
``probe/<p>/baseline_<metric>`` and of the gain (trained − untrained per run, or untrained −
trained where lower is better, so a positive gain means training helped), and the published
figure with its source and the difference to it. Per row it also gives the epochs trained
(``train/epochs``), the selected epoch (``select/best_epoch``, 1-based) where the runs select
their weights on a validation probe, the training time (``time/train_seconds``), the peak
memory (``mem/peak_rss_gb``, the largest over the runs), and the params in which the row's runs
differ beyond their seeds (a row meant to hold seeds of one configuration that mixes two is
flagged, never silently averaged).

:func:`variance_split` splits the spread of a row's values into the seeds that caused it (the
pretraining seed, the dataset split's seed, the probe's seed) where the runs carry them as
separate params: a main-effects analysis of variance. :func:`published_figures` validates the
published figures (``conf/published.yaml``); :func:`write_leaderboard` writes the Markdown, HTML
and CSV files a report run logs.
"""

from __future__ import annotations

import csv
import fnmatch
import html
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graphssl.evaluation.correlation import RunValues, baseline_key

__all__ = [
    "DEFAULT_FACTORS",
    "DEFAULT_SAME_EXCEPT",
    "Leaderboard",
    "LeaderboardRow",
    "ProbeCell",
    "Published",
    "Stat",
    "VarianceSplit",
    "leaderboard",
    "leaderboard_markdown",
    "leaderboard_metrics",
    "method_label",
    "published_figures",
    "selection_notes",
    "selection_protocol",
    "sources",
    "stat",
    "table",
    "variance_split",
    "write_leaderboard",
]

#: params that may differ between the runs of one row: the seeds (``seed`` and every param
#: resolved from it, such as ``dataset.seed`` and the probes' seeds), and what names or places a
#: run rather than configures it
DEFAULT_SAME_EXCEPT = (
    "seed",
    "*.seed",
    "logger.run_name",
    "logger.experiment_name",
    "logger.tracking_uri",
    "paths.*",
    "dataset.data_dir",
    "dataset.cache_dir",
    "ckpt_path",
    "trainer.progress",
)
#: the seeds a row's spread is split into: ``{factor: key}``; ``{probe}`` is the probe's name
DEFAULT_FACTORS = {
    "pretraining": "params.seed",
    "split": "params.dataset.seed",
    "probe": "params.eval.probes.{probe}.seed",
}


@dataclass(frozen=True)
class Stat:
    """Mean and sample standard deviation (``ddof=1``; NaN below 2 values) of ``n`` finite
    values; ``n == 0`` gives NaN for both."""

    mean: float
    std: float
    n: int


def stat(values: Sequence[float]) -> Stat:
    """The :class:`Stat` of the finite ``values`` (NaN, e.g. a run without a baseline, is left
    out)."""
    finite = np.array([v for v in values if math.isfinite(v)], dtype=np.float64)
    if finite.size == 0:
        return Stat(math.nan, math.nan, 0)
    std = float(finite.std(ddof=1)) if finite.size > 1 else math.nan
    return Stat(float(finite.mean()), std, int(finite.size))


@dataclass(frozen=True)
class Published:
    """A published figure: ``value`` (in the runs' units) of ``probe/<probe>/<metric>`` for
    ``method`` on ``dataset``, and where it was published."""

    method: str
    dataset: str
    probe: str
    metric: str
    value: float
    source: str


def _norm(name: str) -> str:
    """Names compare case-insensitively, ``-`` and ``_`` alike (``Cora`` = ``cora``,
    ``ogbn-arxiv`` = ``ogbn_arxiv``)."""
    return name.casefold().replace("-", "_")


def published_figures(entries: Sequence[Mapping[str, Any]], scale: float = 1.0) -> list[Published]:
    """The published figures of a data file's ``figures`` list, each value times ``scale``
    (e.g. 0.01 for percentages against accuracies logged as fractions).

    Raises:
        ValueError: an entry lacks a field, has a value that is not a number, or repeats a
            (method, dataset, probe, metric) figure; the message names the entry.
    """
    out: list[Published] = []
    seen: dict[tuple[str, str, str, str], int] = {}
    required = ("method", "dataset", "probe", "metric", "value", "source")
    for i, entry in enumerate(entries):
        missing = [k for k in required if entry.get(k) in (None, "")]
        if missing:
            raise ValueError(
                f"published figure #{i} ({dict(entry)!r}) lacks {missing}; expected every "
                f"entry to give {list(required)}"
            )
        try:
            value = float(entry["value"]) * scale
        except (TypeError, ValueError):
            raise ValueError(
                f"published figure #{i}: value {entry['value']!r} is not a number"
            ) from None
        fig = Published(
            str(entry["method"]),
            str(entry["dataset"]),
            str(entry["probe"]),
            str(entry["metric"]),
            value,
            str(entry["source"]),
        )
        key = (_norm(fig.method), _norm(fig.dataset), fig.probe, fig.metric)
        if key in seen:
            raise ValueError(
                f"published figures #{seen[key]} and #{i} both give {fig.method} on "
                f"{fig.dataset} (probe {fig.probe}, {fig.metric}); expected one figure each"
            )
        seen[key] = i
        out.append(fig)
    return out


def method_label(target: Any) -> str:
    """The method's name from its ``model._target_``: the module of a built-in method
    (``graphssl.methods.cca_ssg.CCASSG`` → ``cca_ssg``, the name of its ``conf/model`` file),
    else the class name (``mypkg.MyMethod`` → ``MyMethod``); ``-`` when absent."""
    if target is None:
        return "-"
    parts = str(target).split(".")
    if len(parts) == 4 and parts[:2] == ["graphssl", "methods"]:
        return parts[2]
    return parts[-1]


@dataclass(frozen=True)
class VarianceSplit:
    """The spread of ``n`` values split into the seeds that caused it.

    ``total`` is the variance (``ddof=0``) of the values; ``components[factor]`` the variance of
    that factor's level means (each level weighted by its runs: the factor's sum of squares over
    ``n``), ``residual`` what the factors' main effects leave (interactions and anything not
    seeded by them). In a balanced crossed design (every combination of the factors' levels
    equally often) the components and the residual add up to ``total``; ``balanced`` says
    whether the runs form one. Factors whose levels split the runs identically are confounded
    and appear as one component named ``a = b``; a factor the runs do not carry, or that is
    constant over them, is named in ``notes``.
    """

    n: int
    total: float
    components: dict[str, float]
    residual: float
    balanced: bool
    notes: tuple[str, ...] = ()

    def share(self, name: str) -> float:
        """``components[name]`` (or ``"residual"``) as a fraction of ``total``."""
        value = self.residual if name == "residual" else self.components[name]
        return value / self.total if self.total > 0 else math.nan


def _partition(levels: Sequence[Any]) -> tuple[int, ...]:
    """The runs' level indices in order of first appearance (equal partitions compare equal)."""
    first: dict[str, int] = {}
    return tuple(first.setdefault(str(v), len(first)) for v in levels)


def variance_split(values: Sequence[float], factors: Mapping[str, Sequence[Any]]) -> VarianceSplit:
    """Split the variance of ``values`` into the main effects of ``factors``.

    Args:
        values: one value per run.
        factors: ``{name: the level of each run}`` (e.g. ``{"pretraining": [0, 0, 1, 1], ...}``);
            a factor with a ``None`` level is not carried by every run and is left out.

    Returns:
        a :class:`VarianceSplit`.

    Raises:
        ValueError: a factor does not give one level per value.
    """
    y = np.asarray(values, dtype=np.float64)
    n = int(y.size)
    mean = float(y.mean()) if n else math.nan
    total = float(((y - mean) ** 2).mean()) if n else math.nan
    notes: list[str] = []
    used: dict[str, tuple[int, ...]] = {}
    for name, levels in factors.items():
        if len(levels) != n:
            raise ValueError(f"factor {name!r} gives {len(levels)} levels for {n} values")
        if any(v is None for v in levels):
            some = any(v is not None for v in levels)
            notes.append(f"{name}: not carried by {'every run' if some else 'the runs'}")
            continue
        part = _partition(levels)
        if len(set(part)) < 2:
            notes.append(f"{name}: constant over the runs")
            continue
        same = next((k for k, p in used.items() if p == part), None)
        if same is not None:  # confounded: one component for both
            used[f"{same} = {name}"] = used.pop(same)
            continue
        used[name] = part
    notes += [
        f"{', '.join(name.split(' = '))} are confounded (their levels split the runs alike): "
        "one component"
        for name in used
        if " = " in name
    ]
    components: dict[str, float] = {}
    for name, part in used.items():
        idx = np.asarray(part)
        ss = 0.0
        for level in set(part):
            members = y[idx == level]
            ss += members.size * (float(members.mean()) - mean) ** 2
        components[name] = ss / n
    balanced = True
    if used:
        parts = list(used.values())
        cells: dict[tuple[int, ...], int] = {}
        for i in range(n):
            key = tuple(p[i] for p in parts)
            cells[key] = cells.get(key, 0) + 1
        expected = math.prod(len(set(p)) for p in parts)
        balanced = len(cells) == expected and len(set(cells.values())) == 1
        if not balanced:
            notes.append("unbalanced design: the components need not add up to the total")
    residual = total - sum(components.values())
    return VarianceSplit(n, total, components, residual, balanced, tuple(notes))


@dataclass(frozen=True)
class ProbeCell:
    """One probe's figures in one row: ``probe/<probe>/<metric>`` over the runs, the untrained
    baseline and the gain (NaN with ``n == 0`` where no run logged them), the published figure
    (``None`` when there is none), with ``decompose`` the variance split, and how the probe
    selected its regularisation in these runs (:func:`selection_protocol`; ``""`` when it
    selects nothing or the runs do not say)."""

    probe: str
    metric: str
    value: Stat
    baseline: Stat
    gain: Stat
    published: Published | None = None
    split: VarianceSplit | None = None
    selection: str = ""

    @property
    def difference(self) -> float:
        """Mean minus the published figure (NaN without one)."""
        if self.published is None or self.value.n == 0:
            return math.nan
        return self.value.mean - self.published.value


@dataclass(frozen=True)
class LeaderboardRow:
    """One (method, dataset, variant): its runs, one :class:`ProbeCell` per probe, epochs,
    selected epoch (1-based; NaN where no run selects), training seconds, the peak memory in
    GB (the largest of the runs'), and the params in which its runs differ beyond
    ``same_except`` (empty: the runs are seeds of one configuration)."""

    method: str
    dataset: str
    variant: str
    run_ids: tuple[str, ...]
    seeds: tuple[str, ...]
    cells: dict[str, ProbeCell]
    epochs: Stat
    selected_epoch: Stat
    train_seconds: Stat
    peak_rss_gb: float
    differs: tuple[str, ...] = ()


@dataclass
class Leaderboard:
    """Result of :func:`leaderboard`: rows sorted by method, dataset and variant; the probes
    (columns) in order; the metric; the variant keys; the runs used; and notes (runs left
    out, with why)."""

    rows: list[LeaderboardRow]
    probes: list[str]
    metric: str
    variant_by: list[str] = field(default_factory=list)
    n_runs: int = 0
    notes: list[str] = field(default_factory=list)

    def row(self, method: str, dataset: str, variant: str = "") -> LeaderboardRow:
        """The row of ``(method, dataset, variant)``.

        Raises:
            KeyError: there is none (the message lists the rows there are).
        """
        for r in self.rows:
            if (r.method, _norm(r.dataset), r.variant) == (method, _norm(dataset), variant):
                return r
        have = [(r.method, r.dataset, r.variant) for r in self.rows]
        raise KeyError(f"no leaderboard row {(method, dataset, variant)!r}; rows: {have}")


def _value_str(v: Any) -> str:
    return "-" if v is None else str(v)


def _differs(runs: Sequence[RunValues], same_except: Sequence[str]) -> tuple[str, ...]:
    """The param names whose values are not the same in all ``runs`` (absent counts as a
    value), leaving out the names matching a pattern of ``same_except``."""
    names = sorted({k for r in runs for k in _params(r)})
    out = []
    for k in names:
        if any(fnmatch.fnmatchcase(k, pat) for pat in same_except):
            continue
        if len({_params(r).get(k) for r in runs}) > 1:
            out.append(k)
    return tuple(out)


def _params(run: RunValues) -> Mapping[str, str]:
    return getattr(run, "params", None) or {}


def _metric(run: RunValues, key: str) -> float:
    v = run.metrics.get(key, math.nan)
    return float(v) if v is not None else math.nan


def _probes_of(runs: Sequence[RunValues], metric: str) -> list[str]:
    """Every probe ``p`` some run logged ``probe/<p>/<metric>`` for, sorted."""
    pat = re.compile(rf"^probe/([^/]+)/{re.escape(metric)}$")
    found = {m[1] for r in runs for k in r.metrics if (m := pat.match(k))}
    return sorted(found)


def leaderboard(
    runs: Sequence[RunValues],
    *,
    metric: str = "test_acc",
    probes: Sequence[str] | None = None,
    method_key: str = "params.model._target_",
    dataset_key: str = "params.dataset.name",
    variant_by: Sequence[str] = (),
    published: Sequence[Published] = (),
    same_except: Sequence[str] = DEFAULT_SAME_EXCEPT,
    seed_key: str = "params.seed",
    decompose: bool = False,
    factors: Mapping[str, str] = DEFAULT_FACTORS,
) -> Leaderboard:
    """One row per (method, dataset, variant) of ``runs``, one :class:`ProbeCell` per probe.

    Args:
        runs: the runs (any order); those that logged none of the probes' ``metric`` are left
            out with a note.
        metric: each probe's metric (default ``test_acc``: ``probe/<p>/test_acc``).
        probes: the probes to show, in order (default: every probe a run logged ``metric``
            for).
        method_key: the key naming the method; a ``model._target_`` is shortened by
            :func:`method_label`.
        dataset_key: the key naming the dataset.
        variant_by: more keys that split a (method, dataset) into rows (e.g.
            ``params.dataset.split``).
        published: the published figures, matched by method, dataset (case-insensitive, ``-``
            as ``_``), probe and metric.
        same_except: patterns (``fnmatch``) of params that may differ within a row; any other
            param that differs is listed in the row's ``differs``.
        seed_key: the key whose values a row lists as its seeds.
        decompose: split each probe's spread into ``factors`` for rows with at least 3 runs.
        factors: ``{factor: key}`` for ``decompose``; ``{probe}`` in a key is the probe's name.

    Raises:
        ValueError: no run logged ``probe/<p>/<metric>`` for any of the probes (the message
            names the metric and the probes the runs did log).
    """
    wanted = list(probes) if probes else _probes_of(runs, metric)
    keys = [f"probe/{p}/{metric}" for p in wanted]
    used = [r for r in runs if any(math.isfinite(_metric(r, k)) for k in keys)]
    if not used:
        logged = sorted({k for r in runs for k in r.metrics if k.startswith("probe/")})
        raise ValueError(
            f"none of the {len(runs)} selected runs logged {keys or f'probe/<p>/{metric}'}; "
            f"expected trained runs with probe results (they logged {logged[:12]}"
            f"{' ...' if len(logged) > 12 else ''}); set leaderboard.metric or "
            "leaderboard.probes"
        )
    kept = {id(r) for r in used}
    notes = [
        f"run {r.run_name or r.run_id} ({r.run_id}) left out: no {' / '.join(keys)}"
        for r in runs
        if id(r) not in kept
    ]
    grouped: dict[tuple[str, str, str], list[RunValues]] = {}
    for r in used:
        method = r.value(method_key)
        label = method_label(method) if method_key.endswith("_target_") else _value_str(method)
        key = (
            label,
            _value_str(r.value(dataset_key)),
            ", ".join(f"{k.split('.', 1)[-1]}={_value_str(r.value(k))}" for k in variant_by),
        )
        grouped.setdefault(key, []).append(r)
    figures = {(_norm(f.method), _norm(f.dataset), f.probe, f.metric): f for f in published}
    rows = []
    for (method, dataset, variant), members in sorted(grouped.items()):
        cells = {}
        for p in wanted:
            cells[p] = _cell(
                members,
                p,
                metric,
                figures.get((_norm(method), _norm(dataset), p, metric)),
                factors if decompose else None,
            )
        selected = [_metric(r, "select/best_epoch") for r in members]
        peaks = [v for r in members if math.isfinite(v := _metric(r, "mem/peak_rss_gb"))]
        rows.append(
            LeaderboardRow(
                method=method,
                dataset=dataset,
                variant=variant,
                run_ids=tuple(r.run_id for r in members),
                seeds=tuple(_value_str(r.value(seed_key)) for r in members),
                cells=cells,
                epochs=stat([_metric(r, "train/epochs") for r in members]),
                selected_epoch=stat(selected),
                train_seconds=stat([_metric(r, "time/train_seconds") for r in members]),
                peak_rss_gb=max(peaks) if peaks else math.nan,
                differs=_differs(members, [*same_except, *_param_names(variant_by)]),
            )
        )
    return Leaderboard(rows, wanted, metric, list(variant_by), len(used), notes)


def _param_names(keys: Sequence[str]) -> list[str]:
    """The param names among ``keys`` (``params.x`` → ``x``): constant within a row."""
    return [k.removeprefix("params.") for k in keys if k.startswith("params.")]


def _cell(
    runs: Sequence[RunValues],
    probe: str,
    metric: str,
    figure: Published | None,
    factors: Mapping[str, str] | None,
) -> ProbeCell:
    key = f"probe/{probe}/{metric}"
    values = [_metric(r, key) for r in runs]
    found = baseline_key(key)
    base_key, higher = found if found is not None else (f"probe/{probe}/baseline_{metric}", True)
    bases = [_metric(r, base_key) for r in runs]
    gains = [(v - b) if higher else (b - v) for v, b in zip(values, bases)]
    split = None
    finite = [i for i, v in enumerate(values) if math.isfinite(v)]
    if factors is not None and len(finite) >= 3:
        levels = {
            name: [runs[i].value(k.format(probe=probe)) for i in finite]
            for name, k in factors.items()
        }
        split = variance_split([values[i] for i in finite], levels)
    return ProbeCell(
        probe,
        metric,
        stat(values),
        stat(bases),
        stat(gains),
        figure,
        split,
        selection_protocol(runs, probe),
    )


def selection_protocol(runs: Sequence[RunValues], probe: str) -> str:
    """How ``probe`` selected its L2 strength in ``runs``, read from what it logged:
    ``"k-fold inner CV"`` where it logged ``probe/<p>/inner_folds`` (the folds it used; several
    values joined with ``/``), ``"validation split"`` where it logged only its selected
    ``probe/<p>/weight_decay`` (a tag, or a metric), ``""`` where it logged neither (a probe
    with nothing to select)."""
    folds = sorted(
        {round(v) for r in runs if math.isfinite(v := _metric(r, f"probe/{probe}/inner_folds"))}
    )
    if folds:
        return f"{'/'.join(map(str, folds))}-fold inner CV"
    # a train run logs the strength it selected as a tag
    if any(r.value(f"probe/{probe}/weight_decay") not in (None, "") for r in runs):
        return "validation split"
    return ""


def selection_notes(board: Leaderboard) -> list[str]:
    """One line per probe that selects its L2 strength: the protocol and the datasets it was
    used on, e.g. ``logreg: validation split (Cora, CiteSeer); 5-fold inner CV (MUTAG)``."""
    out = []
    for p in board.probes:
        used: dict[str, list[str]] = {}
        for r in board.rows:
            how = r.cells[p].selection
            if how and r.dataset not in used.setdefault(how, []):
                used[how].append(r.dataset)
        if used:
            out.append(
                f"{p}: " + "; ".join(f"{how} ({', '.join(names)})" for how, names in used.items())
            )
    return out


# ---------------------------------------------------------------- outputs


def _num(v: float, scale: float, digits: int) -> str:
    return "—" if not math.isfinite(v) else f"{v * scale:.{digits}f}"


def _pm(s: Stat, scale: float, digits: int, sign: bool = False) -> str:
    """``mean ± std`` (``mean`` alone for one value, ``—`` for none)."""
    if s.n == 0:
        return "—"
    mean = f"{s.mean * scale:+.{digits}f}" if sign else f"{s.mean * scale:.{digits}f}"
    return mean if s.n < 2 else f"{mean} ± {s.std * scale:.{digits}f}"


def _epochs(row: LeaderboardRow) -> str:
    if row.epochs.n == 0:
        return "—"
    text = f"{row.epochs.mean:.0f}"
    if row.selected_epoch.n:
        text += f" (sel. {row.selected_epoch.mean:.0f})"
    return text


def _flag(row: LeaderboardRow, limit: int = 3) -> str:
    if not row.differs:
        return ""
    names = ", ".join(row.differs[:limit])
    more = f" +{len(row.differs) - limit}" if len(row.differs) > limit else ""
    return f"⚠ differ: {names}{more}"


def sources(board: Leaderboard) -> list[str]:
    """The sources of the published figures the table shows, in order of first appearance
    (a figure's cell refers to its source as ``[i]``, 1-based)."""
    out: list[str] = []
    for r in board.rows:
        for p in board.probes:
            fig = r.cells[p].published
            if fig is not None and fig.source not in out:
                out.append(fig.source)
    return out


def table(board: Leaderboard, scale: float = 100.0, digits: int = 1) -> list[list[str]]:
    """The leaderboard as display cells (header first): probe figures times ``scale``; a
    published figure names its source by its number in :func:`sources`."""
    refs = {src: i + 1 for i, src in enumerate(sources(board))}
    head = ["method", "dataset"] + (["variant"] if board.variant_by else []) + ["seeds"]
    for p in board.probes:
        head += [f"{p} {board.metric}", f"{p} untrained", f"{p} gain", f"{p} published"]
    head += ["epochs", "train s", "peak RSS GB", "flag"]
    out = [head]
    for r in board.rows:
        line = [r.method, r.dataset] + ([r.variant] if board.variant_by else [])
        line.append(str(len(r.run_ids)))
        for p in board.probes:
            c = r.cells[p]
            value = _pm(c.value, scale, digits)
            if c.value.n not in (0, len(r.run_ids)):
                value += f" (n={c.value.n})"
            pub = "—"
            if c.published is not None:
                diff = c.difference
                d = f" ({diff * scale:+.{digits}f})" if math.isfinite(diff) else ""
                pub = f"{c.published.value * scale:.{digits}f}{d} [{refs[c.published.source]}]"
            line += [value, _pm(c.baseline, scale, digits), _pm(c.gain, scale, digits, True), pub]
        line += [
            _epochs(r),
            _num(r.train_seconds.mean, 1.0, 0),
            _num(r.peak_rss_gb, 1.0, 2),
            _flag(r),
        ]
        out.append(line)
    return out


def _split_table(board: Leaderboard) -> list[list[str]]:
    """The variance splits (header first): total standard deviation (``ddof=0``) and each
    factor's share of the variance in %."""
    factors: list[str] = []
    for r in board.rows:
        for c in r.cells.values():
            if c.split is not None:
                factors += [f for f in c.split.components if f not in factors]
    head = ["method", "dataset", "probe", "n", "std (ddof=0)", *factors, "residual", "notes"]
    out = [head]
    for r in board.rows:
        for p in board.probes:
            s = r.cells[p].split
            if s is None:
                continue
            shares = [
                "—" if f not in s.components else _num(s.share(f), 100.0, 0) + " %" for f in factors
            ]
            label = f"{r.dataset} ({r.variant})" if r.variant else r.dataset
            out.append(
                [
                    r.method,
                    label,
                    p,
                    str(s.n),
                    f"{math.sqrt(s.total):.4f}",
                    *shares,
                    _num(s.share("residual"), 100.0, 0) + " %",
                    "; ".join(s.notes),
                ]
            )
    return out


def _md(cells: list[list[str]]) -> str:
    head, *body = cells
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in line) + " |" for line in body]
    return "\n".join(lines)


def leaderboard_markdown(board: Leaderboard, scale: float = 100.0, digits: int = 1) -> str:
    """The leaderboard as Markdown: the table, the variance splits (when computed), notes."""
    unit = " (×100)" if scale == 100.0 else ""
    md = [
        f"# Leaderboard: probe/<probe>/{board.metric}{unit}, mean ± std over seeds "
        f"({board.n_runs} runs)",
        "",
        _md(table(board, scale, digits)),
        "",
    ]
    refs = sources(board)
    if refs:
        md += ["Published: " + "; ".join(f"[{i + 1}] {src}" for i, src in enumerate(refs)), ""]
    protocols = selection_notes(board)
    if protocols:
        md += ["L2 strength selected by: " + " · ".join(protocols), ""]
    flagged = [r for r in board.rows if r.differs]
    if flagged:
        md += ["⚠: the row's runs differ in more than their seeds:", ""]
        md += [f"- {r.method} / {r.dataset}: {', '.join(r.differs)}" for r in flagged]
        md += [""]
    splits = _split_table(board)
    if len(splits) > 1:
        md += ["## Variance split (share of each seed in the spread)", "", _md(splits), ""]
    if board.notes:
        md += ["## Notes", "", *(f"- {n}" for n in board.notes), ""]
    return "\n".join(md)


def _html(board: Leaderboard, scale: float, digits: int) -> str:
    def render(cells: list[list[str]]) -> str:
        head, *body = cells
        rows = ["<tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in head) + "</tr>"]
        rows += [
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in line) + "</tr>" for line in body
        ]
        return "<table>\n" + "\n".join(rows) + "\n</table>"

    parts = [
        "<!DOCTYPE html>",
        '<html><head><meta charset="utf-8"><title>Leaderboard</title>',
        "<style>table{border-collapse:collapse;font:13px sans-serif}"
        "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}"
        "td:first-child,td:nth-child(2){text-align:left}</style></head><body>",
        f"<h1>Leaderboard: probe/&lt;probe&gt;/{html.escape(board.metric)}, mean ± std over "
        f"seeds ({board.n_runs} runs)</h1>",
        render(table(board, scale, digits)),
    ]
    refs = sources(board)
    if refs:
        parts += [
            "<p>Published: "
            + "; ".join(f"[{i + 1}] {html.escape(src)}" for i, src in enumerate(refs))
            + "</p>"
        ]
    protocols = selection_notes(board)
    if protocols:
        parts += ["<p>L2 strength selected by: " + html.escape(" · ".join(protocols)) + "</p>"]
    splits = _split_table(board)
    if len(splits) > 1:
        parts += ["<h2>Variance split</h2>", render(splits)]
    if board.notes:
        parts += ["<ul>", *(f"<li>{html.escape(n)}</li>" for n in board.notes), "</ul>"]
    parts.append("</body></html>")
    return "\n".join(parts)


def _csv_rows(board: Leaderboard) -> list[list[Any]]:
    """One line per (row, probe) in the runs' own units, full precision."""
    head = [
        "method",
        "dataset",
        "variant",
        "probe",
        "metric",
        "mean",
        "std",
        "n",
        "baseline_mean",
        "baseline_std",
        "baseline_n",
        "gain_mean",
        "gain_std",
        "published",
        "published_source",
        "difference",
        "selection",
        "epochs",
        "selected_epoch",
        "train_seconds",
        "peak_rss_gb",
        "seeds",
        "differs",
        "run_ids",
    ]
    out: list[list[Any]] = [head]
    for r in board.rows:
        for p in board.probes:
            c = r.cells[p]
            out.append(
                [
                    r.method,
                    r.dataset,
                    r.variant,
                    p,
                    c.metric,
                    c.value.mean,
                    c.value.std,
                    c.value.n,
                    c.baseline.mean,
                    c.baseline.std,
                    c.baseline.n,
                    c.gain.mean,
                    c.gain.std,
                    "" if c.published is None else c.published.value,
                    "" if c.published is None else c.published.source,
                    c.difference,
                    c.selection,
                    r.epochs.mean,
                    r.selected_epoch.mean,
                    r.train_seconds.mean,
                    r.peak_rss_gb,
                    " ".join(r.seeds),
                    " ".join(r.differs),
                    " ".join(r.run_ids),
                ]
            )
    return out


def write_leaderboard(
    board: Leaderboard, folder: Path, scale: float = 100.0, digits: int = 1
) -> tuple[list[Path], str]:
    """Write ``leaderboard.md``, ``leaderboard.html``, ``leaderboard.csv`` (and
    ``variance_split.csv`` when computed) into ``folder``.

    Returns:
        ``(paths, markdown)``; the Markdown is what the CLI prints.
    """
    folder.mkdir(parents=True, exist_ok=True)
    text = leaderboard_markdown(board, scale, digits)
    md = folder / "leaderboard.md"
    md.write_text(text)
    page = folder / "leaderboard.html"
    page.write_text(_html(board, scale, digits))
    data = folder / "leaderboard.csv"
    with data.open("w", newline="") as f:
        csv.writer(f).writerows(_csv_rows(board))
    paths = [md, page, data]
    splits = _split_table(board)
    if len(splits) > 1:
        p = folder / "variance_split.csv"
        with p.open("w", newline="") as f:
            csv.writer(f).writerows(splits)
        paths.append(p)
    return paths, text


_KEY = re.compile(r"[^0-9A-Za-z_\-.]+")


def leaderboard_metrics(board: Leaderboard) -> dict[str, float]:
    """``leaderboard/<probe>/<method>/<dataset>[/<variant>]`` = the row's mean (finite only)."""
    out = {}
    for r in board.rows:
        row = "/".join(_KEY.sub("_", s) for s in (r.method, r.dataset, r.variant) if s)
        for p in board.probes:
            v = r.cells[p].value.mean
            if math.isfinite(v):
                out[f"leaderboard/{_KEY.sub('_', p)}/{row}"] = v
    return out
