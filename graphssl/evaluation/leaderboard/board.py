"""The leaderboard itself: run records grouped into rows, each probe's cells computed over a row's
seeds, beside the published figure."""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphssl.evaluation.correlation import RunValues, baseline_key
from graphssl.evaluation.leaderboard.published import Published, same_name
from graphssl.evaluation.leaderboard.variance import VarianceSplit, variance_split

__all__ = [
    "DEFAULT_FACTORS",
    "DEFAULT_SAME_EXCEPT",
    "Leaderboard",
    "LeaderboardRow",
    "ProbeCell",
    "Stat",
    "leaderboard",
    "method_label",
    "selection_notes",
    "selection_protocol",
    "stat",
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
            if (r.method, same_name(r.dataset), r.variant) == (method, same_name(dataset), variant):
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
    figures = {(same_name(f.method), same_name(f.dataset), f.probe, f.metric): f for f in published}
    rows = []
    for (method, dataset, variant), members in sorted(grouped.items()):
        cells = {}
        for p in wanted:
            cells[p] = _cell(
                members,
                p,
                metric,
                figures.get((same_name(method), same_name(dataset), p, metric)),
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
