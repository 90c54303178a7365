"""``trainer.devices``: the train task's fit on one process or on several.

With ``trainer.devices=1`` (the default) :func:`fit_on_devices` is ``trainer.fit(method, dm)``.
With ``N > 1`` this process (the Hydra job, which holds the MLflow run) becomes rank 0 of a
``torch.distributed`` group and :func:`graphssl.training.distributed.launch` spawns ranks
``1..N-1``; each of those gets rank 0's graph through shared memory (or rebuilds a graph or
image dataset), builds the method from the resolved config (:func:`_rank_worker`) and runs the
same training loop with no callbacks: only rank 0 logs,
checkpoints and evaluates; the other ranks never import MLflow or open the store.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from torch_geometric.data import Data

from graphssl.data.base import DataModule
from graphssl.data.node import InMemoryNodeDataModule
from graphssl.methods.base import SSLMethod
from graphssl.tasks.components import build_datamodule, build_method
from graphssl.training import distributed
from graphssl.training.trainer import FitResult, Trainer
from graphssl.utils import seed_everything

__all__ = ["fit_on_devices"]


def fit_on_devices(
    cfg: DictConfig, trainer: Trainer, method: SSLMethod, dm: DataModule, run: Any = None
) -> FitResult:
    """``trainer.fit(method, dm)`` on ``trainer.devices`` processes of this machine.

    Args:
        cfg: the resolved train config (the spawned ranks rebuild their objects from it).
        trainer: rank 0's trainer, with the run's callbacks.
        method: rank 0's method; its BatchNorm layers are plain ones again afterwards.
        dm: rank 0's datamodule.
        run: the run object; on several processes it gets the tag ``dist/backend``.

    Raises:
        RankFailedError: a spawned rank failed or died; the message names it.
    """
    devices = trainer.devices * trainer.num_nodes
    if devices == 1:
        return trainer.fit(method, dm)
    device = str(trainer.device)
    _check_cuda(trainer.device, devices)
    if run is not None:
        run.sink.set_tags({"dist/backend": distributed.backend_for(device)})
    container = OmegaConf.to_container(cfg, resolve=True)
    # one graph: the spawned ranks get rank 0's prepared graph, its tensors moved to shared
    # memory by torch.multiprocessing's pickler, instead of each loading its own copy
    graph = None if dm.is_graph_level else dm.data
    threads = distributed.threads_per_rank(devices, cfg.get("num_threads"))
    try:
        return distributed.launch(
            lambda: trainer.fit(method, dm),
            _rank_worker,
            (container, graph, dm.name, dm.seed),
            devices,
            device=device,
            timeout_s=trainer.dist_timeout_s,
            threads=threads,
        )
    finally:
        distributed.revert_sync_batchnorm(method)


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


def _rank_worker(
    rank: int, container: dict[str, Any], graph: Data | None, name: str, data_seed: int
) -> Callable[[], FitResult]:
    """Rank ``rank`` (>= 1) of a multi-process fit: the datamodule (around rank 0's shared
    ``graph`` when there is one), method and trainer of the config, seeded as rank 0 seeds them;
    returns their fit, without callbacks, progress bar or epoch log."""
    cfg = OmegaConf.create(container)
    assert isinstance(cfg, DictConfig)
    seed_everything(int(cfg.seed))
    if graph is not None:  # the training loop reads the graph, its name and its seed
        dm: DataModule = InMemoryNodeDataModule(graph, name=name, split="random", seed=data_seed)
        dm.setup()
        seed_everything(int(cfg.seed))  # as rank 0, which built its datamodule after seeding
    else:
        dm = build_datamodule(cfg)
    method = build_method(cfg, dm)
    trainer = instantiate(
        cfg.trainer,
        callbacks=[],
        checkpoint_every=None,
        progress=False,
        log_every=None,
        device=str(distributed.rank_device(str(cfg.trainer.device), rank)),
    )
    return functools.partial(trainer.fit, method, dm)
