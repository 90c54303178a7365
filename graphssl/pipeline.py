"""The run sequence: seed → datamodule → method → train → extract → diagnose → probe → log.

``run(cfg)`` is importable and tested; :mod:`graphssl.cli` only wraps it in ``@hydra.main``.
Only this module and the CLI know about Hydra.
"""

from __future__ import annotations

import hashlib
import json
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
from graphssl.tracking import mlflow_store
from graphssl.tracking.context import tracking_settings
from graphssl.tracking.mlflow_store import flatten
from graphssl.tracking.run import MLflowMetricsCallback, RunTracker
from graphssl.tracking.stale import (
    HASH_TAG,
    is_stale,
    mark_stale_killed,
    owner_tags,
    runs_of_config,
)
from graphssl.tracking.sweep import read_parent
from graphssl.training.checkpoint import load_checkpoint
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
        raise TypeError(
            f"dataset._target_ must build a graphssl DataModule, got "
            f"{type(dm).__name__} from {cfg.dataset['_target_']!r}"
        )
    dm.setup()
    return dm


def _fill_from_dataset(enc: DictConfig, dm: DataModule) -> None:
    """Set the encoder keys that are -1/null and that the dataset decides: ``in_channels``
    for GNNs; ``in_chans``/``img_size`` for image encoders (``dm.encoder_overrides()``)."""
    pending = [str(k) for k, v in enc.items() if v is None or (isinstance(v, int) and v == -1)]
    if not pending:
        return
    overrides_fn = getattr(dm, "encoder_overrides", None)
    if callable(overrides_fn):
        overrides = dict(overrides_fn())
    elif "in_channels" in pending:
        overrides = {"in_channels": dm.num_features}
    else:
        overrides = {}
    for key in pending:
        if key in overrides:
            enc[key] = overrides[key]


def build_method(cfg: DictConfig, dm: DataModule) -> SSLMethod:
    """Instantiate ``cfg.model`` with the encoder's input size taken from the dataset."""
    model_cfg = OmegaConf.create(OmegaConf.to_container(cfg.model, resolve=True))
    assert isinstance(model_cfg, DictConfig)
    enc = model_cfg.get("encoder")
    if isinstance(enc, DictConfig):
        _fill_from_dataset(enc, dm)
    if model_cfg.get("num_classes", None) in (-1, None) and "num_classes" in model_cfg:
        model_cfg.num_classes = dm.num_classes  # e.g. the supervised classifier
    method = instantiate(model_cfg)
    if not isinstance(method, SSLMethod):
        raise TypeError(
            f"model._target_ must build a graphssl SSLMethod, got "
            f"{type(method).__name__} from {cfg.model['_target_']!r}"
        )
    return method


_RIDGE = "graphssl.evaluation.regression_probe.RidgeEvaluator"


def probe_configs(probes: DictConfig | None, task: str) -> dict[str, Any]:
    """The configured probes that fit the dataset's ``task`` (graph-level datasets declare one).

    ``"regression"`` keeps the ridge probes, or uses a default ridge probe when only
    classifiers are configured; ``"multilabel"`` keeps the logistic-regression probes with
    ``multilabel=true``; ``"classification"`` keeps everything configured.
    """
    cfgs = {str(k): v for k, v in (probes or {}).items() if v is not None}
    if task == "regression":
        ridge = {k: v for k, v in cfgs.items() if v.get("_target_") == _RIDGE}
        return ridge or ({"ridge": {"_target_": _RIDGE}} if cfgs else {})
    if task == "multilabel":
        return {
            k: OmegaConf.merge(v, {"multilabel": True})
            for k, v in cfgs.items()
            if str(v.get("_target_", "")).endswith("LogRegEvaluator")
        }
    return cfgs


def build_probes(probes: DictConfig | None, dm: DataModule) -> dict[str, Any]:
    """The configured probes that fit ``dm``'s task (:func:`probe_configs`), instantiated."""
    return {
        name: instantiate(p)
        for name, p in probe_configs(probes, getattr(dm, "task", "classification")).items()
    }


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
    rows = [
        (k, v)
        for k, v in metrics.items()
        if k.startswith("probe/")
        and k.rsplit("/", 1)[-1]
        in ("val_acc", "test_acc", "test_acc_std", "val_ap", "test_ap", "test_mae", "weight_decay")
    ]
    rows += [
        (k, v)
        for k, v in metrics.items()
        if k
        in (
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
        )
    ]
    width = max([len(k) for k, _ in rows] + [len(header)])
    lines = [header, "-" * (width + 14)]
    lines += [f"{k:<{width}}  {v:>12.4f}" for k, v in rows]
    return "\n".join(lines)


def config_hash(cfg: DictConfig) -> str:
    """A short hash of the resolved config that identifies "the same run" across restarts
    (``resume`` and display-only keys excluded)."""
    ignored = {"resume", "trainer.progress", "logger.run_name"}
    flat = {
        k: v
        for k, v in flatten(OmegaConf.to_container(cfg, resolve=True)).items()  # type: ignore[arg-type]
        if k not in ignored
    }
    return hashlib.sha256(json.dumps(flat, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _checkpoint_path(cfg: DictConfig, chash: str) -> Path:
    return Path(str(cfg.paths.outputs_dir)).absolute() / "checkpoints" / chash / "last.pt"


def _resume_target(
    cfg: DictConfig, settings: dict[str, Any], chash: str
) -> tuple[str | None, dict[str, Any] | None]:
    """Close stale runs of this configuration; with ``resume=true`` return the run id and
    checkpoint to continue from."""
    client = mlflow_store.client(settings["tracking_uri"])
    exp_id = mlflow_store.ensure_experiment(
        client, settings["experiment_name"], settings["artifact_location"]
    )
    runs = runs_of_config(client, exp_id, chash)
    state = None
    ckpt = _checkpoint_path(cfg, chash)
    if cfg.get("resume", False) and ckpt.is_file():
        state = load_checkpoint(ckpt, chash)
    run_id = state.get("mlflow_run_id") if state else None
    known = {r.info.run_id: r for r in runs}
    if run_id is not None and (
        run_id not in known
        or known[run_id].info.status == "FINISHED"
        or not (is_stale(known[run_id]) or known[run_id].info.status in ("KILLED", "FAILED"))
    ):
        log.warning(
            "checkpoint %s belongs to run %s, which cannot be resumed (finished, live "
            "or missing); starting a new run",
            ckpt,
            run_id,
        )
        run_id, state = None, None
    mark_stale_killed(client, runs, keep=run_id)
    if cfg.get("resume", False) and state is None:
        log.warning("resume=true but no resumable checkpoint at %s; starting from scratch", ckpt)
    return run_id, state


def run(cfg: DictConfig) -> dict[str, float]:
    """Train, evaluate and log one configured run; returns its final metrics."""
    t_start = time.perf_counter()
    hc = _hydra()
    resolved = resolve_config(cfg)
    settings = tracking_settings(resolved)
    parent = None
    if hc is not None and hc.mode == RunMode.MULTIRUN:
        parent = read_parent(hc.sweep.dir)
    chash = config_hash(resolved)
    resume_run_id, resume_state = _resume_target(resolved, settings, chash)
    _set_threads(resolved.get("num_threads"))
    seed_everything(int(resolved.seed))

    with RunTracker(
        settings["tracking_uri"],
        settings["experiment_name"],
        run_name=_run_name(resolved),
        parent_run_id=parent["run_id"] if parent else None,
        tags={**_tags(hc), **owner_tags(), HASH_TAG: chash},
        artifact_location=settings["artifact_location"],
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
        selection = _selection_callback(resolved, dm, tracker)
        callbacks = [
            MLflowMetricsCallback(tracker),
            *_diagnostics_callbacks(resolved, dm, tracker),
            *([selection] if selection is not None else []),
        ]
        trainer = instantiate(
            resolved.trainer,
            callbacks=callbacks,
            checkpoint_path=str(_checkpoint_path(resolved, chash)),
        )
        trainer.config_hash = chash
        trainer.checkpoint_extra = {"mlflow_run_id": tracker.run_id}
        if resume_state is not None:
            trainer.resume_from(resume_state)
        t0 = time.perf_counter()
        fit = trainer.fit(method, dm)
        timings = {"time/train_seconds": time.perf_counter() - t0}

        ev = resolved.eval
        z, y = configured_extraction(resolved, method, dm)
        timings["time/extract_seconds"] = time.perf_counter() - t0 - timings["time/train_seconds"]
        metrics: dict[str, float] = dict(getattr(dm, "graph_stats", dict)())  # data/avg_degree
        if fit.epochs:
            metrics["train/final_loss"] = fit.epochs[-1].metrics["loss"]
            metrics["train/epochs"] = float(len(fit.epochs))
            metrics["train/best_epoch"] = float(fit.best_epoch)
        if selection is not None:
            metrics.update(selection.summary())
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

        if ev.figures:
            from graphssl.evaluation.plots import projection_figure, spectrum_figure

            tracker.log_figure(spectrum_figure(z), "figures/spectrum.png")
            tracker.log_figure(
                projection_figure(z, y, seed=int(resolved.seed)), "figures/projection.png"
            )
        if resolved.logger.get("log_embeddings", True):
            _log_embeddings(tracker, z, y)
        print(summary_table(metrics, f"{_run_name(resolved)}  (MLflow run {tracker.run_id})"))
    return metrics


def configured_extraction(
    cfg: DictConfig, model: torch.nn.Module, dm: DataModule
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`extract_embeddings` with the run's ``eval.extraction`` settings and device."""
    ex = cfg.eval.extraction
    return extract_embeddings(
        model,
        dm,
        encoder_source=ex.encoder_source,
        device=str(cfg.trainer.device),
        mini_batch=bool(ex.mini_batch),
        num_neighbors=ex.num_neighbors,
    )


def _set_threads(num_threads: Any) -> None:
    """Apply ``num_threads`` (``null``: leave PyTorch's default)."""
    if num_threads is None:
        return
    if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
        raise ValueError(f"num_threads must be a positive integer or null, got {num_threads!r}")
    torch.set_num_threads(num_threads)


def _diagnostics_callbacks(cfg: DictConfig, dm: DataModule, tracker: RunTracker) -> list[Any]:
    """The per-epoch diagnostics callback when ``eval.diag_every`` is set (issue 7)."""
    ev = cfg.eval
    if ev.get("diag_every") is None:
        return []
    from graphssl.evaluation.monitor import CollapseThresholds, DiagnosticsMonitor
    from graphssl.tracking.monitor import DiagnosticsCallback

    def embed(model: torch.nn.Module) -> torch.Tensor:
        return extract_embeddings(
            model, dm, encoder_source=ev.extraction.encoder_source, device=str(cfg.trainer.device)
        )[0]

    collapse = ev.get("collapse") or {}
    monitor = DiagnosticsMonitor(
        embed,
        every=int(ev.diag_every),
        subset=ev.get("diag_subset", 2048),
        seed=int(cfg.seed),
        thresholds=CollapseThresholds(**collapse),
        reference=bool(ev.diagnostics.reference),
    )
    return [DiagnosticsCallback(monitor, tracker)]


def _selection_callback(cfg: DictConfig, dm: DataModule, tracker: RunTracker) -> Any:
    """The validation-probe model selection when ``eval.select.every`` is set (issue 4)."""
    sel = cfg.eval.get("select") or {}
    every = sel.get("every")
    if every is None:
        return None
    from graphssl.evaluation.selection import ProbeSelection
    from graphssl.tracking.selection import SelectionCallback

    name = str(sel.get("probe", "logreg"))
    probes = probe_configs(cfg.eval.probes, getattr(dm, "task", "classification"))
    if name not in probes:
        raise ValueError(
            f"eval.select.probe={name!r} is not among the configured probes {sorted(probes)}; "
            f"expected the name of one of eval.probes"
        )
    if dm.labels is None:
        raise ValueError(
            f"eval.select.every={every} selects on a probe's validation score, but dataset "
            f"{dm.name!r} has no labels; set eval.select.every=null"
        )

    def embed(model: torch.nn.Module) -> torch.Tensor:
        return configured_extraction(cfg, model, dm)[0]

    selection = ProbeSelection(
        embed,
        instantiate(probes[name]),
        dm.labels,
        dm.splits(),
        every=every,
        metric=str(sel.get("metric", "val_acc")),
        mode=str(sel.get("mode", "max")),
        patience=sel.get("patience"),
        min_delta=float(sel.get("min_delta", 0.0)),
    )
    return SelectionCallback(selection, tracker)


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


def _log_embeddings(tracker: RunTracker, z: torch.Tensor, y: torch.Tensor | None) -> None:
    """Store the final embeddings with their row ids and a content hash (``embeddings.pt``)."""
    payload = {
        "embeddings": z.cpu(),
        "ids": torch.arange(z.shape[0]),
        "labels": None if y is None else y.cpu(),
        "sha256": tensor_hash(z),
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "embeddings.pt"
        torch.save(payload, path)
        tracker.log_artifact(path)
    tracker.set_tags(
        {"embeddings.sha256": payload["sha256"], "embeddings.shape": f"{z.shape[0]}x{z.shape[1]}"}
    )
