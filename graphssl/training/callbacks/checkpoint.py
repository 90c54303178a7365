"""Checkpoints as a trainer callback (``callbacks.checkpoint``), as Lightning's ``ModelCheckpoint``.

:class:`ModelCheckpoint` decides *when* and *where* a checkpoint is written; what goes into it
(method, optimizer, scheduler, random generators, early-stopping counters, the best weights and
the other callbacks' state) is :meth:`Trainer.save_checkpoint
<graphssl.training.trainer.Trainer.save_checkpoint>`'s, written atomically through
:func:`graphssl.training.checkpoint.save_checkpoint`. One file is kept, overwritten each time,
so resuming (``resume=true``, :meth:`Trainer.resume_from
<graphssl.training.trainer.Trainer.resume_from>`) continues from the last epoch written.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from graphssl.training.trainer import Callback, Trainer

__all__ = ["ModelCheckpoint"]


class ModelCheckpoint(Callback):
    """Writes the trainer's resumable state to ``checkpoint_path`` at the end of an epoch.

    An epoch is written when any of these holds:

    * ``every_n_epochs`` is set and the epoch is one of ``every_n_epochs, 2·every_n_epochs, …``
      (1-based) or the last one the fit runs: its epoch budget, early stopping, a callback's
      :attr:`~graphssl.training.trainer.Trainer.should_stop`, or a stop request (SIGTERM,
      :meth:`~graphssl.training.trainer.Trainer.request_stop`);
    * a callback set :attr:`~graphssl.training.trainer.Trainer.should_checkpoint` (e.g. the
      metrics callback while the tracking store is unreachable), also when ``every_n_epochs``
      is ``None``.

    The write happens in :meth:`on_epoch_checkpoint`: after the epoch's stop decision, with every
    callback's :meth:`~graphssl.training.trainer.Callback.on_checkpoint` run first, and before
    any :meth:`~graphssl.training.trainer.Callback.on_epoch_complete`, so slow or fallible I/O
    there (metrics sent to a store) never costs the epoch's checkpoint.

    Args:
        checkpoint_path: the checkpoint file (the train task passes the run's
            ``outputs/checkpoints/<config hash>/last.pt``).
        every_n_epochs: write every this many epochs and at the fit's last epoch; ``None``
            writes only the epochs a callback asks for (default: ``None``).

    Raises:
        ValueError: ``every_n_epochs`` is below 1.
    """

    def __init__(
        self, checkpoint_path: str | os.PathLike[str], every_n_epochs: int | None = None
    ) -> None:
        if every_n_epochs is not None and every_n_epochs < 1:
            raise ValueError(
                f"callbacks.checkpoint.every_n_epochs (trainer.checkpoint_every) must be >= 1 or "
                f"null, got {every_n_epochs}"
            )
        self.checkpoint_path = Path(checkpoint_path)
        self.every_n_epochs = every_n_epochs

    def due(self, trainer: Trainer, epoch: int) -> bool:
        """Whether ``epoch`` (0-based) is written; valid once the trainer has decided whether
        the fit ends there (:attr:`~graphssl.training.trainer.Trainer.is_last_epoch`)."""
        if trainer.should_checkpoint:
            return True
        if self.every_n_epochs is None:
            return False
        return (epoch + 1) % self.every_n_epochs == 0 or trainer.is_last_epoch

    def on_epoch_checkpoint(self, trainer: Trainer, method: Any, epoch: int) -> None:
        if self.due(trainer, epoch):
            trainer.save_checkpoint(method, self.checkpoint_path)
