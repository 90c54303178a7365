"""Scheduler signals during a task: SIGTERM, and the time-limit warning (submitit's SIGUSR2).

submitit's warning handler raises its "timed-out" error wherever the process is; raised inside
a library call that swallows errors, the job would train on until the hard limit. During
training the warning must only stop training after the current epoch (checkpointed), and the
scheduler's handler must run afterwards, from :meth:`TaskSignals.deliver`.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir

from graphssl.tasks.components import build_datamodule, build_method, resolve_config
from graphssl.tasks.signals import TaskSignals
from graphssl.training.callbacks import ModelCheckpoint
from graphssl.training.checkpoint import load_checkpoint
from graphssl.training.trainer import Callback, Trainer, TrainingInterrupted
from graphssl.utils import seed_everything

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "SIGUSR2"),
    reason="this platform (Windows) has no SIGUSR2, the signal SLURM and submitit warn a job with",
)

CONF = Path(__file__).resolve().parents[3] / "conf"


class TimedOut(RuntimeError):
    """Stands for submitit's ``UncompletedJobError``."""


@pytest.fixture
def scheduler_handler() -> Iterator[list[int]]:
    """A Python SIGUSR2 handler that raises, as submitit's does; yields its calls."""
    calls: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        calls.append(signum)
        raise TimedOut("Job not requeued because: timed-out too many times.")

    previous = signal.signal(signal.SIGUSR2, handler)
    try:
        yield calls
    finally:
        signal.signal(signal.SIGUSR2, previous)


class SignalAt(Callback):
    """Sends ``signum`` to this process in the middle of ``epoch`` (its ``on_epoch_end``)."""

    def __init__(self, epoch: int, *signums: int) -> None:
        self.epoch, self.signums = epoch, signums
        self.returned = False

    def on_epoch_end(self, trainer: Any, method: Any, result: Any) -> None:
        if result.epoch == self.epoch:
            for signum in self.signums:
                os.kill(os.getpid(), signum)
            self.returned = True  # the handler did not raise here


def _trainer(path: Path, *callbacks: Callback) -> tuple[Trainer, Any, Any]:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            config_name="train",
            overrides=["dataset=sbm", "model=dgi", "encoder.hidden_channels=8"],
        )
    cfg = resolve_config(cfg)
    seed_everything(0)
    dm = build_datamodule(cfg)
    trainer = Trainer(
        epochs=50,
        progress=False,
        callbacks=[*callbacks, ModelCheckpoint(path, every_n_epochs=10)],
    )
    return trainer, build_method(cfg, dm), dm


def test_warning_during_training_stops_after_the_epoch_then_reaches_the_handler(
    tmp_path: Path, scheduler_handler: list[int]
) -> None:
    at = SignalAt(3, signal.SIGUSR2)
    trainer, method, dm = _trainer(tmp_path / "last.pt", at)
    with TaskSignals() as signals:
        signals.trainer = trainer
        with pytest.raises(TrainingInterrupted, match="SIGUSR2: training stopped after epoch 4"):
            trainer.fit(method, dm)
        assert at.returned and scheduler_handler == []  # nothing raised inside the epoch
        assert signals.warned
        with pytest.raises(TimedOut, match="timed-out"):
            signals.deliver()
    assert scheduler_handler == [signal.SIGUSR2]
    # the epoch the warning arrived in was checkpointed, though it is not one of every 10
    assert int(load_checkpoint(tmp_path / "last.pt")["epoch"]) == 3
    # the scheduler's handler is back once the task ends
    assert signal.getsignal(signal.SIGUSR2) is not signals._on_warning


def test_warning_outside_training_raises_at_once_and_again_if_swallowed(
    scheduler_handler: list[int],
) -> None:
    with TaskSignals() as signals:
        with pytest.raises(TimedOut):
            os.kill(os.getpid(), signal.SIGUSR2)
        # library code that swallowed it: the next safe point raises it again
        with pytest.raises(TimedOut):
            signals.deliver()
    assert scheduler_handler == [signal.SIGUSR2, signal.SIGUSR2]


def test_warning_before_training_stops_the_first_epoch(
    tmp_path: Path, scheduler_handler: list[int]
) -> None:
    trainer, method, dm = _trainer(tmp_path / "last.pt")
    with TaskSignals() as signals:
        # e.g. while the dataset loads, inside code that swallows every error
        with contextlib.suppress(TimedOut):
            os.kill(os.getpid(), signal.SIGUSR2)
        signals.trainer = trainer
        with pytest.raises(TrainingInterrupted, match="after epoch 1"):
            trainer.fit(method, dm)
        with pytest.raises(TimedOut):
            signals.deliver()


def test_sigterm_after_the_warning_ends_killed_without_the_handler(
    tmp_path: Path, scheduler_handler: list[int]
) -> None:
    trainer, method, dm = _trainer(
        tmp_path / "last.pt", SignalAt(2, signal.SIGUSR2, signal.SIGTERM)
    )
    with TaskSignals() as signals:
        signals.trainer = trainer
        with pytest.raises(TrainingInterrupted, match="SIGTERM: training stopped after epoch 3"):
            trainer.fit(method, dm)
        signals.deliver()  # the limit itself came: the run ends KILLED, not timed-out
    assert scheduler_handler == []


def test_no_python_handler_means_the_warning_is_left_alone() -> None:
    previous = signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    try:
        with TaskSignals() as signals:
            assert signal.getsignal(signal.SIGUSR2) == signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) == signals._on_sigterm
            os.kill(os.getpid(), signal.SIGUSR2)  # ignored, as before
            signals.deliver()
            assert not signals.warned
    finally:
        signal.signal(signal.SIGUSR2, previous)
