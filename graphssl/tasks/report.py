"""``graphssl-report``: which unsupervised diagnostic predicts downstream accuracy?

Reads the ``report`` config (``conf/report.yaml``), selects the runs of an MLflow experiment or
the children of a sweep parent (:func:`graphssl.tracking.inputs.select_report_runs`), correlates
every diagnostic with the downstream metric per group
(:func:`graphssl.evaluation.correlation.correlation_table`), writes the tables and the scatter
grid (:func:`graphssl.evaluation.report.write_outputs`) and logs them: to the sweep parent under
``report/`` when one is given, else to a new run tagged ``graphssl.role=report``.
:func:`run_report` is the task the CLI calls.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from graphssl.evaluation.correlation import Report, correlation_table
from graphssl.evaluation.report import report_metrics, write_outputs
from graphssl.tracking import artifacts
from graphssl.tracking.inputs import select_report_runs
from graphssl.tracking.mlflow_store import flatten
from graphssl.tracking.store import TrackingStore

log = logging.getLogger(__name__)

__all__ = ["run_report"]


def run_report(cfg: DictConfig) -> Report:
    """Select runs, correlate, write and log the tables; prints the Markdown report.

    With ``parent_run_id`` the files go to the parent run under ``report/``; otherwise a new run
    tagged ``graphssl.role=report`` is created in the selected experiment.
    """
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
