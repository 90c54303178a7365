"""The run sequence: seed → datamodule → method → train → extract → diagnose → probe → log.

``run(cfg)`` is importable and tested; :mod:`graphssl.cli` only wraps it in ``@hydra.main``.
Only this module and the CLI know about Hydra.
"""

from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from hydra.conf import HydraConf
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from graphssl.data.base import DataModule
from graphssl.evaluation.extraction import extract_embeddings
from graphssl.evaluation.runner import run_diagnostics, run_probes
from graphssl.methods.base import SSLMethod
from graphssl.tracking.context import tracking_settings
from graphssl.tracking.mlflow_store import flatten
from graphssl.tracking.run import MLflowMetricsCallback, RunTracker
from graphssl.tracking.sweep import read_parent
from graphssl.utils import git_commit, package_versions, seed_everything, tensor_hash

log = logging.getLogger(__name__)


def _hydra() -> HydraConf | None:
    return HydraConfig.get() if HydraConfig.initialized() else None


def resolve_config(cfg: DictConfig) -> DictConfig:
    """A resolved copy of ``cfg`` (without the ``hydra`` node); missing values fail here,
    before any work (design.md §6)."""
    keys = [str(k) for k in cfg if k != "hydra"]
    container = OmegaConf.to_container(
        OmegaConf.masked_copy(cfg, keys), resolve=True, throw_on_missing=True
    )
    assert isinstance(container, dict)
    out = OmegaConf.create(container)
    assert isinstance(out, DictConfig)
    return out


def build_datamodule(cfg: DictConfig) -> DataModule:
    dm = instantiate(cfg.dataset)
    if not isinstance(dm, DataModule):
        raise TypeError(f"dataset._target_ must build a graphssl DataModule, got "
                        f"{type(dm).__name__} from {cfg.dataset['_target_']!r}")
    dm.setup()
    return dm


def build_method(cfg: DictConfig, dm: DataModule) -> SSLMethod:
    """Instantiate ``cfg.model`` with the encoder's input size taken from the dataset."""
    model_cfg = OmegaConf.create(OmegaConf.to_container(cfg.model, resolve=True))
    assert isinstance(model_cfg, DictConfig)
    enc = model_cfg.get("encoder")
    if isinstance(enc, DictConfig) and enc.get("in_channels", None) == -1:
        enc.in_channels = dm.num_features
    method = instantiate(model_cfg)
    if not isinstance(method, SSLMethod):
        raise TypeError(f"model._target_ must build a graphssl SSLMethod, got "
                        f"{type(method).__name__} from {cfg.model['_target_']!r}")
    return method


def _run_name(cfg: DictConfig) -> str:
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
    rows = [(k, v) for k, v in metrics.items()
            if k.startswith("probe/") and k.rsplit("/", 1)[-1] in (
                "val_acc", "test_acc", "test_acc_std", "val_ap", "test_ap", "test_mae",
                "weight_decay")]
    rows += [(k, v) for k, v in metrics.items() if k in (
        "diag/rankme", "diag/effective_rank", "diag/alpha_req", "diag/stable_rank",
        "diag/nesum", "diag/coherence", "diag/self_cluster", "train/final_loss",
        "train/epochs", "time/train_seconds", "time/probe_seconds", "time/total_seconds")]
    width = max([len(k) for k, _ in rows] + [len(header)])
    lines = [header, "-" * (width + 14)]
    lines += [f"{k:<{width}}  {v:>12.4f}" for k, v in rows]
    return "\n".join(lines)


def run(cfg: DictConfig) -> dict[str, float]:
    """Train, evaluate and log one configured run; returns its final metrics."""
    t_start = time.perf_counter()
    hc = _hydra()
    resolved = resolve_config(cfg)
    settings = tracking_settings(resolved)
    parent = None
    if hc is not None and hc.mode == RunMode.MULTIRUN:
        parent = read_parent(hc.sweep.dir)
    seed_everything(int(resolved.seed))

    with RunTracker(
        settings["tracking_uri"], settings["experiment_name"], run_name=_run_name(resolved),
        parent_run_id=parent["run_id"] if parent else None, tags=_tags(hc),
        artifact_location=settings["artifact_location"],
    ) as tracker:
        tracker.log_params(_params(resolved))
        tracker.log_text(OmegaConf.to_yaml(resolved), "config.yaml")
        if hc is not None:
            hydra_dir = Path(hc.runtime.output_dir) / hc.output_subdir if hc.output_subdir else None
            if hydra_dir is not None and hydra_dir.is_dir():
                tracker.log_artifacts(hydra_dir, ".hydra")

        dm = build_datamodule(resolved)
        method = build_method(resolved, dm)
        log.info("training %s on %s", type(method).__name__, dm)
        trainer = instantiate(resolved.trainer, callbacks=[MLflowMetricsCallback(tracker)])
        t0 = time.perf_counter()
        fit = trainer.fit(method, dm)
        timings = {"time/train_seconds": time.perf_counter() - t0}

        ev = resolved.eval
        z, y = extract_embeddings(
            method, dm, encoder_source=ev.extraction.encoder_source,
            device=str(resolved.trainer.device), mini_batch=bool(ev.extraction.mini_batch),
            num_neighbors=ev.extraction.num_neighbors,
        )
        timings["time/extract_seconds"] = time.perf_counter() - t0 - timings["time/train_seconds"]
        metrics: dict[str, float] = {}
        if fit.epochs:
            metrics["train/final_loss"] = fit.epochs[-1].metrics["loss"]
            metrics["train/epochs"] = float(len(fit.epochs))
            metrics["train/best_epoch"] = float(fit.best_epoch)
        t0 = time.perf_counter()
        if ev.diagnostics.enabled:
            metrics.update(run_diagnostics(z, reference=bool(ev.diagnostics.reference)))
        timings["time/diagnostics_seconds"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        probes = {name: instantiate(p) for name, p in (ev.probes or {}).items() if p is not None}
        metrics.update(run_probes(z, y, dm.splits(), probes))
        timings["time/probe_seconds"] = time.perf_counter() - t0
        metrics.update(timings)
        metrics["time/total_seconds"] = time.perf_counter() - t_start
        tracker.log_metrics(metrics)

        if ev.figures:
            from graphssl.evaluation.plots import projection_figure, spectrum_figure

            tracker.log_figure(spectrum_figure(z), "figures/spectrum.png")
            tracker.log_figure(projection_figure(z, y, seed=int(resolved.seed)),
                               "figures/projection.png")
        if resolved.logger.get("log_embeddings", True):
            _log_embeddings(tracker, z, y)
        print(summary_table(metrics, f"{_run_name(resolved)}  (MLflow run {tracker.run_id})"))
    return metrics


def _log_embeddings(tracker: RunTracker, z: torch.Tensor, y: torch.Tensor | None) -> None:
    """Store the final embeddings with their row ids and a content hash (``embeddings.pt``)."""
    payload = {"embeddings": z.cpu(), "ids": torch.arange(z.shape[0]),
               "labels": None if y is None else y.cpu(), "sha256": tensor_hash(z)}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "embeddings.pt"
        torch.save(payload, path)
        tracker.log_artifact(path)
    tracker.set_tags({"embeddings.sha256": payload["sha256"],
                      "embeddings.shape": f"{z.shape[0]}x{z.shape[1]}"})
