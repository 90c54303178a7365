"""The checkpoint callback inside the real trainer: the epochs it writes (every N, the last, a
forced one, a stop), the order of the hooks around the write, atomic files, and a resume from
its file that trains bit for bit what an uninterrupted run trains."""

from __future__ import annotations

import errno
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from hydra import compose, initialize_config_dir

from graphssl.tasks.components import build_datamodule, build_method, resolve_config
from graphssl.training import checkpoint as checkpoint_io
from graphssl.training.callbacks import ModelCheckpoint
from graphssl.training.checkpoint import CheckpointWriteError, load_checkpoint
from graphssl.training.trainer import Callback, Trainer, TrainingInterrupted
from graphssl.utils import seed_everything

CONF = Path(__file__).resolve().parents[4] / "conf"
EPOCHS = 8


def setup() -> tuple[Any, Any]:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            config_name="train",
            overrides=[
                "dataset=sbm",
                "model=grace",
                "encoder.hidden_channels=16",
                "encoder.num_layers=2",
                "trainer.progress=false",
            ],
        )
    cfg = resolve_config(cfg)
    seed_everything(0)
    dm = build_datamodule(cfg)
    return dm, build_method(cfg, dm)


class Record(Callback):
    """The epochs checkpointed, and what the file held at each hook around the write."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.saved: list[int] = []
        self.on_disk_before: list[int | None] = []
        self.on_disk_after: list[int | None] = []

    def _on_disk(self) -> int | None:
        return int(load_checkpoint(self.path)["epoch"]) if self.path.is_file() else None

    def on_checkpoint(self, trainer: Any, method: Any, epoch: int) -> None:
        self.saved.append(epoch)
        self.on_disk_before.append(self._on_disk())

    def on_epoch_complete(self, trainer: Any, method: Any, epoch: int) -> None:
        self.on_disk_after.append(self._on_disk())


class Force(Callback):
    """Asks for a checkpoint of these epochs, as the metrics callback does during an outage."""

    def __init__(self, *epochs: int) -> None:
        self.epochs = set(epochs)

    def on_epoch_end(self, trainer: Any, method: Any, result: Any) -> None:
        if result.epoch in self.epochs:
            trainer.should_checkpoint = True


class StopAt(Callback):
    """Ends the fit after ``epoch``: a callback's ``should_stop`` or a stop request (SIGTERM)."""

    def __init__(self, epoch: int, request: bool = False) -> None:
        self.epoch, self.request = epoch, request

    def on_epoch_end(self, trainer: Any, method: Any, result: Any) -> None:
        if result.epoch == self.epoch:
            if self.request:
                trainer.request_stop("SIGTERM")
            else:
                trainer.should_stop = True


class KillAt(Callback):
    """A kill between checkpoints: the process ends in the middle of ``epoch``'s hooks."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_epoch_end(self, trainer: Any, method: Any, result: Any) -> None:
        if result.epoch == self.epoch:
            raise KeyboardInterrupt


def fit(path: Path, *callbacks: Callback, every: int | None = 3, **kwargs: Any) -> Any:
    dm, method = setup()
    trainer = Trainer(
        epochs=EPOCHS,
        progress=False,
        callbacks=[*callbacks, ModelCheckpoint(path, every_n_epochs=every)],
        **kwargs,
    )
    return trainer.fit(method, dm)


def test_every_n_epochs_and_the_last(tmp_path: Path) -> None:
    path = tmp_path / "ckpt" / "last.pt"
    rec = Record(path)
    fit(path, rec, every=3)
    assert rec.saved == [2, 5, 7]  # epochs 3, 6 (1-based) and the last
    state = load_checkpoint(path)
    assert state["epoch"] == EPOCHS - 1 and [e for e, _, _ in state["history"]] == list(range(8))
    assert not path.with_suffix(".pt.tmp").exists()


def test_callbacks_run_before_the_write_and_complete_after_it(tmp_path: Path) -> None:
    path = tmp_path / "last.pt"
    rec = Record(path)
    fit(path, rec, every=3)
    # on_checkpoint sees the previous checkpoint; on_epoch_complete sees the epoch's own
    assert rec.on_disk_before == [None, 2, 5]
    assert rec.on_disk_after == [None, None, 2, 2, 2, 5, 5, 7]


def test_forced_epochs_are_written_also_without_an_interval(tmp_path: Path) -> None:
    path = tmp_path / "last.pt"
    rec = Record(path)
    fit(path, rec, Force(1, 4), every=None)
    assert rec.saved == [1, 4]  # the last epoch is not written without an interval

    rec = Record(tmp_path / "other.pt")
    fit(tmp_path / "other.pt", rec, Force(0, 5), every=3)
    assert rec.saved == [0, 2, 5, 7]  # a forced epoch that is due anyway is written once


def test_the_request_is_cleared_once_written(tmp_path: Path) -> None:
    dm, method = setup()
    rec = Record(tmp_path / "last.pt")
    trainer = Trainer(
        epochs=EPOCHS,
        progress=False,
        callbacks=[rec, Force(3), ModelCheckpoint(tmp_path / "last.pt")],
    )
    trainer.fit(method, dm)
    assert rec.saved == [3] and not trainer.should_checkpoint
    assert trainer.last_checkpoint == tmp_path / "last.pt" and trainer.last_checkpoint_epoch == 3


def test_a_stop_writes_the_epoch_it_ends_on(tmp_path: Path) -> None:
    path = tmp_path / "last.pt"
    rec = Record(path)
    result = fit(path, rec, StopAt(3), every=10)
    assert result.stopped_early and rec.saved == [3]
    assert load_checkpoint(path)["stopped_early"] is True

    rec = Record(path)
    message = re.escape(f"after epoch 5; checkpoint written to {path}")
    with pytest.raises(TrainingInterrupted, match=message):
        fit(path, rec, StopAt(4, request=True), every=10)
    assert rec.saved == [4]
    state = load_checkpoint(path)
    assert state["epoch"] == 4 and state["stopped_early"] is False

    # no checkpoint callback: the stop is the same, and the message claims no checkpoint
    dm, method = setup()
    trainer = Trainer(epochs=EPOCHS, progress=False, callbacks=[StopAt(1, request=True)])
    with pytest.raises(TrainingInterrupted) as err:
        trainer.fit(method, dm)
    assert "checkpoint" not in str(err.value)


def test_a_resume_from_its_file_trains_bit_for_bit_the_uninterrupted_run(tmp_path: Path) -> None:
    dm, method = setup()
    whole = Trainer(epochs=EPOCHS, patience=3, progress=False).fit(method, dm)
    whole_weights = {k: v.clone() for k, v in method.state_dict().items()}

    path = tmp_path / "last.pt"
    with pytest.raises(KeyboardInterrupt):
        fit(path, KillAt(4), every=2, patience=3)  # epochs 1 and 3 were written
    state = load_checkpoint(path)
    assert state["epoch"] == 3 and state["best_state"] is not None

    dm, method = setup()
    resumed = Trainer(
        epochs=EPOCHS,
        patience=3,
        progress=False,
        callbacks=[ModelCheckpoint(path, every_n_epochs=2)],
    )
    resumed.resume_from(state, checkpoint_path=path)
    result = resumed.fit(method, dm)
    assert result.losses == whole.losses  # exact floats, epochs 0-3 from the file
    assert (result.best_epoch, result.stopped_early) == (whole.best_epoch, whole.stopped_early)
    for key, value in method.state_dict().items():
        assert torch.equal(value, whole_weights[key]), key


def test_a_failed_write_leaves_the_previous_checkpoint_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "last.pt"
    real_fsync, calls = checkpoint_io.os.fsync, []

    def fsync(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 2:  # the second checkpoint: the disk fills up
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(checkpoint_io.os, "fsync", fsync)
    rec = Record(path)
    with pytest.raises(CheckpointWriteError, match="the disk is full"):
        fit(path, rec, every=2)
    assert rec.saved == [1, 3] and rec.on_disk_after == [None, 1, 1]  # epoch 3 never completes
    assert load_checkpoint(path)["epoch"] == 1
    assert not path.with_suffix(".pt.tmp").exists()


def test_the_trainer_shorthand_adds_one_checkpoint_callback(tmp_path: Path) -> None:
    trainer = Trainer(epochs=2, checkpoint_every=2, checkpoint_path=str(tmp_path / "last.pt"))
    (cb,) = [c for c in trainer.callbacks if isinstance(c, ModelCheckpoint)]
    assert cb.every_n_epochs == 2 and cb.checkpoint_path == tmp_path / "last.pt"
    assert not any(isinstance(c, ModelCheckpoint) for c in Trainer(epochs=2).callbacks)
    with pytest.raises(ValueError, match="checkpoint_every=2 is set but no checkpoint_path"):
        Trainer(epochs=2, checkpoint_every=2)
    with pytest.raises(ValueError, match=r"trainer\.checkpoint_every must be >= 1 or null, got 0"):
        Trainer(epochs=2, checkpoint_every=0, checkpoint_path=str(tmp_path / "last.pt"))
    with pytest.raises(ValueError, match=r"every_n_epochs \(trainer.checkpoint_every\) must be"):
        ModelCheckpoint(tmp_path / "last.pt", every_n_epochs=0)


def test_save_checkpoint_belongs_to_the_checkpoint_hook(tmp_path: Path) -> None:
    class EarlySave(Callback):
        def on_epoch_end(self, trainer: Any, method: Any, result: Any) -> None:
            trainer.save_checkpoint(method, tmp_path / "early.pt")

    dm, method = setup()
    with pytest.raises(RuntimeError, match="call it from a callback's on_epoch_checkpoint"):
        Trainer(epochs=2, progress=False, callbacks=[EarlySave()]).fit(method, dm)
    assert not (tmp_path / "early.pt").exists()
