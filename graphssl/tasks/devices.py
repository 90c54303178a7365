"""``trainer.devices`` and ``trainer.num_nodes``: the train task's fit on one process or on several.

With ``trainer.devices=1`` and ``trainer.num_nodes=1`` (the defaults) :func:`fit_on_devices` is
``trainer.fit(method, dm)``. With more, one model trains on ``devices × num_nodes`` ranks of a
``torch.distributed`` group, started one of two ways:

* **spawned** (one machine, one process of a job): this process (the Hydra job, which holds the
  MLflow run) becomes rank 0 and :func:`graphssl.training.distributed.launch` spawns ranks
  ``1..N-1``; each gets rank 0's graph through shared memory (or rebuilds a graph or image
  dataset) and builds the method from the resolved config (:func:`_rank_worker`). For
  neighbour-sampled training, rank 0 also builds the sampler's CSC index of the graph once, in
  shared memory, and every rank samples from that one copy (:func:`share_with_ranks`);
* **cluster tasks** (a SLURM job step of ``devices`` tasks on each of ``num_nodes`` machines,
  as ``hydra/launcher=submitit_slurm`` with ``tasks_per_node``/``nodes`` starts it): every task
  runs the train task, and :func:`~graphssl.training.distributed.cluster_ranks` reads its rank
  from the scheduler's environment. Task 0 is rank 0 and opens the MLflow run; every other task
  runs :func:`train_as_task` instead, which never opens the store. The tasks are separate
  processes, possibly on separate machines: each loads its own graph and builds its own
  sampler index.

Either way the other ranks run the same training loop with no callbacks: only rank 0 logs,
checkpoints and evaluates. After the fit, mini-batch and layer-wise extraction are shared out
across the ranks (:func:`extract_on_ranks`) before the group closes; rank 0 evaluates alone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from torch_geometric.data import Data

from graphssl.data.base import DataModule
from graphssl.data.node import InMemoryNodeDataModule
from graphssl.data.sampler import SamplerIndex, uses_torch_sampler
from graphssl.evaluation.extraction import ShardedExtraction, extract_sharded
from graphssl.methods.base import SSLMethod
from graphssl.tasks.components import build_datamodule, build_method
from graphssl.training import distributed
from graphssl.training.trainer import FitResult, Trainer
from graphssl.utils import allocator, seed_everything, system_allocator

__all__ = [
    "DevicesFit",
    "extract_on_ranks",
    "fit_on_devices",
    "share_with_ranks",
    "shared_sampler_index",
    "train_as_task",
]


@dataclass
class DevicesFit:
    """What :func:`fit_on_devices` gives rank 0.

    Attributes:
        fit: the training summary.
        extracted: the embeddings the ranks extracted together after training, ``None`` when
            one process trained or the extraction plan is not shared out (full-batch,
            graph-level datasets): rank 0 then extracts alone.
    """

    fit: FitResult
    extracted: ShardedExtraction | None = None


def fit_on_devices(
    cfg: DictConfig,
    trainer: Trainer,
    method: SSLMethod,
    dm: DataModule,
    run: Any = None,
    extraction: Mapping[str, Any] | None = None,
) -> DevicesFit:
    """``trainer.fit(method, dm)`` on ``trainer.devices × trainer.num_nodes`` processes.

    Args:
        cfg: the resolved train config (the spawned ranks rebuild their objects from it).
        trainer: rank 0's trainer, with the run's callbacks.
        method: rank 0's method; its BatchNorm layers are plain ones again afterwards.
        dm: rank 0's datamodule.
        run: the run object; on several processes it gets the tag ``dist/backend``.
        extraction: the evaluation's extraction settings (``Evaluation.extraction``); with
            them, the ranks share out a mini-batch or layer-wise extraction after training.

    Raises:
        RankFailedError: another rank failed or died; the message names it.
    """
    world = trainer.devices * trainer.num_nodes
    if world == 1:
        return DevicesFit(trainer.fit(method, dm))
    device = str(trainer.device)
    ranks = distributed.cluster_ranks()
    if ranks is None:
        _check_cuda(trainer.device, world)
    if run is not None:
        run.sink.set_tags({"dist/backend": distributed.backend_for(device)})

    def main() -> DevicesFit:
        fit = trainer.fit(method, dm)
        extracted = None
        if extraction is not None:
            extracted = extract_on_ranks(method, dm, extraction, str(trainer.device))
        return DevicesFit(fit, extracted)

    try:
        if ranks is not None:
            threads = distributed.threads_per_rank(1, cfg.get("num_threads"))
            return distributed.launch_tasks(
                main, ranks, device=device, timeout_s=trainer.dist_timeout_s, threads=threads
            )
        container = OmegaConf.to_container(cfg, resolve=True)
        # one graph: the spawned ranks get rank 0's prepared graph and sampler index in shared
        # memory instead of each loading and converting its own copy
        graph, index = share_with_ranks(trainer, dm)
        threads = distributed.threads_per_rank(world, cfg.get("num_threads"))
        settings = None if extraction is None else dict(extraction)
        return distributed.launch(
            main,
            _rank_worker,
            (container, graph, dm.name, dm.seed, settings, index),
            world,
            device=device,
            timeout_s=trainer.dist_timeout_s,
            threads=threads,
        )
    finally:
        distributed.revert_sync_batchnorm(method)


def share_with_ranks(trainer: Trainer, dm: DataModule) -> tuple[Data | None, SamplerIndex | None]:
    """What rank 0 hands the spawned ranks: its graph, its tensors moved to shared memory
    (``None`` for graph-level data, which each rank rebuilds), and the sampler index of
    :func:`shared_sampler_index`.

    torch.multiprocessing's pickler would move the graph when the ranks start; moving it here,
    before the index is built, keeps the index's sort from running while the graph is in memory
    twice (a graph mapped from a file, as ``synthetic_large`` loads its cache, stays mapped
    until all its tensors are copied). Both run under :func:`~graphssl.utils.system_allocator`,
    so the memory they free (the copied tensors, the sort's temporaries) goes back to the system
    instead of staying in rank 0's heap under ``cpu_allocator=reuse``.
    """
    graph = None if dm.is_graph_level else dm.data
    with system_allocator():
        if graph is not None:
            graph.share_memory_()
        index = shared_sampler_index(trainer, dm)
    return graph, index


def shared_sampler_index(trainer: Trainer, dm: DataModule) -> SamplerIndex | None:
    """The sampler's CSC index of ``dm``'s graph in shared memory, for the spawned ranks of a
    neighbour-sampled fit to adopt (:func:`_rank_worker`); ``None`` when the fit does not
    sample neighbours (full-batch, graph-level data) or PyG's compiled sampler, which converts
    the graph itself, samples them.

    ``dm`` keeps the index (:meth:`~graphssl.data.base.DataModule.sampler_index`), so rank 0's
    own loaders, training and then mini-batch extraction, read the same shared copy.
    """
    if not trainer.mini_batch or dm.is_graph_level or not uses_torch_sampler():
        return None
    return dm.sampler_index(share_memory=True)


def extract_on_ranks(
    method: SSLMethod, dm: DataModule, extraction: Mapping[str, Any], device: str
) -> ShardedExtraction | None:
    """Every rank's part of the evaluation's extraction, run by all ranks after the fit.

    The model gets plain BatchNorm layers back and rank 0's parameters and buffers (a callback
    on rank 0 may have restored an earlier epoch's weights), then
    :func:`~graphssl.evaluation.extraction.extract_sharded` shares out a mini-batch or
    layer-wise extraction. Returns the embeddings on rank 0; ``None`` on the other ranks, and
    on every rank for a plan that is not shared out.
    """
    distributed.revert_sync_batchnorm(method)
    distributed.broadcast_parameters(method)
    return extract_sharded(
        method,
        dm,
        encoder_source=extraction["encoder_source"],
        device=device,
        mini_batch=bool(extraction["mini_batch"]),
        num_neighbors=extraction["num_neighbors"],
        mode=extraction["mode"],
        memory_budget_gb=extraction["memory_budget_gb"],
        chunk_size=extraction["chunk_size"],
    )


def _check_cuda(device: torch.device, devices: int) -> None:
    """On CUDA, rank ``r`` uses ``cuda:r``: the run's device must be the first GPU and the
    machine must have one GPU per rank."""
    if device.type != "cuda":
        return
    if device.index not in (None, 0):
        raise ValueError(
            f"trainer.device={device} with trainer.devices={devices}: rank r trains on cuda:r, "
            f"so the run's device names all GPUs from the first; expected trainer.device=cuda "
            f"(limit the GPUs with CUDA_VISIBLE_DEVICES)"
        )
    available = torch.cuda.device_count()
    if devices > available:
        raise ValueError(
            f"trainer.devices={devices} asks for one GPU per process, but {available} CUDA "
            f"device(s) are visible; expected trainer.devices <= {available}"
        )


def _rank_trainer(cfg: DictConfig, device: torch.device) -> Trainer:
    """The trainer of a rank other than 0: the config's, without callbacks, checkpoints,
    progress bar or epoch log."""
    trainer: Trainer = instantiate(
        cfg.trainer,
        callbacks=[],
        checkpoint_every=None,
        progress=False,
        log_every=None,
        device=str(device),
    )
    return trainer


def _rank_worker(
    rank: int,
    container: dict[str, Any],
    graph: Data | None,
    name: str,
    data_seed: int,
    extraction: dict[str, Any] | None = None,
    index: SamplerIndex | None = None,
) -> Callable[[], None]:
    """Rank ``rank`` (>= 1) of a spawned multi-process fit: the datamodule (around rank 0's
    shared ``graph`` when there is one, adopting rank 0's shared sampler ``index`` when given,
    so that its loaders do not convert the graph again), method and trainer of the config,
    seeded as rank 0 seeds them; returns their fit (then the shared extraction), without
    callbacks, progress bar or epoch log."""
    cfg = OmegaConf.create(container)
    assert isinstance(cfg, DictConfig)
    seed_everything(int(cfg.seed))
    if graph is not None:  # the training loop reads the graph, its name and its seed
        dm: DataModule = InMemoryNodeDataModule(graph, name=name, split="random", seed=data_seed)
        dm.setup()
        seed_everything(int(cfg.seed))  # as rank 0, which built its datamodule after seeding
    else:
        dm = build_datamodule(cfg)
    if index is not None:
        dm.set_sampler_index(index)
    method = build_method(cfg, dm)
    device = distributed.rank_device(str(cfg.trainer.device), rank)
    trainer = _rank_trainer(cfg, device)
    return functools.partial(
        _fit_and_extract, trainer, method, dm, extraction, str(device), _allocator_mode(cfg)
    )


def _allocator_mode(cfg: DictConfig) -> str:
    return str(cfg.get("cpu_allocator", "reuse"))


def _fit_and_extract(
    trainer: Trainer,
    method: SSLMethod,
    dm: DataModule,
    extraction: Mapping[str, Any] | None,
    device: str,
    cpu_allocator: str,
) -> None:
    """Train, then share the extraction, under the C allocator that rank 0's train task sets
    (``cpu_allocator``): without it a rank page-faults its large activations back in at
    every step and runs slower than rank 0, which then waits for it."""
    with allocator(cpu_allocator):
        trainer.fit(method, dm)
        if extraction is not None:
            extract_on_ranks(method, dm, extraction, device)


def train_as_task(
    cfg: DictConfig, ranks: distributed.ClusterRanks, extraction: Mapping[str, Any]
) -> None:
    """The train task on a cluster task other than rank 0: build the datamodule, method and
    trainer of the resolved ``cfg`` (seeded as rank 0 seeds them), join rank 0's group
    (:func:`~graphssl.training.distributed.join_tasks`), train and share the extraction. No
    MLflow run is opened and nothing is logged to the store: rank 0 does that for the job."""
    threads = distributed.threads_per_rank(1, cfg.get("num_threads"))
    torch.set_num_threads(threads)
    seed_everything(int(cfg.seed))
    dm = build_datamodule(cfg)
    if not dm.is_graph_level:  # seeded again as a spawned rank is: the same random streams
        seed_everything(int(cfg.seed))
    method = build_method(cfg, dm)
    device = distributed.task_device(str(cfg.trainer.device), ranks.local_rank)
    trainer = _rank_trainer(cfg, device)
    distributed.join_tasks(
        functools.partial(
            _fit_and_extract, trainer, method, dm, extraction, str(device), _allocator_mode(cfg)
        ),
        ranks,
        device=str(cfg.trainer.device),
        timeout_s=trainer.dist_timeout_s,
        threads=threads,
    )
