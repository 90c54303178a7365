"""Learning-rate schedules, built by a method's ``configure_scheduler`` and stepped by the
:class:`~graphssl.training.trainer.Trainer` after every optimizer step.

A model config selects one as a partial constructor, e.g.
``scheduler: {_target_: graphssl.training.schedules.CosineLR, _partial_: true, warmup: 0.1}``.
"""

from __future__ import annotations

import math

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

__all__ = ["CosineLR", "cosine_lr_factor"]


def cosine_lr_factor(step: int, max_steps: int, warmup_steps: int = 0) -> float:
    """Multiplier of the base learning rate for optimizer step ``step`` (0-based).

    A linear warm-up ``step / warmup_steps`` over the first ``warmup_steps`` steps (from 0, as
    BGRL's reference scheduler), then
    ``(1 + cos(π · t / T)) / 2`` with ``t`` the steps since the warm-up and ``T`` the steps left
    after it (GraphMAE's schedule without warm-up; BGRL's with 10 % of the steps).
    """
    if step < warmup_steps:
        return step / warmup_steps
    span = max_steps - warmup_steps
    if span <= 0:
        return 1.0
    return (1 + math.cos(math.pi * min(step - warmup_steps, span) / span)) / 2


class CosineLR(LRScheduler):
    """Cosine learning-rate decay with an optional linear warm-up, on every parameter group.

    Stepped once after every optimizer step: after ``k`` steps every group runs at
    ``base_lr · cosine_lr_factor(k, max_steps, round(warmup · max_steps))``; with any warm-up
    (``warmup > 0``) the first step runs at rate 0. Its state (steps done, base rates) goes into
    checkpoints through :meth:`state_dict`, so a resumed run continues the same curve.

    Args:
        optimizer: the optimizer whose learning rates follow the schedule.
        max_steps: optimizer steps of the whole run (the trainer passes them).
        warmup: fraction of the training steps spent warming up (default: ``0.0``).
        last_epoch: steps already done, ``-1`` for a fresh schedule (default: ``-1``).
    """

    def __init__(
        self, optimizer: Optimizer, max_steps: int, warmup: float = 0.0, last_epoch: int = -1
    ) -> None:
        if not 0.0 <= warmup < 1.0:
            raise ValueError(f"the warm-up fraction must be in [0, 1), got {warmup}")
        if max_steps < 0:
            raise ValueError(f"max_steps must be >= 0, got {max_steps}")
        self.max_steps = int(max_steps)
        self.warmup = float(warmup)
        self.warmup_steps = round(self.warmup * self.max_steps)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:  # type: ignore[override]
        if self.last_epoch == 0 and self.warmup > 0:
            factor = 0.0  # a warm-up starts from rate 0 even when it rounds to no whole step
        else:
            factor = cosine_lr_factor(self.last_epoch, self.max_steps, self.warmup_steps)
        return [float(base_lr) * factor for base_lr in self.base_lrs]
