"""The summary a sweep's parent run carries: its best child, a table of children and a figure.

:func:`summarise_parent` is called when the sweep ends (:mod:`graphssl.tracking.sweep`). It
reads the children back from the store, so it works whatever launcher ran them:

- ``children.csv``: one row per child — run id and name, status, the value of each swept key
  (the child's own overrides), the optimized metric and the key probe/diagnostic metrics;
- ``figures/children.png``: the optimized metric per child, labelled by its swept values;
- the best child by the optimized metric per group of children (``sweep_best_by``, by default
  per ``dataset.name``: accuracies on different datasets do not compare): the tags
  ``best/<group>/child_run_id`` and ``best/<group>/child_run_name`` and the metric
  ``best/<group>/<optimized_metric>``; with one group also the tags ``best_child_run_id``,
  ``best_child_run_name`` and the metric ``best/<optimized_metric>``; the groups' best are
  appended to the parent's description (``mlflow.note.content``);
- the Optuna sweeper's ``optimization_results.yaml`` (when the sweep folder has one) as an
  artifact and as the params ``best_params.<key>`` and the metric ``best/optuna_value``.
"""

from __future__ import annotations

import csv
import io
import logging
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from graphssl.tracking import mlflow_store

__all__ = [
    "best_lines",
    "best_per_group",
    "child_label",
    "children_table",
    "group_of",
    "parse_overrides",
    "summarise_parent",
    "swept_keys",
]

log = logging.getLogger(__name__)

#: how the children figure is saved: cropped to what is drawn, long tick labels included
FIGURE_SAVE_KWARGS = {"bbox_inches": "tight"}
#: metric columns of ``children.csv`` besides the optimized metric and the probes
_KEY_METRICS = ("diag/rankme",)


def parse_overrides(text: str) -> dict[str, str]:
    """``"a=1 +b=x"`` → ``{"a": "1", "b": "x"}`` (the ``graphssl.overrides`` tag's format)."""
    out: dict[str, str] = {}
    for token in text.split():
        if "=" not in token:
            continue
        key, value = token.split("=", 1)
        out[key.lstrip("+~")] = value
    return out


def swept_keys(task_overrides: Iterable[str], sweeper_params: Iterable[str] = ()) -> list[str]:
    """The keys a sweep varies: its sweep overrides (``k=a,b``, ``range(...)``) and the
    sweeper's own search space (``hydra.sweeper.params``, e.g. Optuna's)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    keys: list[str] = []
    try:
        parsed = OverridesParser.create().parse_overrides(list(task_overrides))
    except Exception:  # an override Hydra parsed once already; never fail the sweep's close
        parsed = []
    for o in parsed:
        if o.is_sweep_override():
            keys.append(o.get_key_element().lstrip("+~"))
    for k in sweeper_params:
        if str(k) not in keys:
            keys.append(str(k))
    return keys


def child_label(overrides: dict[str, str], keys: Sequence[str]) -> str:
    """``"trainer.epochs=50,model=dgi"``: the swept values of one child (empty when none)."""
    return ",".join(f"{k}={overrides[k]}" for k in keys if k in overrides)


def _metric_columns(children: Sequence[Any], optimized_metric: str) -> list[str]:
    names: set[str] = set()
    for child in children:
        for k in child.data.metrics:
            if k.startswith("probe/") and k.rsplit("/", 1)[-1] in ("test_acc", "val_acc"):
                names.add(k)
    cols = [optimized_metric]
    cols += [k for k in sorted(names) if k != optimized_metric]
    cols += [k for k in _KEY_METRICS if k not in cols]
    return cols


def children_table(
    children: Sequence[Any], keys: Sequence[str], optimized_metric: str
) -> tuple[list[str], list[dict[str, Any]]]:
    """Header and rows of ``children.csv`` (children in start order)."""
    ordered = sorted(children, key=lambda r: (r.info.start_time or 0, r.info.run_id))
    metric_cols = _metric_columns(ordered, optimized_metric)
    header = ["run_id", "run_name", "status", *keys, *metric_cols]
    rows = []
    for child in ordered:
        ov = parse_overrides(child.data.tags.get("graphssl.overrides", ""))
        row: dict[str, Any] = {
            "run_id": child.info.run_id,
            "run_name": child.info.run_name,
            "status": child.info.status,
        }
        row.update({k: ov.get(k, "") for k in keys})
        row.update({k: child.data.metrics.get(k, "") for k in metric_cols})
        rows.append(row)
    return header, rows


def _best(
    children: Sequence[Any], metric: str, direction: str
) -> tuple[Any, float] | tuple[None, None]:
    scored = [
        (c, float(c.data.metrics[metric]))
        for c in children
        if c.info.status == "FINISHED"
        and metric in c.data.metrics
        and not math.isnan(float(c.data.metrics[metric]))
    ]
    if not scored:
        return None, None
    pick = min if direction == "minimize" else max
    return pick(scored, key=lambda cv: cv[1])


def group_of(child: Any, keys: Sequence[str]) -> str:
    """The child's values of ``keys`` joined by ``/`` (from its params, else its overrides;
    ``?`` for a key it has neither of); ``""`` when ``keys`` is empty."""
    overrides = parse_overrides(child.data.tags.get("graphssl.overrides", ""))
    return "/".join(str(child.data.params.get(k, overrides.get(k, "?"))) for k in keys)


def best_per_group(
    children: Sequence[Any], metric: str, direction: str, keys: Sequence[str]
) -> dict[str, tuple[Any, float]]:
    """``{group: (best child, its value)}`` for each group of :func:`group_of` that has a
    finished child with ``metric``, in the order the groups first appear among ``children``."""
    groups: dict[str, list[Any]] = {}
    for child in sorted(children, key=lambda r: (r.info.start_time or 0, r.info.run_id)):
        groups.setdefault(group_of(child, keys), []).append(child)
    out: dict[str, tuple[Any, float]] = {}
    for group, members in groups.items():
        best, value = _best(members, metric, direction)
        if best is not None and value is not None:
            out[group] = (best, value)
    return out


def _key_part(group: str) -> str:
    """``group`` as a part of an MLflow tag or metric key (letters, digits, ``_-. /``)."""
    return re.sub(r"[^\w\-. /]", "_", group) or "_"


def best_lines(
    best: dict[str, dict[str, Any]], metric: str, direction: str, keys: Sequence[str]
) -> list[str]:
    """What a terminal and the parent's description say about the best children: one line per
    group, ``<group>: <run name> (run <id>) <metric> = <value>``."""
    if not best:
        return [f"no finished child logged {metric}"]
    per = f" per {', '.join(keys)}" if keys else ""
    width = max(len(g) for g in best)
    lines = [f"best child by {metric} ({direction}){per}:"]
    for group, b in best.items():
        head = f"  {group:<{width}}  " if keys else "  "
        lines.append(f"{head}{b['run_name']} (run {b['run_id']})  {metric} = {b['value']:.4f}")
    return lines


def _figure(rows: list[dict[str, Any]], keys: Sequence[str], metric: str, title: str) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [child_label({k: str(r[k]) for k in keys}, keys) or str(r["run_name"]) for r in rows]
    values = [float(r[metric]) if r[metric] != "" else math.nan for r in rows]
    fig, ax = plt.subplots(figsize=(max(4.0, 0.6 * len(rows) + 2), 4.0))
    ax.bar(range(len(rows)), values, color="tab:blue")
    ax.set_xticks(range(len(rows)), labels, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel(metric)
    ax.set_xlabel("child run (swept values)")
    ax.set_title(title)
    # no fig.tight_layout(): labels of many swept values do not fit its grid, and it then only
    # warns ("Tight layout not applied"); the figure is saved with bbox_inches="tight" instead
    return fig


def _optuna_results(sweep_dir: Path) -> dict[str, Any] | None:
    path = sweep_dir / "optimization_results.yaml"
    if not path.is_file():
        return None
    from omegaconf import OmegaConf

    data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    return {str(k): v for k, v in data.items()} if isinstance(data, dict) else None


def summarise_parent(
    client: Any,
    run_id: str,
    children: Sequence[Any],
    *,
    optimized_metric: str | None,
    direction: str = "maximize",
    keys: Sequence[str] = (),
    sweep_dir: str | Path | None = None,
    best_by: Sequence[str] = (),
) -> dict[str, Any]:
    """Log the sweep summary onto the parent ``run_id``; returns what was logged (``"best"``:
    ``{group: {"run_id", "run_name", "value"}}``).

    Args:
        client: the store's ``MlflowClient``.
        run_id: the parent run.
        children: the parent's child runs (``client.search_runs`` results).
        optimized_metric: the metric the best child maximises (``direction``); ``None``: no best.
        direction: ``"maximize"`` or ``"minimize"``.
        keys: the swept keys (the table's and the figure's labels).
        sweep_dir: the sweep folder (for Optuna's ``optimization_results.yaml``).
        best_by: config keys (as the children logged them as params, e.g. ``dataset.name``)
            whose values group the children; the best child is chosen within each group.
    """
    out: dict[str, Any] = {}
    metric = optimized_metric or ""
    columns = [*keys, *(k for k in best_by if k not in keys)]
    header, rows = children_table(children, columns, metric or "diag/rankme")
    by_id = {c.info.run_id: c for c in children}
    for row in rows:
        for k in best_by:
            if row.get(k, "") == "":  # a grouping key not swept: the child's param
                row[k] = by_id[row["run_id"]].data.params.get(k, "")
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=header)
    writer.writeheader()
    writer.writerows(rows)
    client.log_text(run_id, buf.getvalue(), "children.csv")
    out["children.csv"] = len(rows)
    if metric:
        best = best_per_group(children, metric, direction, best_by)
        out["best"] = {
            group: {"run_id": c.info.run_id, "run_name": c.info.run_name, "value": value}
            for group, (c, value) in best.items()
        }
        points = []
        for group, (child, value) in best.items():
            if best_by:
                part = _key_part(group)
                client.set_tag(run_id, f"best/{part}/child_run_id", child.info.run_id)
                client.set_tag(run_id, f"best/{part}/child_run_name", child.info.run_name)
                points.append((f"best/{part}/{metric}", value, 0))
        groups = {group_of(c, best_by) for c in children}
        if len(best) == 1 and len(groups) == 1:  # one group: the sweep's best child
            ((child, value),) = best.values()
            client.set_tag(run_id, "best_child_run_id", child.info.run_id)
            client.set_tag(run_id, "best_child_run_name", child.info.run_name)
            points.append((f"best/{metric}", value, 0))
            out["best_child_run_id"] = child.info.run_id
            out[f"best/{metric}"] = value
        if points:
            mlflow_store.log_metrics(client, run_id, points)
        note = client.get_run(run_id).data.tags.get("mlflow.note.content", "")
        lines = best_lines(out["best"], metric, direction, best_by)
        client.set_tag(run_id, "mlflow.note.content", "\n\n".join([note, "\n".join(lines)]).strip())
        if rows:
            parent = client.get_run(run_id)
            fig = _figure(rows, keys, metric, f"{parent.info.run_name}: {metric} per child")
            try:
                client.log_figure(
                    run_id, fig, "figures/children.png", save_kwargs=FIGURE_SAVE_KWARGS
                )
            finally:
                import matplotlib.pyplot as plt

                plt.close(fig)
            out["figure"] = "figures/children.png"
    if sweep_dir is not None:
        results = _optuna_results(Path(sweep_dir))
        if results is not None:
            client.log_artifact(run_id, str(Path(sweep_dir) / "optimization_results.yaml"))
            params = results.get("best_params") or {}
            best_params = {f"best_params.{k}": v for k, v in params.items()}
            mlflow_store.log_params(client, run_id, best_params)
            if isinstance(results.get("best_value"), int | float):
                mlflow_store.log_metrics(
                    client, run_id, [("best/optuna_value", float(results["best_value"]), 0)]
                )
            out["best_params"] = params
    return out
