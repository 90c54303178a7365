"""SIGTERM handled like Ctrl-C for the duration of a task.

Schedulers (SLURM's ``scancel`` and time limit, ``kill``, container runtimes) stop a process
with SIGTERM and a SIGKILL a few seconds later. :class:`SigtermHandler` turns SIGTERM into
:class:`~graphssl.training.trainer.TrainingInterrupted` (a ``KeyboardInterrupt``), so the MLflow
run ends ``KILLED`` as it does on Ctrl-C: during training the current epoch is finished and
checkpointed first (when ``trainer.checkpoint_every`` is set); at any other time, or at a
second SIGTERM, it is raised at once. The previous handler (e.g. submitit's, which ignores
SIGTERM) is restored when the task ends.
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType, TracebackType
from typing import Any

from graphssl.training.trainer import Trainer, TrainingInterrupted

__all__ = ["SigtermHandler"]

log = logging.getLogger(__name__)


class SigtermHandler:
    """Context manager installing the SIGTERM handler (main thread only; elsewhere a no-op).

    Attributes:
        trainer: the trainer whose current epoch should finish first (set once it exists).
    """

    def __init__(self) -> None:
        self.trainer: Trainer | None = None
        self._previous: Any = None
        self._installed = False
        self._requested = False

    def __enter__(self) -> SigtermHandler:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
            self._installed = True
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)
            self._installed = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        trainer = self.trainer
        if trainer is not None and trainer.fitting and not self._requested:
            self._requested = True
            log.warning("SIGTERM received: stopping after the current epoch")
            trainer.request_stop("SIGTERM")
            return
        raise TrainingInterrupted("SIGTERM received")
