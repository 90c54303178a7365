"""The train task: seed → datamodule → method → train → extract → diagnose → probe → log.

``train(cfg)`` is importable and tested; :func:`graphssl.cli.main` only wraps it in
``@hydra.main`` (the ``graphssl`` command, config ``conf/train.yaml``).
"""

from __future__ import annotations

import inspect
import logging
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from hydra.conf import HydraConf
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from graphssl.data.base import DataModule
from graphssl.evaluation.runner import run_diagnostics, run_probes
from graphssl.methods.base import SSLMethod
from graphssl.tasks.components import (
    build_datamodule,
    build_method,
    build_probes,
    configured_extraction,
    probe_configs,
    resolve_config,
    set_threads,
)
from graphssl.tracking.embeddings import log_embeddings
from graphssl.tracking.identity import checkpoint_path, config_hash, resume_target
from graphssl.tracking.mlflow_store import flatten
from graphssl.tracking.run import MLflowMetricsCallback, RunTracker
from graphssl.tracking.stale import HASH_TAG, owner_tags
from graphssl.tracking.store import TrackingStore
from graphssl.tracking.sweep import read_parent
from graphssl.training.trainer import Callback
from graphssl.utils import git_commit, package_versions, seed_everything

__all__ = ["build_callbacks", "run_name", "summary_table", "train"]

log = logging.getLogger(__name__)

#: metric keys the summary table shows besides the probes' headline values
_SUMMARY_KEYS = (
    "diag/rankme",
    "diag/effective_rank",
    "diag/alpha_req",
    "diag/stable_rank",
    "diag/nesum",
    "diag/coherence",
    "diag/self_cluster",
    "select/best_epoch",
    "select/best_val_acc",
    "supervised/test_acc",
    "train/final_loss",
    "train/epochs",
    "time/train_seconds",
    "time/probe_seconds",
    "time/total_seconds",
    "time/batches_per_second",
    "mem/peak_rss_gb",
)
_PROBE_KEYS = (
    "val_acc",
    "test_acc",
    "test_acc_std",
    "val_ap",
    "test_ap",
    "test_mae",
    "weight_decay",
)


def _hydra() -> HydraConf | None:
    return HydraConfig.get() if HydraConfig.initialized() else None


def run_name(cfg: DictConfig) -> str:
    """``logger.run_name``, else ``<model>-<dataset>``."""
    name = cfg.logger.get("run_name")
    if name:
        return str(name)
    model = str(cfg.model.get("_target_", "model")).rsplit(".", 1)[-1].lower()
    return f"{model}-{cfg.dataset.get('name', 'data')}"


def _params(cfg: DictConfig) -> dict[str, Any]:
    flat = flatten(OmegaConf.to_container(cfg, resolve=True))  # type: ignore[arg-type]
    # model.encoder.* repeats encoder.* (the model config interpolates it)
    return {k: v for k, v in flat.items() if not k.startswith("model.encoder.")}


def _tags(hc: HydraConf | None) -> dict[str, str]:
    tags = {f"version.{k}": v for k, v in package_versions().items()}
    tags["git.commit"] = git_commit()
    if hc is not None:
        tags["graphssl.overrides"] = " ".join(hc.overrides.task)
        tags["graphssl.output_dir"] = str(hc.runtime.output_dir)
        tags["graphssl.role"] = "job" if hc.mode == RunMode.MULTIRUN else "run"
    return tags


def summary_table(metrics: dict[str, float], header: str) -> str:
    """A short plain-text table of the headline metrics."""
    rows = [
        (k, v)
        for k, v in metrics.items()
        if k.startswith("probe/") and k.rsplit("/", 1)[-1] in _PROBE_KEYS
    ]
    rows += [(k, v) for k, v in metrics.items() if k in _SUMMARY_KEYS]
    width = max([len(k) for k, _ in rows] + [len(header)])
    lines = [header, "-" * (width + 14)]
    lines += [f"{k:<{width}}  {v:>12.4f}" for k, v in rows]
    return "\n".join(lines)


def _callback_enabled(node: Any) -> bool:
    """An entry of ``callbacks`` is off when it is null or its ``every`` is null."""
    if node is None:
        return False
    return not (isinstance(node, DictConfig) and "every" in node and node.every is None)


def build_callbacks(
    cfg: DictConfig, dm: DataModule, sink: Any
) -> tuple[list[Callback], dict[str, Callback]]:
    """The trainer callbacks of ``cfg.callbacks`` (``conf/callbacks/``), by name.

    Each entry is instantiated from its ``_target_``; a partial (``_partial_: true``) is then
    called with the run-time objects its signature names: ``embed`` (the run's configured
    extraction, :func:`configured_extraction`), ``sink``, ``probe`` (the probe
    ``eval.select.probe`` names), ``labels`` and ``splits``.

    Raises:
        ValueError: a callback asks for a probe that is not configured, or for labels the
            dataset does not have.
    """

    def embed(model: torch.nn.Module) -> torch.Tensor:
        return configured_extraction(cfg, model, dm)[0]

    def probe() -> Any:
        sel = cfg.eval.get("select") or {}
        name = str(sel.get("probe", "logreg"))
        probes = probe_configs(cfg.eval.probes, getattr(dm, "task", "classification"))
        if name not in probes:
            raise ValueError(
                f"eval.select.probe={name!r} is not among the configured probes "
                f"{sorted(probes)}; expected the name of one of eval.probes"
            )
        return instantiate(probes[name])

    def labels() -> torch.Tensor:
        if dm.labels is None:
            raise ValueError(
                f"eval.select.every={cfg.eval.select.get('every')} selects on a probe's "
                f"validation score, but dataset {dm.name!r} has no labels; set "
                f"eval.select.every=null"
            )
        return dm.labels

    runtime: dict[str, Callable[[], Any]] = {
        "embed": lambda: embed,
        "sink": lambda: sink,
        "probe": probe,
        "labels": labels,
        "splits": dm.splits,
    }
    built: dict[str, Callback] = {}
    for name, node in (cfg.get("callbacks") or {}).items():
        if not _callback_enabled(node):
            continue
        obj = instantiate(node)
        if not isinstance(obj, Callback) and callable(obj):
            wanted = inspect.signature(obj).parameters
            obj = obj(**{k: make() for k, make in runtime.items() if k in wanted})
        if not isinstance(obj, Callback):
            raise TypeError(
                f"callbacks.{name} must build a graphssl trainer Callback, got "
                f"{type(obj).__name__} from {node.get('_target_')!r}"
            )
        built[str(name)] = obj
    return list(built.values()), built


def train(cfg: DictConfig) -> dict[str, float]:
    """Train, evaluate and log one configured run; returns its final metrics."""
    t_start = time.perf_counter()
    hc = _hydra()
    resolved = resolve_config(cfg)
    store = TrackingStore.from_config(resolved)
    parent = None
    if hc is not None and hc.mode == RunMode.MULTIRUN:
        parent = read_parent(hc.sweep.dir)
    chash = config_hash(resolved)
    resume_run_id, resume_state = resume_target(store, resolved, chash)
    set_threads(resolved.get("num_threads"))
    seed_everything(int(resolved.seed))

    with store.start_run(
        run_name(resolved),
        parent_run_id=parent["run_id"] if parent else None,
        tags={**_tags(hc), **owner_tags(), HASH_TAG: chash},
        run_id=resume_run_id,
    ) as tracker:
        if not tracker.resumed:  # params are logged once per run: MLflow refuses changes
            tracker.log_params(_params(resolved))
            tracker.log_text(OmegaConf.to_yaml(resolved), "config.yaml")
        if hc is not None and not tracker.resumed:
            hydra_dir = Path(hc.runtime.output_dir) / hc.output_subdir if hc.output_subdir else None
            if hydra_dir is not None and hydra_dir.is_dir():
                tracker.log_artifacts(hydra_dir, ".hydra")

        dm = build_datamodule(resolved)
        method = build_method(resolved, dm)
        log.info("training %s on %s", type(method).__name__, dm)
        configured, by_name = build_callbacks(resolved, dm, tracker)
        trainer = instantiate(
            resolved.trainer,
            callbacks=[MLflowMetricsCallback(tracker), *configured],
            checkpoint_path=str(checkpoint_path(resolved, chash)),
        )
        trainer.config_hash = chash
        trainer.checkpoint_extra = {"mlflow_run_id": tracker.run_id}
        if resume_state is not None:
            trainer.resume_from(resume_state)
        t0 = time.perf_counter()
        fit = trainer.fit(method, dm)
        timings = {"time/train_seconds": time.perf_counter() - t0, **fit.throughput()}

        ev = resolved.eval
        z, y = configured_extraction(resolved, method, dm)
        timings["time/extract_seconds"] = time.perf_counter() - t0 - timings["time/train_seconds"]
        metrics: dict[str, float] = dict(getattr(dm, "graph_stats", dict)())  # data/avg_degree
        if fit.epochs:
            metrics["train/final_loss"] = fit.epochs[-1].metrics["loss"]
            metrics["train/epochs"] = float(len(fit.epochs))
            metrics["train/best_epoch"] = float(fit.best_epoch)
        for cb in by_name.values():
            summary = getattr(cb, "summary", None)
            if callable(summary):
                metrics.update(summary())
        t0 = time.perf_counter()
        if ev.diagnostics.enabled:
            metrics.update(run_diagnostics(z, reference=bool(ev.diagnostics.reference)))
        timings["time/diagnostics_seconds"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        metrics.update(run_probes(z, y, dm.splits(), build_probes(ev.probes, dm)))
        metrics.update(_classifier_metrics(method, z, y, dm, str(resolved.trainer.device)))
        timings["time/probe_seconds"] = time.perf_counter() - t0
        metrics.update(timings)
        metrics["time/total_seconds"] = time.perf_counter() - t_start
        tracker.log_metrics(metrics)

        t0 = time.perf_counter()
        if ev.figures:
            log_figures(tracker, z, y, int(resolved.seed))
        if resolved.logger.get("log_embeddings", True):
            log_embeddings(tracker, z, y)
        # what ran after the metrics above, and the process's peak resident memory at the end
        final = {"time/figures_seconds": time.perf_counter() - t0, "mem/peak_rss_gb": _peak_rss()}
        tracker.log_metrics(final)
        metrics.update(final)
        print(summary_table(metrics, f"{run_name(resolved)}  (MLflow run {tracker.run_id})"))
    return metrics


def _peak_rss() -> float:
    """Peak resident memory of this process in GiB (``ru_maxrss``; ``nan`` where the
    ``resource`` module does not exist, e.g. on Windows)."""
    try:
        import resource
    except ImportError:
        return math.nan
    scale = 2**30 if sys.platform == "darwin" else 2**20  # bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / scale


def log_figures(tracker: RunTracker, z: torch.Tensor, y: torch.Tensor | None, seed: int) -> None:
    """The spectrum and projection figures of ``z`` (``figures/*.png``)."""
    from graphssl.evaluation.plots import projection_figure, spectrum_figure

    tracker.log_figure(spectrum_figure(z), "figures/spectrum.png")
    tracker.log_figure(projection_figure(z, y, seed=seed), "figures/projection.png")


def _classifier_metrics(
    method: SSLMethod, z: torch.Tensor, y: torch.Tensor | None, dm: DataModule, device: str
) -> dict[str, float]:
    """Accuracy of a method's own classifier (``supervised/<split>_acc``), when it has one."""
    if y is None:
        return {}
    with torch.no_grad():
        logits = method.classifier_logits(z.to(device))
    if logits is None:
        return {}
    correct = (logits.argmax(1).cpu() == y).float()
    out: dict[str, float] = {}
    for part in ("train", "val", "test"):
        accs = [
            float(correct[getattr(s, part)].mean()) for s in dm.splits() if getattr(s, part).numel()
        ]
        if accs:
            out[f"supervised/{part}_acc"] = sum(accs) / len(accs)
    return out
