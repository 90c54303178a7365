"""Seeded training helpers shared by the KNIFE kernels and the cross-encoder baseline."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

import torch
from torch import Tensor, nn

from graphssl.progress import stage

__all__ = ["EVAL_BATCH", "adam", "build_seeded", "progress_bar", "shuffled_batches"]

#: Rows per forward pass when evaluating a trained model; does not change any value.
EVAL_BATCH = 4096

_T = TypeVar("_T")


def build_seeded(seed: int, build: Callable[[], _T]) -> _T:
    """Run ``build()`` with the CPU generator seeded, leaving the global RNG untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        return build()


def adam(params: Iterable[nn.Parameter], lr: float) -> torch.optim.Adam:
    """Adam over the trainable parameters; the fused kernel (same update rule, fewer ops per
    step) where this PyTorch build offers it for the parameters' device."""
    trainable = [p for p in params if p.requires_grad]
    try:
        return torch.optim.Adam(trainable, lr=lr, fused=True)
    except (RuntimeError, ValueError):
        return torch.optim.Adam(trainable, lr=lr)


def shuffled_batches(
    tensors: Sequence[Tensor], batch_size: int, generator: torch.Generator
) -> Iterator[list[Tensor]]:
    """One epoch of shuffled minibatches (last one may be smaller, like ``DataLoader``).

    The rows are permuted once per epoch (one gather), then cut into contiguous slices.
    """
    n = tensors[0].shape[0]
    perm = torch.randperm(n, generator=generator).to(tensors[0].device)
    shuffled = [t[perm] for t in tensors]
    for start in range(0, n, batch_size):
        yield [t[start : start + batch_size] for t in shuffled]


def progress_bar(items: Sequence[_T], enabled: bool, desc: str) -> Iterator[_T]:
    """``items`` one by one, with :func:`graphssl.progress.stage`'s bar on a terminal and its
    log line every 30 s off one, when ``enabled``."""
    if not enabled:
        yield from items
        return
    with stage(desc, total=len(items)) as progress:
        for item in items:
            yield item
            progress.advance()
