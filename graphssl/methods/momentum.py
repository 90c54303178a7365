"""Momentum (EMA) targets: the schedule of the momentum and the parameter update.

BGRL, AFGRL, BYOL, DINO and GraphDINO keep a target network that follows the online network as
an exponential moving average whose momentum rises to 1 over training.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["cosine_ema_momentum", "ema_update"]


def cosine_ema_momentum(step: int, max_steps: int, base: float) -> float:
    """BYOL's schedule: momentum rises from ``base`` to 1 along a cosine over training.

    Args:
        step: optimizer steps done so far.
        max_steps: optimizer steps of the whole training run.
        base: momentum at step 0.

    Returns:
        ``1 - (1 - base) · (cos(π · step / max_steps) + 1) / 2``; ``base`` when
        ``max_steps <= 1``.
    """
    if max_steps <= 1:
        return base
    return 1.0 - (1.0 - base) * (math.cos(math.pi * step / max_steps) + 1) / 2


@torch.no_grad()
def ema_update(target: nn.Module, online: nn.Module, momentum: float) -> None:
    """``target ← momentum·target + (1 − momentum)·online`` for parameters; buffers are copied.

    Both modules must have the same architecture (parameters and buffers in the same order).
    """
    for t, o in zip(target.parameters(), online.parameters(), strict=True):
        t.mul_(momentum).add_(o.detach(), alpha=1.0 - momentum)
    for tb, ob in zip(target.buffers(), online.buffers(), strict=True):
        tb.copy_(ob)
