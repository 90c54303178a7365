"""The learning-rate schedule of the model config: built by the method, stepped by the trainer
once per optimizer step, and saved in checkpoints so a resumed run follows the same curve."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from hydra import compose, initialize_config_dir

from graphssl.tasks.components import build_datamodule, build_method, resolve_config
from graphssl.training.checkpoint import load_checkpoint
from graphssl.training.schedules import CosineLR, cosine_lr_factor
from graphssl.training.trainer import Callback, Trainer
from graphssl.utils import seed_everything

CONF = Path(__file__).resolve().parents[3] / "conf"
EPOCHS = 8


def setup(*overrides: str) -> tuple[Any, Any]:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            config_name="train",
            overrides=[
                "dataset=sbm",
                "model=bgrl",
                "+model.scheduler._target_=graphssl.training.schedules.CosineLR",
                "+model.scheduler._partial_=true",
                "+model.scheduler.warmup=0.25",
                "encoder.hidden_channels=16",
                "encoder.num_layers=2",
                "model.predictor_hidden=16",
                f"trainer.epochs={EPOCHS}",
                "trainer.patience=null",
                "trainer.progress=false",
                *overrides,
            ],
        )
    cfg = resolve_config(cfg)
    seed_everything(0)
    dm = build_datamodule(cfg)
    return dm, build_method(cfg, dm)


class RecordLR(Callback):
    """The learning rate the next epoch starts with, after every epoch."""

    def __init__(self) -> None:
        self.lrs: dict[int, float] = {}

    def on_epoch_end(self, trainer: Any, method: Any, result: Any) -> None:
        assert trainer.optimizer is not None
        self.lrs[result.epoch] = float(trainer.optimizer.param_groups[0]["lr"])


class Interrupt(Callback):
    def __init__(self, at: int) -> None:
        self.at = at

    def on_epoch_end(self, trainer: Any, method: Any, result: Any) -> None:
        if result.epoch == self.at:
            raise KeyboardInterrupt


def test_the_model_config_schedule_is_built_and_stepped_by_the_trainer() -> None:
    dm, method = setup()
    lr = RecordLR()
    trainer = Trainer(epochs=EPOCHS, progress=False, callbacks=[lr])
    trainer.fit(method, dm)
    assert isinstance(trainer.scheduler, CosineLR)
    steps = trainer.steps_per_epoch(dm)
    base = 1e-3  # conf/model/bgrl.yaml's AdamW learning rate
    warmup = round(0.25 * EPOCHS * steps)
    for epoch, got in lr.lrs.items():
        expected = base * cosine_lr_factor((epoch + 1) * steps, EPOCHS * steps, warmup)
        assert got == pytest.approx(expected, rel=1e-12, abs=1e-15)
    assert lr.lrs[0] < lr.lrs[1] and lr.lrs[3] > lr.lrs[5] > lr.lrs[EPOCHS - 1]


def test_null_scheduler_keeps_the_learning_rate() -> None:
    dm, method = setup("model.scheduler=null")
    lr = RecordLR()
    trainer = Trainer(epochs=3, progress=False, callbacks=[lr])
    trainer.fit(method, dm)
    assert trainer.scheduler is None and set(lr.lrs.values()) == {1e-3}


def test_a_resumed_run_follows_the_same_schedule_and_losses(tmp_path: Path) -> None:
    dm, method = setup()
    whole_lr = RecordLR()
    whole = Trainer(epochs=EPOCHS, progress=False, callbacks=[whole_lr]).fit(method, dm)

    ckpt = tmp_path / "last.pt"
    dm, method = setup()
    first = Trainer(
        epochs=EPOCHS,
        progress=False,
        checkpoint_every=2,
        checkpoint_path=str(ckpt),
        callbacks=[Interrupt(at=4)],
    )
    with pytest.raises(KeyboardInterrupt):
        first.fit(method, dm)
    state = load_checkpoint(ckpt)
    assert state["epoch"] == 3 and state["scheduler"]["last_epoch"] == state["global_step"]

    dm, method = setup()
    resumed_lr = RecordLR()
    resumed = Trainer(
        epochs=EPOCHS, progress=False, checkpoint_path=str(ckpt), callbacks=[resumed_lr]
    )
    resumed.resume_from(state)
    result = resumed.fit(method, dm)
    assert result.losses == whole.losses
    assert resumed_lr.lrs == {e: v for e, v in whole_lr.lrs.items() if e >= 4}
    torch.testing.assert_close(
        torch.tensor(resumed.optimizer.param_groups[0]["lr"]),  # type: ignore[union-attr]
        torch.tensor(whole_lr.lrs[EPOCHS - 1]),
        rtol=0,
        atol=0,
    )
