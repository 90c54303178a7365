"""Learning-rate schedules that methods apply from their ``on_after_optimizer_step`` hook."""

from __future__ import annotations

import math

from torch.optim import Optimizer

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


class CosineLR:
    """Cosine learning-rate decay with an optional linear warm-up, on every parameter group.

    Call :meth:`attach` once the optimizer exists and :meth:`step` after every optimizer step
    with the steps done so far; the next step then runs at ``base_lr · cosine_lr_factor``.

    Args:
        warmup: fraction of the training steps spent warming up (default: ``0.0``).
    """

    def __init__(self, warmup: float = 0.0) -> None:
        if not 0.0 <= warmup < 1.0:
            raise ValueError(f"the warm-up fraction must be in [0, 1), got {warmup}")
        self.warmup = warmup
        self._groups: list[tuple[dict, float]] = []

    def attach(self, optimizer: Optimizer) -> None:
        """Remember the base learning rates; with a warm-up the first step runs at rate 0."""
        self._groups = [(group, float(group["lr"])) for group in optimizer.param_groups]
        if self.warmup > 0:
            for group, _ in self._groups:
                group["lr"] = 0.0

    def step(self, step: int, max_steps: int) -> None:
        factor = cosine_lr_factor(step, max_steps, round(self.warmup * max_steps))
        for group, base_lr in self._groups:
            group["lr"] = base_lr * factor
