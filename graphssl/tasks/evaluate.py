"""The evaluate task: probe and diagnose the stored embeddings of finished runs again.

Selects runs by id (``run_id``), as the children of a sweep parent (``parent``) or by an MLflow
search filter (``filter``), reads each one's ``embeddings.pt`` and ``config.yaml``, rebuilds the
dataset it was trained on (from the data folder configured now), and runs the probes and
diagnostics of the ``eval`` config composed now — no training. The metrics go into the run
itself (default) or into a new child run of it (``as_child=true``). When the stored embeddings
cannot answer (no embeddings, no labels for a probe, rows or labels that differ from the
dataset's), :class:`EvaluationRefused` says why in one paragraph.

Stored embeddings answer a new eval config only when they came from the same training: the
re-probe rule (:func:`training_config`, :func:`stored_run_of`) compares every resolved key
except the probes (but not the one ``callbacks.selection`` chooses the weights with, which
shapes the embeddings), the diagnostics, figures, logging and paths (:data:`REPROBE_FREE`).
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from graphssl.data.base import DataModule
from graphssl.tasks._summary import summary_table
from graphssl.tasks.components import build_datamodule, build_evaluation, resolve_config
from graphssl.tracking import artifacts
from graphssl.tracking.artifacts import RunRecord
from graphssl.tracking.conventions import split_config_values
from graphssl.tracking.embeddings import Embeddings, fetch_embeddings
from graphssl.tracking.mlflow_store import flatten
from graphssl.tracking.store import TrackingStore
from graphssl.utils import seed_everything

__all__ = [
    "REPROBE_FREE",
    "Evaluated",
    "EvaluationRefused",
    "config_differences",
    "evaluate",
    "evaluate_run",
    "select",
    "stored_run_of",
    "training_config",
]

log = logging.getLogger(__name__)

ROLE = "evaluate"
#: metric prefixes an evaluation recomputes; the stored run's other metrics are kept
_RECOMPUTED = ("probe/", "diag/")

#: Keys that do not change a run's embeddings besides ``eval.probes.*`` (all of it but the
#: probe that ``callbacks.selection`` chooses the weights with), ``eval.diagnostics.*``,
#: ``logger.*`` and ``paths.*``: what a re-probe may differ in from the stored run.
REPROBE_FREE = (
    "eval.figures",
    "resume",
    "fail_fast",
    "optimized_metric",
    "sweep_best_by",
    "trainer.progress",
    "trainer.checkpoint_every",
    "dataset.data_dir",
    "dataset.cache_dir",
)
_FREE_PREFIXES = (
    "eval.diagnostics.",
    "eval.collapse.",  # the same settings in configs stored before they moved to callbacks.*
    "eval.diag_",
    "callbacks.monitor.",  # the diagnostics during training
    "callbacks.checkpoint",  # when checkpoints are written (trainer.checkpoint_every)
    "logger.",
    "paths.",
)


class EvaluationRefused(ValueError):
    """The stored run cannot answer what the eval config asks (the message says why)."""


@dataclass
class Evaluated:
    """One evaluated run.

    Attributes:
        run_id: the stored run.
        run_name: its display name.
        metrics: the new ``probe/*`` and ``diag/*`` metrics (and ``time/evaluate_seconds``).
        stored: the stored run's other metrics (``train/*``, ``select/*``, ...).
        logged_to: the run the metrics were logged into (``None`` with ``log=false``).
    """

    run_id: str
    run_name: str
    metrics: dict[str, float]
    stored: dict[str, float] = field(default_factory=dict)
    logged_to: str | None = None

    @property
    def all_metrics(self) -> dict[str, float]:
        """The stored run's metrics with the recomputed ones in place of the old."""
        return {**self.stored, **self.metrics}


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def select(store: TrackingStore, cfg: DictConfig) -> list[RunRecord]:
    """The runs ``cfg`` names: ``run_id`` (one or a list), ``parent`` (its FINISHED children)
    or ``filter`` (FINISHED runs of ``logger.experiment_name``); ``filter`` also narrows
    ``parent``.

    Raises:
        ValueError: none or both of ``run_id`` and ``parent``/``filter``, or nothing selected.
    """
    run_ids = _as_list(cfg.get("run_id"))
    parent, filter_string = cfg.get("parent"), cfg.get("filter")
    if bool(run_ids) == bool(parent or filter_string):
        raise ValueError(
            f"graphssl-evaluate selects runs with run_id=<id> (or a list), parent=<sweep parent "
            f"id> or filter=<MLflow search filter>; got run_id={cfg.get('run_id')!r}, "
            f"parent={parent!r}, filter={filter_string!r}"
        )
    if run_ids:
        return artifacts.select_runs(store, run_ids=run_ids)
    runs = artifacts.select_runs(
        store,
        parent_run_id=str(parent) if parent else None,
        experiment=None if parent else store.experiment_name,
        filter_string=str(filter_string) if filter_string else None,
    )
    if not runs:
        where = f"children of {parent}" if parent else f"experiment {store.experiment_name!r}"
        raise ValueError(
            f"no FINISHED runs selected ({where}, filter={filter_string!r}, in "
            f"{store.tracking_uri}); expected graphssl training runs with embeddings.pt"
        )
    return runs


def training_config(cfg: DictConfig) -> dict[str, object]:
    """The resolved keys of a training config that decide its run's embeddings: all but
    :data:`REPROBE_FREE`, the diagnostics, logging, paths and the probes — except the one
    ``callbacks.selection`` picks the weights with, which shapes the embeddings."""
    resolved = resolve_config(cfg)
    chooser = (
        (resolved.get("callbacks") or {}).get("selection") or resolved.eval.get("select") or {}
    )
    kept = (
        f"eval.probes.{chooser.get('probe', 'logreg')}."
        if chooser.get("every") is not None
        else None
    )
    container = OmegaConf.to_container(resolved, resolve=True)
    return {
        k: v
        for k, v in flatten(container).items()  # type: ignore[arg-type]
        if k not in REPROBE_FREE
        and not k.startswith(_FREE_PREFIXES)
        and (not k.startswith("eval.probes.") or (kept is not None and k.startswith(kept)))
    }


def config_differences(trained: dict[str, object], now: dict[str, object]) -> list[str]:
    """``key: stored -> now`` for every key whose value (or presence) differs."""
    missing = "<absent>"
    return [
        f"{k}: {trained.get(k, missing)!r} -> {now.get(k, missing)!r}"
        for k in sorted(trained.keys() | now.keys())
        if k not in trained or k not in now or trained[k] != now[k]
    ]


def stored_run_of(
    store: TrackingStore, candidates: Sequence[RunRecord], cfg: DictConfig, tmp: str | Path
) -> RunRecord:
    """The first of ``candidates`` (newest first) whose stored embeddings may be re-probed under
    the training config ``cfg``: the one whose :func:`training_config` equals ``cfg``'s.

    Raises:
        EvaluationRefused: no candidate, or none trained under ``cfg`` (the message names the
            newest one's differing keys).
    """
    if not candidates:
        raise EvaluationRefused("no stored run to re-probe")
    now = training_config(cfg)
    newest: list[str] = []
    for candidate in candidates:
        differences = config_differences(
            training_config(artifacts.stored_config(store, candidate, tmp)), now
        )
        if not differences:
            return candidate
        newest = newest or differences
    raise EvaluationRefused(
        f"none of the {len(candidates)} stored runs {candidates[0].run_name!r} was trained under "
        f"the config composed now; the newest, {candidates[0].run_id}, differs in {len(newest)} "
        f"keys ({', '.join(newest[:8])}); its embeddings may be probed again under other "
        f"probes (but not the one callbacks.selection chooses weights with), diagnostics, "
        f"figures and logging only"
    )


def _dataset_config(stored: DictConfig, cfg: DictConfig) -> DictConfig:
    """The stored run's config with the data folders configured now."""
    out = OmegaConf.create(OmegaConf.to_container(stored, resolve=True))
    assert isinstance(out, DictConfig)
    for key in ("data_dir", "cache_dir"):
        if key in out.dataset and key in cfg.paths:
            out.dataset[key] = str(cfg.paths[key])
    return out


def _check_fit(run: RunRecord, emb: Embeddings, dm: DataModule, probes: dict[str, Any]) -> None:
    """Refuse when the stored embeddings do not fit the dataset or the probes."""
    who = f"run {run.run_name or '?'!r} ({run.run_id})"
    z = emb.embeddings
    expected = dm.labels
    if expected is not None and expected.shape[0] != z.shape[0]:
        raise EvaluationRefused(
            f"{who} stored {z.shape[0]} embedding rows but dataset {dm.name!r} has "
            f"{expected.shape[0]} labelled rows now; expected the data the run was trained on "
            f"(check paths.data_dir and the dataset's version)"
        )
    if not probes:
        return
    if emb.labels is None:
        raise EvaluationRefused(
            f"{who} stored embeddings without labels, so the probes {sorted(probes)} cannot be "
            f"fitted; run diagnostics only (eval=diagnostics_only) or train again on a labelled "
            f"dataset"
        )
    if expected is None or not torch.equal(emb.labels.cpu(), expected.cpu()):
        shape = None if expected is None else tuple(expected.shape)
        raise EvaluationRefused(
            f"{who} stored {tuple(z.shape)} embeddings whose labels differ from the dataset's "
            f"({shape} labels of {dm.name!r} from {getattr(dm, 'data_dir', '?')}); expected the "
            f"data the run was trained on"
        )


def evaluate_run(
    store: TrackingStore, run: RunRecord, cfg: DictConfig, tmp: str | Path
) -> tuple[dict[str, float], DataModule, Embeddings, int]:
    """The ``probe/*`` and ``diag/*`` metrics of one stored run under ``cfg.eval``;
    also returns the dataset, the embeddings and the run's seed.

    Raises:
        EvaluationRefused: no embeddings or config stored, or embeddings that do not fit.
    """
    try:
        stored_cfg = artifacts.stored_config(store, run, tmp)
        emb = fetch_embeddings(store, run)
    except FileNotFoundError as err:
        raise EvaluationRefused(f"cannot evaluate run {run.run_id} again: {err}") from err
    data_cfg = _dataset_config(stored_cfg, cfg)
    seed = int(data_cfg.get("seed", 0))
    seed_everything(seed)
    dm = build_datamodule(data_cfg)
    evaluation = build_evaluation(cfg)
    evaluation.check(dm)  # kNN's k fitted to the splits, as before a training run
    _check_fit(run, emb, dm, evaluation.probes_for(str(getattr(dm, "task", "classification"))))
    z = emb.embeddings
    t0 = time.perf_counter()
    metrics: dict[str, float] = {}
    metrics.update(evaluation.diagnose(z))
    metrics.update(evaluation.probe_metrics(dm, z, emb.labels, seed))
    metrics["time/evaluate_seconds"] = time.perf_counter() - t0
    return metrics, dm, emb, seed


def _log(
    store: TrackingStore,
    run: RunRecord,
    cfg: DictConfig,
    metrics: dict[str, float],
    emb: Embeddings,
    seed: int,
) -> str:
    """Log into the run itself or a new child run; returns the run id logged into."""
    eval_yaml = OmegaConf.to_yaml(cfg.eval)
    # a probe's choices (weight decay, k, converged) are tags, as in the train task
    measured, config_values = split_config_values(metrics)
    figures = bool(cfg.eval.get("figures", False))
    if cfg.get("as_child", False):
        tags = {"graphssl.evaluate.of": run.run_id}
        experiment = artifacts.experiment_name_of(store, run.experiment_id)
        with store.start_run(
            f"{run.run_name or run.run_id[:8]}-evaluate",
            experiment_name=experiment,
            parent_run_id=run.run_id,
            tags=tags,
            role=(ROLE, "graphssl-evaluate"),
        ) as tracker:
            eval_params = flatten({"eval": OmegaConf.to_container(cfg.eval, resolve=True)})  # type: ignore[dict-item]
            tracker.log_params(eval_params)
            tracker.log_metrics(measured)
            tracker.set_tags(config_values)
            tracker.log_text(eval_yaml, "evaluate/eval.yaml")
            if figures:
                from graphssl.tasks.components import build_evaluation

                drawn = build_evaluation(cfg).figures(
                    emb.embeddings, emb.labels, seed=seed, title=tracker.run_name
                )
                for name, figure in drawn.items():
                    tracker.log_figure(figure, name)
            return tracker.run_id
    artifacts.log_metrics_to(store, run.run_id, measured)
    artifacts.set_tags_on(
        store,
        run.run_id,
        {**config_values, "graphssl.evaluated": time.strftime("%Y-%m-%dT%H:%M:%S")},
    )
    artifacts.log_text_to(store, run.run_id, eval_yaml, "evaluate/eval.yaml")
    if figures:
        title = run.run_name or run.run_id
        drawn = build_evaluation(cfg).figures(emb.embeddings, emb.labels, seed=seed, title=title)
        for name, figure in drawn.items():
            artifacts.log_figure_to(store, run.run_id, figure, name)
    return run.run_id


def evaluate(
    cfg: DictConfig,
    *,
    runs: Sequence[RunRecord] | None = None,
    store: TrackingStore | None = None,
) -> list[Evaluated]:
    """Evaluate the selected runs (:func:`select`, or ``runs``) again; print and log each.

    ``store`` is the caller's :class:`TrackingStore` of the same store (default: one built
    from ``cfg``).

    Raises:
        EvaluationRefused: a selected run cannot be evaluated (nothing is logged for the runs
            after it).
        ValueError: no or ambiguous selection.
    """
    resolved = resolve_config(cfg)
    store = store or TrackingStore.from_config(resolved)
    chosen = list(runs) if runs is not None else select(store, resolved)
    out: list[Evaluated] = []
    with tempfile.TemporaryDirectory(prefix="graphssl-evaluate-") as tmp:
        for run in chosen:
            metrics, _, emb, seed = evaluate_run(store, run, resolved, tmp)
            logged_to = (
                _log(store, run, resolved, metrics, emb, seed)
                if resolved.get("log", True)
                else None
            )
            stored = {k: v for k, v in run.metrics.items() if not k.startswith(_RECOMPUTED)}
            result = Evaluated(run.run_id, run.run_name, metrics, stored, logged_to)
            out.append(result)
            where = f"logged to MLflow run {logged_to}" if logged_to else "not logged"
            print(
                summary_table(
                    result.all_metrics,
                    f"{run.run_name or run.run_id}  (evaluated again; {where})",
                )
            )
    return out
