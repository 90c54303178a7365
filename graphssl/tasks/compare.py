"""``graphssl-compare``: rank trained embedders by information sufficiency (EMIR).

Darrin et al., *When is an Embedding Model More Promising than Another?*, NeurIPS 2024
(https://arxiv.org/abs/2406.07640). Reads the ``compare`` config (``conf/compare.yaml``), loads the
embeddings of the selected MLflow runs (their ``embeddings.pt`` artifacts) or ``.pt`` files
(:func:`graphssl.tracking.inputs.load_embedders`), aligns them row by row on their ids and
compares them (:func:`graphssl.evaluation.emir.compare.compare_embeddings`), writes the tables and
figures (:func:`graphssl.evaluation.emir.outputs.write_outputs`) and logs everything to a new
MLflow run tagged ``graphssl.role=compare``. :func:`run_compare` is the task the CLI calls.
"""

from __future__ import annotations

import logging
import re
import tempfile
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from graphssl.evaluation.emir.compare import (
    CompareResult,
    align_embedders,
    compare_embeddings,
    emir_config,
    ranking_table,
)
from graphssl.evaluation.emir.outputs import write_outputs
from graphssl.tasks.signals import TaskSignals
from graphssl.tracking import artifacts
from graphssl.tracking.inputs import compare_experiment, load_embedders
from graphssl.tracking.mlflow_store import flatten
from graphssl.tracking.store import TrackingStore

log = logging.getLogger(__name__)

__all__ = ["run_compare"]


def _mapping(node: DictConfig) -> dict[str, object]:
    values = OmegaConf.to_container(node, resolve=True)
    assert isinstance(values, dict)
    return {str(k): v for k, v in values.items()}


def run_compare(cfg: DictConfig) -> CompareResult:
    """Select, load, align and compare embedders; log a ``graphssl.role=compare`` run.

    A selection of no run is refused before anything is logged. The compare run is created
    next, so every later failure (a run without embeddings, a row mismatch, fewer than 2
    embedders) ends it ``FAILED`` with the error as its tag.
    SIGTERM is handled like Ctrl-C (:class:`~graphssl.tasks.signals.TaskSignals`): the EMIR
    workers are ended and the run ends ``KILLED``.
    """
    with TaskSignals():
        return _compare(cfg)


def _require_selection(
    store: TrackingStore, experiment: str | None, parent: str | None, filter_string: str | None
) -> None:
    """Raise a ``ValueError`` naming the selection when it selects no run; with a ``filter``,
    the message lists the values the runs logged for each param the filter names (a filter
    compares exactly: ``'cora'`` does not select runs that logged ``Cora``)."""
    if artifacts.select_runs(
        store, experiment=experiment, parent_run_id=parent, filter_string=filter_string
    ):
        return
    where = f"experiment_name={experiment!r}" if experiment else f"parent_run_id={parent!r}"
    message = f"no FINISHED run selected by {where}"
    if filter_string:
        unfiltered = artifacts.select_runs(store, experiment=experiment, parent_run_id=parent)
        message += f" with filter={filter_string!r} ({len(unfiltered)} without the filter"
        for key in dict.fromkeys(re.findall(r"params\.(`[^`]+`|[\w.\-]+)", filter_string)):
            name = key.strip("`")
            values = sorted({r.params[name] for r in unfiltered if name in r.params})
            message += f"; params.{name} is one of {values}" if values else ""
        message += "; a filter compares values exactly, case included)"
    raise ValueError(
        f"{message} in {store.tracking_uri}; expected FINISHED graphssl runs with "
        f"embeddings.pt. No compare run was created."
    )


def _compare(cfg: DictConfig) -> CompareResult:
    store = TrackingStore.from_config(cfg)
    out_dir = Path(str(cfg.get("output_dir") or tempfile.mkdtemp(prefix="graphssl-compare-")))
    experiment = str(cfg.experiment_name) if cfg.get("experiment_name") else None
    parent = str(cfg.parent_run_id) if cfg.get("parent_run_id") else None
    run_ids = [str(r) for r in (cfg.get("run_ids") or [])]
    tags: dict[str, str] = {}
    for key, tag in (("experiment_name", "experiment"), ("parent_run_id", "parent_run_id")):
        if cfg.get(key):
            tags[f"graphssl.compare.{tag}"] = str(cfg.get(key))
    if cfg.get("filter"):
        tags["graphssl.compare.filter"] = str(cfg.filter)
    if experiment or parent:  # refused before the compare run exists: nothing to mark FAILED
        _require_selection(store, experiment, parent, cfg.get("filter"))
    target = compare_experiment(
        store,
        str(cfg.logger.experiment_name),
        experiment_name=experiment,
        parent_run_id=parent,
        run_ids=run_ids,
    )
    # a compare run left RUNNING by a killed graphssl-compare is marked KILLED here
    with store.start_run(
        str(cfg.run_name),
        experiment_name=target,
        tags=tags,
        role=("compare", "graphssl-compare"),
    ) as tracker:
        params = flatten(OmegaConf.to_container(cfg, resolve=True))  # type: ignore[arg-type]
        tracker.log_params({k: v for k, v in params.items() if not k.startswith("paths.")})
        with tempfile.TemporaryDirectory(prefix="graphssl-compare-dl-") as tmp:
            embedders, records = load_embedders(
                store,
                Path(tmp),
                experiment_name=experiment,
                parent_run_id=parent,
                run_ids=run_ids,
                filter_string=cfg.get("filter"),
                files=[str(p) for p in (cfg.get("embedding_files") or [])],
                downstream=str(cfg.downstream),
            )
        tracker.set_tags(
            {
                "graphssl.compare.input_run_ids": ",".join(r.run_id for r in records)[:5000],
                "graphssl.compare.embedders": ",".join(e.name for e in embedders)[:5000],
            }
        )
        for i, e in enumerate(embedders):
            tracker.set_tags({f"graphssl.compare.input.{i}": f"{e.name}={e.source}"})
        result = compare_embeddings(
            align_embedders(embedders),
            emir=emir_config(_mapping(cfg.emir)),
            downstream={e.name: e.downstream for e in embedders if e.downstream is not None},
            cross_encoder=_mapping(cfg.cross_encoder),
            resolution=float(cfg.graph.resolution),
            normalize_graph=bool(cfg.graph.normalize),
            community_seed=int(cfg.graph.seed),
            max_rows=cfg.get("max_rows"),
            seed=int(cfg.seed),
            progress=bool(cfg.get("progress", True)),
            max_dims=cfg.get("max_dims"),
        )
        tracker.log_metrics(result.metrics())
        runs = {e.name: e.run_id for e in embedders}
        for path in write_outputs(result, out_dir, str(cfg.downstream), runs):
            tracker.log_artifact(path)
        for label, note in result.notes.items():
            tracker.set_tags({f"graphssl.compare.note.{label}": note})
        print(
            f"EMIR comparison of {len(result.names)} embedders on {result.n_rows} rows "
            f"(MLflow run {tracker.run_id}; files in {out_dir})"
        )
        print(ranking_table(result, str(cfg.downstream)))
        if result.original_dims:
            print(
                f"max_dims={cfg.get('max_dims')}: {len(result.original_dims)} embedders were "
                "compared on their leading principal components (original widths "
                + ", ".join(f"{k} {d}" for k, d in sorted(result.original_dims.items()))
                + ")"
            )
        if result.caveat:
            tracker.set_tags({"graphssl.compare.caveat": result.caveat[:5000]})
            print(f"caveat: {result.caveat}")
        result.run_id = tracker.run_id
    log.info("compare run %s finished", result.run_id)
    return result
