"""The batches of an epoch, as the trainer's settings ask for them.

* full-batch training, or a dataset of graphs or images: the datamodule's training loader;
* ``trainer.mini_batch=true``: neighbour-sampled mini-batches of the one graph
  (``NeighborLoader`` semantics), one loader kept across epochs and seeded per epoch, so
  resuming at an epoch gives the batches an uninterrupted run has there;
* in a process group: this rank's part of each global batch
  (:mod:`graphssl.training.distributed`), neighbour-sampled from its own seeds with draws of its
  own, or a sharded batch sampler over the dataset's items.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sized
from typing import Any

from torch.utils.data import DataLoader

from graphssl.data.base import DataModule
from graphssl.data.sampler import TorchNeighborSampler, epoch_seed, set_loader_epoch
from graphssl.methods.base import SSLMethod
from graphssl.training import distributed

__all__ = [
    "DEFAULT_NEIGHBORS_PER_HOP",
    "RANK_SEED_STRIDE",
    "EpochBatches",
    "default_fanout",
    "encoder_hops",
]

#: offset between the neighbour-sampling seeds of ranks, so each rank draws its own neighbours
RANK_SEED_STRIDE = 1_000_000_007
#: neighbours sampled per hop when ``trainer.num_neighbors`` is not set
DEFAULT_NEIGHBORS_PER_HOP = 10


def encoder_hops(method: SSLMethod) -> int:
    """Message-passing layers of the method's first encoder that declares ``num_hops`` (two
    when none does)."""
    for encoder in method.encoders().values():
        hops = getattr(encoder, "num_hops", None)
        if isinstance(hops, int) and hops > 0:
            return hops
    return 2


def default_fanout(method: SSLMethod, decoder: bool = False) -> list[int]:
    """``[10] * depth``: one hop per message-passing layer of the method's encoder
    (:func:`encoder_hops`), and with ``decoder`` one more per hop of its decoder
    (:attr:`~graphssl.methods.base.SSLMethod.decoder_hops`)."""
    depth = encoder_hops(method) + (method.decoder_hops if decoder else 0)
    return [DEFAULT_NEIGHBORS_PER_HOP] * depth


class EpochBatches:
    """The batches of each epoch of a fit (call it with the datamodule, method and epoch).

    Args:
        mini_batch: neighbour-sampled mini-batches of the one graph.
        batch_size: seed nodes per mini-batch (per rank in a process group).
        num_neighbors: fanout per hop; ``None``: :func:`default_fanout` of the method (in a
            process group with its decoder's hops).
        limit_batches: at most this many steps an epoch (``None``: all).
    """

    def __init__(
        self,
        mini_batch: bool,
        batch_size: int,
        num_neighbors: list[int] | None = None,
        limit_batches: int | None = None,
    ) -> None:
        self.mini_batch, self.batch_size = mini_batch, batch_size
        self.num_neighbors, self.limit_batches = num_neighbors, limit_batches
        self._train_loader: tuple[DataModule, Iterable[Any]] | None = None
        #: in a process group: the graph or image loader of this rank's slices
        self._rank_loader: tuple[DataModule, DataLoader[Any]] | None = None

    def __call__(self, datamodule: DataModule, method: SSLMethod, epoch: int) -> Iterable[Any]:
        """The batches of ``epoch`` on this process."""
        if distributed.is_distributed():
            return self._rank_batches(datamodule, method, epoch)
        if not self.mini_batch:
            return datamodule.train_dataloader()
        # One loader per datamodule, kept across epochs (its sampler reads the datamodule's CSC
        # index of the graph, built with the first loader); each epoch's shuffling and sampling
        # are seeded from (seed, epoch), so resuming at an epoch gives the batches an
        # uninterrupted run has there.
        if self._train_loader is None or self._train_loader[0] is not datamodule:
            fanout = self.num_neighbors or default_fanout(method)
            loader = datamodule.neighbor_loader(fanout, self.batch_size, shuffle=True)
            self._train_loader = (datamodule, loader)
        loader = self._train_loader[1]
        if hasattr(loader, "graphssl_seed"):
            set_loader_epoch(loader, epoch)  # type: ignore[arg-type]
        return loader

    def _rank_batches(self, datamodule: DataModule, method: SSLMethod, epoch: int) -> Iterable[Any]:
        """This rank's batches of ``epoch`` in a process group: its slice of each global batch
        (:mod:`graphssl.training.distributed`)."""
        world, me = distributed.world_size(), distributed.rank()
        if self.mini_batch:
            if self._train_loader is None or self._train_loader[0] is not datamodule:
                # the decoder's hops too: a seed's loss must not depend on the other seeds
                fanout = self.num_neighbors or default_fanout(method, decoder=True)
                loader = datamodule.neighbor_loader(fanout, self.batch_size, shuffle=False)
                sampler = getattr(loader, "node_sampler", None)
                if isinstance(sampler, TorchNeighborSampler):  # each rank its own draws
                    sampler.seed += RANK_SEED_STRIDE * me
                self._train_loader = (datamodule, loader)
            loader = self._train_loader[1]
            set_loader_epoch(loader, epoch)  # type: ignore[arg-type]
            seeds = distributed.node_seed_batches(
                int(datamodule.data.num_nodes),
                self.batch_size,
                epoch_seed(datamodule.seed, epoch),
                world,
                me,
            )
            return distributed.neighbor_batches(loader, seeds)
        if self._rank_loader is None or self._rank_loader[0] is not datamodule:
            self._rank_loader = (datamodule, self._sharded_loader(datamodule, world, me))
        rank_loader = self._rank_loader[1]
        sampler = rank_loader.batch_sampler
        assert isinstance(sampler, distributed.ShardedBatchSampler)
        sampler.set_epoch(epoch)
        return rank_loader

    @staticmethod
    def _sharded_loader(datamodule: DataModule, world: int, me: int) -> DataLoader[Any]:
        """The datamodule's training loader with this rank's batches of each epoch."""
        loader = datamodule.train_dataloader()
        if not isinstance(loader, DataLoader) or loader.batch_size is None:
            raise ValueError(
                f"dataset {datamodule.name!r} trains on {type(loader).__name__} batches; "
                f"trainer.devices={world} shards a torch DataLoader's items across processes"
            )
        sampler = distributed.ShardedBatchSampler(
            len(loader.dataset),  # type: ignore[arg-type]
            int(loader.batch_size),
            world,
            me,
            seed=datamodule.seed,
            drop_last=bool(loader.drop_last),
        )
        return DataLoader(
            loader.dataset,
            batch_sampler=sampler,
            collate_fn=loader.collate_fn,
            num_workers=loader.num_workers,
        )

    def steps(self, datamodule: DataModule) -> int:
        """Optimizer steps in an epoch of ``datamodule`` on this process."""
        if distributed.is_distributed():
            world = distributed.world_size()
            if self.mini_batch:
                steps = max(1, math.ceil(datamodule.data.num_nodes / (self.batch_size * world)))
            elif self._rank_loader is not None and self._rank_loader[0] is datamodule:
                steps = len(self._rank_loader[1])
            else:
                steps = len(self._sharded_loader(datamodule, world, distributed.rank()))
            return steps if self.limit_batches is None else min(steps, self.limit_batches)
        if not self.mini_batch:
            loader = datamodule.train_dataloader()
            steps = len(loader) if isinstance(loader, Sized) else 1
        else:
            steps = max(1, math.ceil(datamodule.data.num_nodes / self.batch_size))
        return steps if self.limit_batches is None else min(steps, self.limit_batches)
