"""The train task: datamodule → method → trainer → fit → evaluation → run.

``train(cfg)`` composes the objects the config names and runs them; each step's work lives in
one object:

* the :class:`~graphssl.data.base.DataModule` of ``dataset``, the
  :class:`~graphssl.methods.base.SSLMethod` of ``model``;
* the :class:`~graphssl.training.trainer.Trainer` of ``trainer`` with the callbacks of
  ``callbacks`` (:func:`~graphssl.tasks.callbacks.build_callbacks`);
* the :class:`~graphssl.evaluation.Evaluation` of ``eval``: extraction, diagnostics, probes,
  the untrained baseline and figures;
* the :class:`~graphssl.tracking.TrackedRun` that :func:`~graphssl.tracking.open_run` opens
  from ``logger``: the store, resume, the metrics journal, secret masking and every artifact.

:func:`graphssl.cli.main` wraps it in ``@hydra.main`` (the ``graphssl`` command, config
``conf/train.yaml``).
"""

from __future__ import annotations

import logging
import time

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from graphssl.tasks._console import log_to_files
from graphssl.tasks._summary import peak_gpu_gb, peak_rss_gb, reset_peak_gpu, summary_table
from graphssl.tasks.callbacks import build_callbacks
from graphssl.tasks.components import (
    baseline_key,
    build_datamodule,
    build_evaluation,
    build_method,
    method_config,
    prepare_train_config,
    run_identity,
    run_name,
    set_threads,
)
from graphssl.tasks.devices import fit_on_devices, train_as_task
from graphssl.tasks.signals import TaskSignals
from graphssl.tracking import open_run
from graphssl.training.distributed import cluster_ranks
from graphssl.training.trainer import TrainingInterrupted
from graphssl.utils import allocator, seed_everything

__all__ = ["build_callbacks", "run_name", "summary_table", "train"]

log = logging.getLogger(__name__)


def train(cfg: DictConfig) -> dict[str, float]:
    """Train, evaluate and log one configured run; returns its final metrics.

    SIGTERM is handled like Ctrl-C while it runs (:class:`~graphssl.tasks.signals.TaskSignals`):
    the run ends ``KILLED``, after checkpointing the current epoch when checkpoints are on. A
    scheduler's time-limit warning (submitit's SIGUSR2) during training stops it after the
    current epoch, then reaches the scheduler's handler outside any store call.

    On a cluster task other than rank 0 of a multi-process fit (a SLURM job step of
    ``trainer.devices × trainer.num_nodes`` tasks) it trains that rank and returns ``{}``:
    the job's one MLflow run is rank 0's.
    """
    with TaskSignals() as signals:
        return _train(cfg, signals)


def _train(cfg: DictConfig, signals: TaskSignals) -> dict[str, float]:
    t_start = time.perf_counter()
    cfg = prepare_train_config(cfg)  # resolved and validated: a refused config starts no run
    evaluation = build_evaluation(cfg)
    world = int(cfg.trainer.devices) * int(cfg.trainer.num_nodes)
    ranks = cluster_ranks() if world > 1 else None
    if ranks is not None and ranks.rank != 0:  # one rank of rank 0's fit: no run of its own
        log.info("training as %s", ranks.describe())
        train_as_task(cfg, ranks, evaluation.extraction)
        return {}
    record = OmegaConf.to_container(cfg)
    set_threads(cfg.get("num_threads"))
    reset_peak_gpu(cfg.trainer.device)
    seed_everything(int(cfg.seed))
    dm = build_datamodule(cfg)  # data that cannot load refuses the run before it is opened
    evaluation.check(dm)  # probe settings fitted to the splits (kNN's k) before training
    with open_run(cfg.logger, run_identity(cfg), record) as run:  # type: ignore[arg-type]
        method = build_method(cfg, dm)
        if (start := run.initial_weights(cfg.get("ckpt_path"), cfg.get("from_run"))) is not None:
            method.load_state_dict(start)
        log.info("training %s on %s", type(method).__name__, dm)

        callbacks, by_name = build_callbacks(cfg, dm, run.sink, run.checkpoint_path, evaluation)
        # callbacks.checkpoint writes the checkpoints, every trainer.checkpoint_every epochs
        trainer = instantiate(
            cfg.trainer, callbacks=[run.metrics_callback(), *callbacks], checkpoint_every=None
        )
        trainer.config_hash = run.config_hash
        trainer.checkpoint_extra = run.checkpoint_extra
        if run.resume_state is not None:
            trainer.resume_from(run.resume_state, checkpoint_path=run.checkpoint_path)
        signals.trainer = trainer
        t0 = time.perf_counter()
        try:
            with allocator(str(cfg.get("cpu_allocator", "reuse"))):
                # trainer.devices x trainer.num_nodes ranks; they share out the extraction
                ranked = fit_on_devices(cfg, trainer, method, dm, run, evaluation.extraction)
        except TrainingInterrupted:
            signals.deliver()  # a time-limit warning stopped training: the scheduler's error
            raise
        signals.deliver()
        train_seconds = time.perf_counter() - t0
        fit = ranked.fit
        if ranked.extracted is not None:  # the ranks extracted before their group closed
            train_seconds -= ranked.extracted.seconds

        device, seed = str(cfg.trainer.device), int(cfg.seed)
        result = evaluation.evaluate(
            method,
            dm,
            seed=seed,
            device=device,
            untrained=lambda: build_method(cfg, dm),
            baseline_key=baseline_key(cfg, dm),
            cache_dir=cfg.paths.cache_dir,
            extracted=ranked.extracted,
        )
        stats = dict(getattr(dm, "graph_stats", dict)())  # data/avg_degree, ...
        run.log_dataset(dm.name, OmegaConf.to_container(cfg.dataset), stats)  # type: ignore[arg-type]
        run.log_model(method, method_config(cfg, dm))
        signals.deliver()  # a time-limit warning whose error evaluation code swallowed

        metrics: dict[str, float] = {**stats, **fit.summary()}
        for cb in by_name.values():
            if callable(summary := getattr(cb, "summary", None)):
                metrics.update(summary())
        metrics.update(result.metrics)
        metrics.update({"time/train_seconds": train_seconds, **fit.throughput()})
        metrics.update(result.timings)
        metrics["time/total_seconds"] = time.perf_counter() - t_start
        run.log_results(metrics, tags=result.tags)

        t0 = time.perf_counter()
        title = f"{type(method).__name__} on {dm.name} · {run.run_name or run.run_id}"
        run.log_figures(
            lambda: evaluation.figures(result.embeddings, result.labels, seed=seed, title=title)
        )
        run.log_embeddings(result.embeddings, result.labels)
        # what ran after the metrics above, and the process's peak resident memory at the end
        final = {"time/figures_seconds": time.perf_counter() - t0, "mem/peak_rss_gb": peak_rss_gb()}
        if (gpu := peak_gpu_gb(cfg.trainer.device)) is not None:  # rank 0's GPU on several
            final["mem/peak_gpu_gb"] = gpu
        run.log_metrics(final)
        metrics.update(final)
        table = summary_table(metrics, f"{run_name(cfg)}  (MLflow run {run.run_id})")
        print(table)
        log_to_files(f"summary\n{table}")  # the job log too, without printing it twice
    return metrics
