"""Each rank's share of an epoch: seeded global batches, cut into one near-equal part per rank."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import Sampler

__all__ = [
    "ShardedBatchSampler",
    "global_batches",
    "neighbor_batches",
    "node_seed_batches",
    "shard",
]


def shard(items: torch.Tensor, parts: int, index: int) -> torch.Tensor:
    """Part ``index`` of ``parts`` near-equal contiguous parts of ``items`` (sizes differ by at
    most one); a batch with fewer items than parts is padded with its first items first, so
    no part is empty."""
    if items.numel() < parts:
        reps = math.ceil(parts / max(items.numel(), 1))
        items = items.repeat(reps)[:parts]
    return torch.tensor_split(items, parts)[index]


def global_batches(
    count: int, batch_size: int, seed: int, drop_last: bool = False
) -> list[torch.Tensor]:
    """The global batches of an epoch: a permutation of ``range(count)`` drawn from a generator
    seeded ``seed``, cut into consecutive batches of ``batch_size`` (the last one shorter,
    or dropped when ``drop_last``)."""
    perm = torch.randperm(count, generator=torch.Generator().manual_seed(int(seed)))
    out = list(perm.split(batch_size))
    if drop_last and out and out[-1].numel() < batch_size:
        out.pop()
    return out


def node_seed_batches(
    num_nodes: int, batch_size: int, seed: int, world: int, me: int
) -> list[torch.Tensor]:
    """This rank's seed nodes for each step of an epoch: every node once per epoch over all
    ranks, global batches of ``batch_size × world`` seeds, rank ``me`` taking part ``me``."""
    return [shard(b, world, me) for b in global_batches(num_nodes, batch_size * world, seed)]


def neighbor_batches(loader: Any, seeds: Sequence[torch.Tensor]) -> Iterator[Any]:
    """The mini-batches a PyG ``NeighborLoader`` (built over every node) samples for the given
    seed tensors, in order: its own sampling and collation, with the seeds chosen here."""
    for nodes in seeds:
        out = loader.collate_fn(nodes)
        yield out if loader.filter_per_worker else loader.filter_fn(out)


class ShardedBatchSampler(Sampler[list[int]]):
    """A batch sampler over ``count`` items for one rank: each epoch one permutation seeded by
    :meth:`set_epoch` (the same on every rank), global batches of ``batch_size × world``, rank
    ``me`` taking part ``me`` of each (the split of ``DistributedSampler``, batch by batch, so
    the global batch of a step is the one a single process would draw).

    Args:
        count: items in the dataset.
        batch_size: items per rank and step.
        world: ranks.
        me: this rank.
        seed: seed of the permutations (epoch ``e`` draws from ``epoch_seed(seed, e)``).
        drop_last: drop a last global batch shorter than the others (default: ``False``).
    """

    def __init__(
        self, count: int, batch_size: int, world: int, me: int, seed: int, drop_last: bool = False
    ) -> None:
        self.count, self.batch_size, self.world, self.me = count, batch_size, world, me
        self.seed, self.drop_last, self.epoch = int(seed), drop_last, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _batches(self) -> list[torch.Tensor]:
        from graphssl.data.sampler import epoch_seed

        batches = global_batches(
            self.count,
            self.batch_size * self.world,
            epoch_seed(self.seed, self.epoch),
            self.drop_last,
        )
        return [shard(b, self.world, self.me) for b in batches]

    def __iter__(self) -> Iterator[list[int]]:
        return (b.tolist() for b in self._batches())

    def __len__(self) -> int:
        full, rest = divmod(self.count, self.batch_size * self.world)
        return full + (1 if rest and not self.drop_last else 0)
