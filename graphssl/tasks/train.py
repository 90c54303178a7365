"""The train task: seed → datamodule → method → train → extract → diagnose → probe → log.

``train(cfg)`` is importable and tested; :func:`graphssl.cli.main` only wraps it in
``@hydra.main`` (the ``graphssl`` command, config ``conf/train.yaml``).
"""

from __future__ import annotations

import inspect
import logging
import math
import os
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
from graphssl.evaluation.runner import evaluation_settings, run_diagnostics
from graphssl.methods.base import SSLMethod
from graphssl.tasks._console import log_to_files
from graphssl.tasks.baseline import untrained_baseline
from graphssl.tasks.components import (
    build_datamodule,
    build_method,
    configured_extraction,
    configured_extraction_plan,
    configured_probes,
    method_config,
    probe_configs,
    resolve_config,
    set_threads,
)
from graphssl.tasks.debug import apply_debug_limits
from graphssl.tasks.modality import check_modalities
from graphssl.tasks.official import ogb_probe_metrics
from graphssl.tasks.signals import TaskSignals
from graphssl.tasks.validate import validate_train_config
from graphssl.tracking.buffer import FINAL, JOURNAL_TAG, BufferedRun, journal_path, retry_store
from graphssl.tracking.conventions import split_config_values, standard_tags
from graphssl.tracking.embeddings import log_embeddings
from graphssl.tracking.identity import checkpoint_path, config_hash, resume_target
from graphssl.tracking.mlflow_store import flatten
from graphssl.tracking.models import initial_state, log_method
from graphssl.tracking.run import MLflowMetricsCallback, RunTracker
from graphssl.tracking.secrets import Masker, log_run_config
from graphssl.tracking.stale import HASH_TAG, owner_tags
from graphssl.tracking.store import TrackingStore
from graphssl.tracking.sweep import job_run_name, read_parent
from graphssl.training.callbacks.checkpoint import ModelCheckpoint
from graphssl.training.trainer import Callback, TrainingInterrupted
from graphssl.utils import (
    allocator,
    check_allocator_mode,
    git_commit,
    package_versions,
    seed_everything,
)

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
    "baseline_test_acc",
    "baseline_test_ap",
    "baseline_test_mae",
    "gain",
    "ogb_test_acc",
    "ogb_test_rocauc",
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


def _tags(hc: HydraConf | None, cfg: DictConfig | None = None) -> dict[str, str]:
    tags = {f"version.{k}": v for k, v in package_versions().items()}
    tags["git.commit"] = git_commit()
    tags.update(standard_tags(tags["git.commit"], list(hc.overrides.task) if hc else None))
    if cfg is not None and cfg.get("rerun"):
        tags["graphssl.rerun_of"] = str(cfg.rerun)
    if hc is not None:
        tags["graphssl.overrides"] = " ".join(hc.overrides.task)
        tags["graphssl.output_dir"] = str(hc.runtime.output_dir)
        tags["graphssl.role"] = "job" if hc.mode == RunMode.MULTIRUN else "run"
    return tags


def _number(v: float) -> str:
    """A whole number as one (``261``), anything else with four decimals (``0.8180``)."""
    return str(int(v)) if math.isfinite(v) and float(v).is_integer() else f"{v:.4f}"


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
    lines += [f"{k:<{width}}  {_number(v):>12}" for k, v in rows]
    return "\n".join(lines)


def _callback_enabled(node: Any) -> bool:
    """An entry of ``callbacks`` is off when it is null or its ``every`` is null (the
    ``checkpoint`` entry has ``every_n_epochs`` instead: it also writes the epochs another
    callback asks for, so it is on whenever it is there)."""
    if node is None:
        return False
    return not (isinstance(node, DictConfig) and "every" in node and node.every is None)


def build_callbacks(
    cfg: DictConfig,
    dm: DataModule,
    sink: Any,
    checkpoint_path: str | os.PathLike[str] | None = None,
) -> tuple[list[Callback], dict[str, Callback]]:
    """The trainer callbacks of ``cfg.callbacks`` (``conf/callbacks/``), by name.

    Each entry is instantiated from its ``_target_``; a partial (``_partial_: true``) is then
    called with the run-time objects its signature names: ``embed`` (the run's configured
    extraction, :func:`configured_extraction`), ``sink``, ``probe`` (the probe
    ``eval.select.probe`` names), ``labels``, ``splits`` and ``checkpoint_path`` (the run's
    checkpoint file). A config that builds no
    :class:`~graphssl.training.callbacks.checkpoint.ModelCheckpoint` (its callbacks have no
    ``checkpoint`` entry, e.g. a stored config being rerun) gets one named ``checkpoint``
    writing ``checkpoint_path`` every ``trainer.checkpoint_every`` epochs, when a path is given:
    resuming and the store-outage checkpoints rely on it. ``callbacks.checkpoint=null`` writes
    no checkpoints.

    Raises:
        ValueError: a callback asks for a probe that is not configured, for labels the dataset
            does not have, or for the checkpoint path when none was given.
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

    def run_checkpoint_path() -> Path:
        if checkpoint_path is None:
            raise ValueError(
                "a trainer callback of callbacks.* asks for checkpoint_path, but none was given; "
                "expected the run's checkpoint file (outputs/checkpoints/<config hash>/last.pt)"
            )
        return Path(checkpoint_path)

    runtime: dict[str, Callable[[], Any]] = {
        "embed": lambda: embed,
        "sink": lambda: sink,
        "probe": probe,
        "labels": labels,
        "splits": dm.splits,
        "checkpoint_path": run_checkpoint_path,
    }
    entries = cfg.get("callbacks") or {}
    built: dict[str, Callback] = {}
    for name, node in entries.items():
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
    if (
        checkpoint_path is not None
        and "checkpoint" not in entries
        and not any(isinstance(cb, ModelCheckpoint) for cb in built.values())
    ):
        every = cfg.trainer.get("checkpoint_every") if "trainer" in cfg else None
        built["checkpoint"] = ModelCheckpoint(checkpoint_path, every_n_epochs=every)
    return list(built.values()), built


def train(cfg: DictConfig) -> dict[str, float]:
    """Train, evaluate and log one configured run; returns its final metrics.

    SIGTERM is handled like Ctrl-C while it runs (:class:`~graphssl.tasks.signals.TaskSignals`):
    the run ends ``KILLED``, after checkpointing the current epoch when checkpoints are on. A
    scheduler's time-limit warning (submitit's SIGUSR2) during training stops it after the
    current epoch, then reaches the scheduler's handler outside any store call.
    """
    with TaskSignals() as signals:
        return _train(cfg, signals)


def _train(cfg: DictConfig, signals: TaskSignals) -> dict[str, float]:
    t_start = time.perf_counter()
    hc = _hydra()
    resolved = apply_debug_limits(resolve_config(cfg))
    check_modalities(resolved)  # an image method on a graph (or a GNN on images): refused now
    validate_train_config(resolved)  # before the store, the run and the datamodule
    check_allocator_mode(str(resolved.get("cpu_allocator", "reuse")))
    store = TrackingStore.from_config(resolved)
    parent = None
    if hc is not None and hc.mode == RunMode.MULTIRUN:
        parent = read_parent(hc.sweep.dir)
    chash = config_hash(resolved)
    masker = Masker.from_config(resolved)  # secrets masked in params, tags and artifacts
    store_wait_s = float(resolved.logger.get("store_wait_s", 120))
    resume_run_id, resume_state = retry_store(
        lambda: resume_target(store, resolved, chash), store_wait_s
    )
    set_threads(resolved.get("num_threads"))
    seed_everything(int(resolved.seed))

    ckpt = checkpoint_path(resolved, chash)
    with store.start_run(
        job_run_name(run_name(resolved), list(hc.overrides.task) if hc else [], parent),
        parent_run_id=parent["run_id"] if parent else None,
        tags=masker.mapping(
            {
                **_tags(hc, resolved),
                **owner_tags(),
                HASH_TAG: chash,
                JOURNAL_TAG: str(journal_path(ckpt)),
            }
        ),
        run_id=resume_run_id,
        wait_s=store_wait_s,
    ) as tracker:
        if not tracker.resumed:  # params are logged once per run: MLflow refuses changes
            hydra_dir = None
            if hc is not None and hc.output_subdir:
                hydra_dir = Path(hc.runtime.output_dir) / hc.output_subdir
            log_run_config(
                tracker, masker, _params(resolved), OmegaConf.to_yaml(resolved), hydra_dir
            )

        dm = build_datamodule(resolved)
        method = build_method(resolved, dm)
        if (start := initial_state(store, resolved)) is not None:  # ckpt_path= / from_run=
            method.load_state_dict(start)
        log.info("training %s on %s", type(method).__name__, dm)
        # metrics go to a journal beside the checkpoint first, so losing the store loses none
        sink = BufferedRun(tracker, journal_path(ckpt), resumed=tracker.resumed)
        tracker.before_exit.append(sink.close)  # also when the run fails or is killed
        configured, by_name = build_callbacks(resolved, dm, sink, checkpoint_path=ckpt)
        trainer = instantiate(
            resolved.trainer,
            callbacks=[MLflowMetricsCallback(sink), *configured],
            # callbacks.checkpoint writes the checkpoints, every trainer.checkpoint_every epochs
            checkpoint_every=None,
        )
        trainer.config_hash = chash
        trainer.checkpoint_extra = {"mlflow_run_id": tracker.run_id}
        if resume_state is not None:
            trainer.resume_from(resume_state, checkpoint_path=ckpt)
        signals.trainer = trainer
        t0 = time.perf_counter()
        try:
            with allocator(str(resolved.get("cpu_allocator", "reuse"))):
                fit = trainer.fit(method, dm)
        except TrainingInterrupted:
            signals.deliver()  # a time-limit warning stopped training: the scheduler's error
            raise
        signals.deliver()
        timings = {"time/train_seconds": time.perf_counter() - t0, **fit.throughput()}

        ev = resolved.eval
        # the extraction's mode (full, mini_batch, layerwise; graph for graph-level datasets)
        # and why it was chosen, logged as tags beside time/extract_seconds
        plan = configured_extraction_plan(resolved, method, dm)
        extraction_tags = {"extract/mode": plan.mode, "extract/reason": plan.reason}
        z, y = configured_extraction(resolved, method, dm)
        timings["time/extract_seconds"] = time.perf_counter() - t0 - timings["time/train_seconds"]
        metrics: dict[str, float] = dict(getattr(dm, "graph_stats", dict)())  # data/avg_degree
        if not tracker.resumed:
            dataset_cfg = masker.tree(OmegaConf.to_container(resolved.dataset), "dataset")
            sink.call(
                "log the dataset",
                lambda: tracker.log_dataset(dm.name, dataset_cfg, metrics),
                store_wait_s,
            )
        if resolved.logger.get("log_model", True):
            # the run config inside model/ is masked like config.yaml
            masked = OmegaConf.create(masker.tree(OmegaConf.to_container(resolved)))
            model_cfg = method_config(resolved, dm)
            sink.call(
                "log the model",
                lambda: log_method(tracker, method, model_cfg, masked),
                store_wait_s,
            )
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
        metrics.update(configured_probes(ev, dm, z, y, int(resolved.seed)))
        metrics.update(ogb_probe_metrics(resolved, dm, z, y, metrics))
        metrics.update(_classifier_metrics(method, z, y, dm, str(resolved.trainer.device)))
        timings["time/probe_seconds"] = time.perf_counter() - t0
        metrics.update(untrained_baseline(resolved, dm, method, metrics))  # after the trained work
        signals.deliver()  # a time-limit warning whose error evaluation code swallowed
        metrics.update(timings)
        metrics["time/total_seconds"] = time.perf_counter() - t_start
        measured, config_values = split_config_values(metrics)
        sink.log_metrics(measured, kind=FINAL)
        sink.set_tags({**config_values, **extraction_tags})
        sink.drain(store_wait_s)
        sink.close()

        t0 = time.perf_counter()
        if ev.figures:
            title = f"{type(method).__name__} on {dm.name} · {tracker.run_name or tracker.run_id}"
            sink.call(
                "log the figures",
                lambda: log_figures(tracker, z, y, int(resolved.seed), ev, title=title),
                store_wait_s,
            )
        if resolved.logger.get("log_embeddings", True):
            sink.call("log the embeddings", lambda: log_embeddings(tracker, z, y), store_wait_s)
        # what ran after the metrics above, and the process's peak resident memory at the end
        final = {"time/figures_seconds": time.perf_counter() - t0, "mem/peak_rss_gb": _peak_rss()}
        sink.call("log the final timings", lambda: tracker.log_metrics(final), store_wait_s)
        metrics.update(final)
        table = summary_table(metrics, f"{run_name(resolved)}  (MLflow run {tracker.run_id})")
        print(table)
        log_to_files(f"summary\n{table}")  # the job log too, without printing it twice
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


def log_figures(
    tracker: RunTracker,
    z: torch.Tensor,
    y: torch.Tensor | None,
    seed: int,
    eval_cfg: DictConfig | None = None,
    title: str | None = None,
) -> None:
    """The spectrum and projection figures of ``z`` (``figures/*.png``), headed by ``title``;
    the spectrum on at most ``eval.figure_max_rows`` seeded rows."""
    from graphssl.evaluation.plots import projection_figure, spectrum_figure

    caps = evaluation_settings(eval_cfg if eval_cfg is not None else {})
    spectrum = spectrum_figure(z, title=title, max_rows=caps["figure_max_rows"], seed=seed)
    tracker.log_figure(spectrum, "figures/spectrum.png")
    tracker.log_figure(projection_figure(z, y, seed=seed, title=title), "figures/projection.png")


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
