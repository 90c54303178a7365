"""``graphssl-report``: which unsupervised diagnostic predicts downstream accuracy?

Reads the ``report`` config (``conf/report.yaml``), selects the runs of an MLflow experiment or
the children of a sweep parent (:func:`graphssl.tracking.inputs.select_report_runs`), correlates
every diagnostic with the downstream metric per group
(:func:`graphssl.evaluation.correlation.correlation_table`), writes the tables and the scatter
grid (:func:`graphssl.evaluation.report.write_outputs`) and logs them: to the sweep parent under
``report/`` when one is given, else to a new run tagged ``graphssl.role=report``.
:func:`run_report` is the task the CLI calls.

With ``kind=leaderboard`` it builds a leaderboard instead (:func:`run_leaderboard`): the runs
selected by :func:`graphssl.tracking.inputs.select_leaderboard_runs`, ranked by
:func:`graphssl.evaluation.leaderboard.leaderboard` beside the published figures of
``conf/published.yaml``, written as Markdown, HTML and CSV and logged the same way (under
``leaderboard/`` on a sweep parent).
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from graphssl.evaluation.correlation import Report, correlation_table
from graphssl.evaluation.leaderboard import (
    Leaderboard,
    Published,
    leaderboard,
    leaderboard_metrics,
    published_figures,
    write_leaderboard,
)
from graphssl.evaluation.report import report_metrics, write_outputs
from graphssl.package import config_dir
from graphssl.tracking import artifacts
from graphssl.tracking.inputs import (
    compare_experiment,
    select_leaderboard_runs,
    select_report_runs,
)
from graphssl.tracking.mlflow_store import flatten
from graphssl.tracking.store import TrackingStore

log = logging.getLogger(__name__)

__all__ = ["PUBLISHED_FILE", "load_published", "run_leaderboard", "run_report"]

#: the published figures a leaderboard shows unless ``leaderboard.published_file`` names others
PUBLISHED_FILE = config_dir() / "published.yaml"
KINDS = ("correlation", "leaderboard")


def run_report(cfg: DictConfig) -> Report | Leaderboard:
    """Select runs, correlate, write and log the tables; prints the Markdown report.

    With ``parent_run_id`` the files go to the parent run under ``report/``; otherwise a new run
    tagged ``graphssl.role=report`` is created in the selected experiment. ``kind=leaderboard``
    runs :func:`run_leaderboard` instead.

    Raises:
        ValueError: ``kind`` is not one of ``correlation`` and ``leaderboard``.
    """
    kind = str(cfg.get("kind") or "correlation")
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r} is not a report kind; expected one of {list(KINDS)}")
    if kind == "leaderboard":
        return run_leaderboard(cfg)
    store = TrackingStore.from_config(cfg)
    out_dir = Path(str(cfg.get("output_dir") or tempfile.mkdtemp(prefix="graphssl-report-")))
    parent = cfg.get("parent_run_id")
    experiment = cfg.get("experiment_name") or (None if parent else str(cfg.logger.experiment_name))
    runs = select_report_runs(
        store,
        experiment_name=experiment,
        parent_run_id=parent,
        filter_string=cfg.get("filter"),
        statuses=tuple(cfg.get("statuses") or ("FINISHED",)),
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
    assert parent or experiment is not None
    where = _log_report(
        store, cfg, parent, str(experiment), out_dir, "report", metrics, tags, paths
    )
    print(text)
    print(f"\n(logged to {where}; files in {out_dir})")
    return report


def load_published(path: str | Path | None = None) -> list[Published]:
    """The published figures of the YAML file ``path`` (default :data:`PUBLISHED_FILE`): a
    mapping with a ``figures`` list and an optional ``scale``.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: it is not such a mapping, or an entry is malformed.
    """
    path = Path(path or PUBLISHED_FILE)
    if not path.is_file():
        raise FileNotFoundError(
            f"leaderboard.published_file={str(path)!r} does not exist; expected a YAML file "
            "shaped like conf/published.yaml (scale, figures)"
        )
    data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    if not isinstance(data, dict) or not isinstance(data.get("figures"), list):
        raise ValueError(
            f"{path}: expected a mapping with a `figures` list (and an optional `scale`), "
            f"got {type(data).__name__}"
        )
    return published_figures(data["figures"], float(data.get("scale", 1.0)))


def run_leaderboard(cfg: DictConfig) -> Leaderboard:
    """Select the runs, rank them, write and log the leaderboard; prints it as Markdown.

    The runs are an experiment's, a sweep parent's children or ``run_ids``, narrowed by
    ``filter`` and ``statuses``; every setting of the table is under ``leaderboard``. With
    ``parent_run_id`` the files go to the parent under ``leaderboard/``; otherwise to a new run
    tagged ``graphssl.role=report`` (in the runs' experiment). Nothing is logged when the
    selection is empty or holds no probe results.
    """
    lb = cfg.leaderboard
    store = TrackingStore.from_config(cfg)
    out_dir = Path(str(cfg.get("output_dir") or tempfile.mkdtemp(prefix="graphssl-report-")))
    parent = cfg.get("parent_run_id")
    run_ids = [str(r) for r in (cfg.get("run_ids") or [])]
    experiment = cfg.get("experiment_name") or (
        None if parent or run_ids else str(cfg.logger.experiment_name)
    )
    runs = select_leaderboard_runs(
        store,
        experiment_name=experiment,
        parent_run_id=parent,
        run_ids=run_ids,
        filter_string=cfg.get("filter"),
        statuses=tuple(cfg.get("statuses") or ("FINISHED",)),
    )
    board = leaderboard(
        runs,
        metric=str(lb.metric),
        probes=[str(p) for p in lb.probes] if lb.get("probes") else None,
        method_key=str(lb.method_key),
        dataset_key=str(lb.dataset_key),
        variant_by=[str(k) for k in lb.get("variant_by") or []],
        published=load_published(lb.get("published_file")),
        same_except=[str(p) for p in lb.get("same_except") or []],
        decompose=bool(lb.get("decompose")),
        factors={str(k): str(v) for k, v in (lb.get("factors") or {}).items()},
    )
    paths, text = write_leaderboard(board, out_dir, float(lb.scale), int(lb.digits))
    metrics = leaderboard_metrics(board)
    tags = {
        "graphssl.report.kind": "leaderboard",
        "graphssl.report.n_runs": str(board.n_runs),
        "graphssl.report.rows": str(len(board.rows)),
    }
    target = None
    if not parent:
        target = compare_experiment(
            store, str(cfg.logger.experiment_name), experiment_name=experiment, run_ids=run_ids
        )
    where = _log_report(
        store, cfg, parent, str(target), out_dir, "leaderboard", metrics, tags, paths
    )
    print(text)
    print(f"\n(logged to {where}; files in {out_dir})")
    return board


def _log_report(
    store: TrackingStore,
    cfg: DictConfig,
    parent: str | None,
    experiment: str,
    out_dir: Path,
    folder: str,
    metrics: dict[str, float],
    tags: dict[str, str],
    paths: list[Path],
) -> str:
    """Log a report's files, metrics and tags under the sweep ``parent`` (in ``folder/``), or
    into a new report run of ``experiment``; returns where, in words."""
    if parent:
        artifacts.log_folder(store, str(parent), out_dir, folder)
        artifacts.log_metrics_to(store, str(parent), metrics)
        artifacts.set_tags_on(store, str(parent), tags)
        return f"parent run {parent}, artifacts under {folder}/"
    with store.start_run(
        str(cfg.run_name),
        experiment_name=experiment,
        tags=tags,
        role=("report", "graphssl-report"),
    ) as tracker:
        params = flatten(OmegaConf.to_container(cfg, resolve=True))  # type: ignore[arg-type]
        tracker.log_params({k: v for k, v in params.items() if not k.startswith("paths.")})
        tracker.log_metrics(metrics)
        for p in paths:
            tracker.log_artifact(p)
        return f"report run {tracker.run_id}"
