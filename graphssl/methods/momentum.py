"""Momentum (EMA) targets: the base of the online/target methods, its schedule and its update.

BGRL, AFGRL, BYOL, DINO and GraphDINO train an online network (BYOL's word; DINO's: the student)
by gradient and keep a target network (DINO's: the teacher) that follows it as an exponential
moving average whose momentum rises to 1 along a cosine over training. :class:`MomentumMethod`
owns that part, as timm's ``ModelEma`` and lightly's ``update_momentum`` do for image models:
it builds each target module as a frozen copy of its online module, schedules the momentum,
updates the targets after every optimizer step and names the online and target encoders for
``extract_embeddings(encoder_source=...)``. A subclass builds its online modules and heads,
calls :meth:`MomentumMethod.add_target` once per module the target follows, and implements its
loss.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn

from graphssl.methods.base import OptimizerFactory, SchedulerFactory, SSLMethod

__all__ = ["MomentumMethod", "check_unit_interval", "cosine_ema_momentum", "ema_update"]


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


def check_unit_interval(name: str, value: float) -> float:
    """``value`` when it lies in ``[0, 1]`` (a momentum or a fraction), else a ValueError."""
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value}")
    return value


class MomentumMethod(SSLMethod):
    """Base of the methods whose target network is an EMA of the online network.

    A subclass assigns its online modules as attributes, then calls :meth:`add_target` for each
    one the target follows (the encoder first, then e.g. a projector or a head), in the order
    the modules should appear in the state dict. The target modules are ordinary attributes,
    so checkpoints name them as the subclass does (``target.*``, ``teacher_head.*``, ...). The
    target's parameters do not require gradients, so the optimizer (over
    :meth:`~graphssl.methods.base.SSLMethod.trainable_parameters`) sees the online side only.

    After every optimizer step the trainer calls :meth:`on_after_optimizer_step`, which moves
    every target module towards its online module with :meth:`momentum_at` (BYOL's cosine
    schedule from ``momentum`` to 1, :func:`cosine_ema_momentum`). Subclasses that keep more
    moving state (DINO's center) extend that hook and call ``super()``.

    Class attributes set how evaluation sees the two encoders:

    * :attr:`roles` — the names :meth:`encoders` gives the online and the target encoder
      (``("online", "target")``, or DINO's ``("student", "teacher")``), which are the
      ``encoder_source`` choices of ``extract_embeddings``;
    * :attr:`evaluated_role` — the one of them :meth:`forward` embeds with;
    * :attr:`names_encoder` — whether :meth:`encoders` also names the evaluated encoder
      ``"encoder"``.

    Args:
        optimizer: partial optimizer constructor.
        scheduler: partial learning-rate scheduler constructor, stepped after every optimizer
            step (default: ``None``, a constant learning rate).
        momentum: base EMA momentum of the target, annealed to 1 (default: ``0.99``).

    Raises:
        ValueError: when ``momentum`` is outside ``[0, 1]``.
    """

    #: the names of the online and the target encoder in :meth:`encoders`
    roles: tuple[str, str] = ("online", "target")
    #: the role whose encoder :meth:`forward` embeds with, one of :attr:`roles`
    evaluated_role: str = "online"
    #: whether :meth:`encoders` also names the evaluated encoder ``"encoder"``
    names_encoder: bool = True

    def __init__(
        self,
        optimizer: OptimizerFactory | None = None,
        scheduler: SchedulerFactory | None = None,
        momentum: float = 0.99,
    ) -> None:
        super().__init__(optimizer, scheduler)
        if self.evaluated_role not in self.roles:
            raise ValueError(
                f"{type(self).__name__}.evaluated_role={self.evaluated_role!r} is not one of "
                f"its roles {self.roles}"
            )
        self.momentum = check_unit_interval("momentum", momentum)
        # attribute names, not modules: a module list would register the modules a second
        # time and add keys to the state dict
        self._momentum_pairs: list[tuple[str, str]] = []

    # ------------------------------------------------------------------ building the target
    def add_target(self, name: str, follows: str) -> nn.Module:
        """Set attribute ``name`` to a copy of the online module ``self.<follows>`` with
        gradients off, and let it follow that module by EMA; the first pair added is the
        encoder pair :meth:`encoders` names.

        Args:
            name: attribute of the target module (e.g. ``"target"``, ``"teacher_head"``).
            follows: attribute of the online module it copies and follows.

        Returns:
            The target module (it starts equal to the online one; a subclass may re-draw it).
        """
        online = getattr(self, follows)
        if not isinstance(online, nn.Module):
            raise TypeError(
                f"{type(self).__name__}.{follows} is a {type(online).__name__}, not a module "
                f"a target can follow"
            )
        target = copy.deepcopy(online).requires_grad_(False)
        setattr(self, name, target)
        self._momentum_pairs.append((name, follows))
        return target

    def momentum_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        """``(target, online)`` module pairs the EMA updates, in the order they were added."""
        return [(getattr(self, t), getattr(self, o)) for t, o in self._momentum_pairs]

    # ------------------------------------------------------------------ the update
    def momentum_at(self, step: int, max_steps: int) -> float:
        """The EMA momentum after ``step`` of ``max_steps`` optimizer steps."""
        return cosine_ema_momentum(step, max_steps, self.momentum)

    @torch.no_grad()
    def update_targets(self, momentum: float) -> None:
        """Move every target module towards its online module (:func:`ema_update`)."""
        for target, online in self.momentum_pairs():
            ema_update(target, online, momentum)

    def on_after_optimizer_step(self, step: int, max_steps: int) -> None:
        """EMA update of the targets with :meth:`momentum_at` (``step``, ``max_steps``)."""
        self.update_targets(self.momentum_at(step, max_steps))

    # ------------------------------------------------------------------ evaluation
    def _encoder_pair(self) -> tuple[nn.Module, nn.Module]:
        if not self._momentum_pairs:
            raise RuntimeError(
                f"{type(self).__name__} has no target yet: call add_target(...) for its "
                f"encoder in __init__"
            )
        target, online = self.momentum_pairs()[0]
        return online, target

    @property
    def evaluated_encoder(self) -> nn.Module:
        """The encoder :meth:`forward` embeds with: the online or the target one, by
        :attr:`evaluated_role`."""
        return self.encoders()[self.evaluated_role]

    def encoders(self) -> dict[str, nn.Module]:
        """The evaluated encoder first under its role, the other one, then ``"encoder"`` for
        the evaluated one when :attr:`names_encoder`."""
        online, target = self._encoder_pair()
        by_role = dict(zip(self.roles, (online, target), strict=True))
        other = self.roles[1] if self.evaluated_role == self.roles[0] else self.roles[0]
        named = {self.evaluated_role: by_role[self.evaluated_role], other: by_role[other]}
        if self.names_encoder:
            named["encoder"] = by_role[self.evaluated_role]
        return named
