"""Scheduler signals handled at safe points for the duration of a task.

Schedulers (SLURM's ``scancel`` and time limit, ``kill``, container runtimes) stop a process
with SIGTERM and a SIGKILL a few seconds later. :class:`TaskSignals` turns SIGTERM into
:class:`~graphssl.training.trainer.TrainingInterrupted` (a ``KeyboardInterrupt``), so the MLflow
run ends ``KILLED`` as it does on Ctrl-C: during training the current epoch is finished and
checkpointed first (when ``trainer.checkpoint_every`` is set); at any other time, or at a
second SIGTERM, it is raised at once. The previous handler (e.g. submitit's, which ignores
SIGTERM) is restored when the task ends.

Before a time limit, SLURM can warn a job with another signal (submitit asks for SIGUSR2,
``--signal=USR2@<signal_delay_s>``); submitit's handler then checkpoints the job for a requeue or
raises its "timed-out" error. Raised wherever the process happens to be, that error can land
inside library code that swallows errors (a database connection pool returning a connection,
a retry loop), and the job then trains on until the scheduler kills it. So when such a handler
is installed, a warning that arrives during training only stops training after the current
epoch (checkpointed); the task then calls the scheduler's handler from a safe point
(:meth:`TaskSignals.deliver`), outside any store call. At any other time the handler is called
at once, and :meth:`TaskSignals.deliver` calls it again at the next safe point, in case the
error was swallowed.
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType, TracebackType
from typing import Any

from graphssl.training.trainer import Trainer, TrainingInterrupted

__all__ = ["TaskSignals"]

log = logging.getLogger(__name__)

#: the signal a scheduler sends ahead of a time limit (submitit's ``--signal=USR2@...``)
WARNING_SIGNAL = getattr(signal, "SIGUSR2", None)


class TaskSignals:
    """Context manager installing the SIGTERM handler, and deferring the scheduler's warning
    signal to safe points when a Python handler for it is installed (main thread only;
    elsewhere a no-op).

    Attributes:
        trainer: the trainer whose current epoch should finish first (set once it exists).
    """

    def __init__(self) -> None:
        self._trainer: Trainer | None = None
        self._previous: dict[int, Any] = {}
        self._sigterm = False
        self._warning: tuple[int, FrameType | None] | None = None

    @property
    def trainer(self) -> Trainer | None:
        return self._trainer

    @trainer.setter
    def trainer(self, trainer: Trainer | None) -> None:
        self._trainer = trainer
        if trainer is not None and self._warning is not None:  # arrived before training
            trainer.request_stop(_name(self._warning[0]))

    def __enter__(self) -> TaskSignals:
        if threading.current_thread() is not threading.main_thread():
            return self
        self._previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, self._on_sigterm)
        if WARNING_SIGNAL is not None and callable(signal.getsignal(WARNING_SIGNAL)):
            self._previous[WARNING_SIGNAL] = signal.signal(WARNING_SIGNAL, self._on_warning)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}

    # ------------------------------------------------------------------ SIGTERM
    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        trainer = self._trainer
        if trainer is not None and trainer.fitting and not self._sigterm:
            self._sigterm = True
            log.warning("SIGTERM received: stopping after the current epoch")
            trainer.request_stop("SIGTERM")
            return
        self._sigterm = True
        raise TrainingInterrupted("SIGTERM received")

    # ------------------------------------------------------------------ time-limit warning
    def _on_warning(self, signum: int, frame: FrameType | None) -> None:
        first = self._warning is None
        self._warning = (signum, frame)
        trainer = self._trainer
        if trainer is not None and trainer.fitting:
            if first:
                log.warning(
                    "%s received (the scheduler's time-limit warning): stopping after the "
                    "current epoch",
                    _name(signum),
                )
            trainer.request_stop(_name(signum))
            return
        self._call_previous()

    @property
    def warned(self) -> bool:
        """Whether the scheduler's warning signal arrived during the task."""
        return self._warning is not None

    def deliver(self) -> None:
        """At a safe point: hand a warning signal that arrived to the scheduler's handler
        (which typically raises, or requeues and exits). Nothing when none arrived, or when
        SIGTERM came after it (the limit itself: the run ends ``KILLED``)."""
        if self._warning is not None and not self._sigterm:
            self._call_previous()

    def _call_previous(self) -> None:
        assert self._warning is not None
        signum, frame = self._warning
        previous = self._previous.get(signum)
        if callable(previous):
            previous(signum, frame)


def _name(signum: int) -> str:
    return signal.Signals(signum).name
