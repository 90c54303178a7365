"""Selection on a validation probe inside the real trainer: the same training trajectory as
without it, the best weights restored, early stop on patience, state kept across a resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from hydra import compose, initialize_config_dir

from graphssl.evaluation.extraction import extract_embeddings
from graphssl.evaluation.logreg_probe import LogRegProbe
from graphssl.tasks.components import build_datamodule, build_method, resolve_config
from graphssl.training.callbacks.selection import CHECKPOINT_KEY, ProbeSelection, SelectionCallback
from graphssl.training.checkpoint import load_checkpoint
from graphssl.training.trainer import Callback, Trainer
from graphssl.utils import seed_everything

CONF = Path(__file__).resolve().parents[4] / "conf"


class FakeTracker:
    def __init__(self) -> None:
        self.metrics: list[tuple[dict[str, float], int]] = []

    def log_metrics(self, metrics: dict[str, float], step: int = 0) -> None:
        self.metrics.append((dict(metrics), step))


def setup(epochs: int = 8) -> tuple[Any, Any]:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            config_name="train",
            overrides=[
                "dataset=sbm",  # hard enough that validation accuracy moves between epochs
                "dataset.num_blocks=4",
                "dataset.p_in=0.05",
                "dataset.p_out=0.03",
                "dataset.feature_noise=4.0",
                "model=grace",
                "encoder.hidden_channels=16",
                "encoder.num_layers=2",
                f"trainer.epochs={epochs}",
                "trainer.patience=null",
                "trainer.progress=false",
            ],
        )
    cfg = resolve_config(cfg)
    seed_everything(0)
    dm = build_datamodule(cfg)
    return dm, build_method(cfg, dm)


def make_callback(dm: Any, every: int = 1, **kwargs: Any) -> SelectionCallback:
    # one unregularised probe: on this tiny graph its validation score moves from epoch to epoch
    def embed(model: torch.nn.Module) -> torch.Tensor:
        return extract_embeddings(model, dm)[0]

    sel = ProbeSelection(
        embed,
        LogRegProbe(weight_decay=0.0, max_iter=200),
        dm.labels,
        dm.splits(),
        every=every,
        **kwargs,
    )
    return SelectionCallback(sel, FakeTracker())  # type: ignore[arg-type]


def test_same_trajectory_and_the_best_weights_are_restored() -> None:
    dm, plain = setup()
    losses = Trainer(epochs=8, progress=False).fit(plain, dm).losses

    dm, method = setup()
    cb = make_callback(dm, every=2)
    result = Trainer(epochs=8, progress=False, callbacks=[cb]).fit(method, dm)
    assert result.losses == losses  # measuring changed nothing in training
    sel = cb.selection
    assert [e for e, _ in sel.history] == [1, 3, 5, 7]
    assert len({s for _, s in sel.history}) > 1  # the scores differ, so the choice matters
    assert sel.best_score == max(s for _, s in sel.history)
    assert sel.best_state is not None and sel.best_epoch != 7  # restoring changes weights
    for k, v in method.state_dict().items():
        assert torch.equal(v, sel.best_state[k]), k
    assert sel.measure(method) == pytest.approx(sel.best_score)
    tracker = cb.sink
    assert [step for m, step in tracker.metrics] == [1, 3, 5, 7]  # type: ignore[union-attr]
    summary = cb.summary()
    assert summary["select/best_epoch"] == sel.best_epoch + 1  # counted from 1
    assert summary["select/measurements"] == 4
    assert summary["select/best_val_acc"] == sel.best_score


def test_patience_ends_training_early() -> None:
    dm, method = setup(epochs=30)
    cb = make_callback(dm, every=1, patience=1, min_delta=1.0)  # nothing beats the first + 1.0
    result = Trainer(epochs=30, progress=False, callbacks=[cb]).fit(method, dm)
    assert result.stopped_early
    assert len(result.epochs) == 2 and cb.selection.best_epoch == 0


class Interrupt(Callback):
    def __init__(self, at: int) -> None:
        self.at = at

    def on_epoch_end(self, trainer: Any, method: Any, result: Any) -> None:
        if result.epoch == self.at:
            raise KeyboardInterrupt


def test_a_resumed_run_selects_as_an_uninterrupted_one(tmp_path: Path) -> None:
    dm, method = setup()
    whole = make_callback(dm, every=2)
    Trainer(epochs=8, progress=False, callbacks=[whole]).fit(method, dm)

    ckpt = tmp_path / "last.pt"
    dm, method = setup()
    first = make_callback(dm, every=2)
    trainer = Trainer(
        epochs=8,
        progress=False,
        checkpoint_every=2,
        checkpoint_path=str(ckpt),
        callbacks=[first, Interrupt(at=4)],
    )
    with pytest.raises(KeyboardInterrupt):
        trainer.fit(method, dm)
    state = load_checkpoint(ckpt)
    assert state["epoch"] == 3 and [e for e, _ in state[CHECKPOINT_KEY]["history"]] == [1, 3]

    dm, method = setup()
    second = make_callback(dm, every=2)
    resumed = Trainer(epochs=8, progress=False, checkpoint_path=str(ckpt), callbacks=[second])
    resumed.resume_from(state)
    resumed.fit(method, dm)
    assert second.selection.history == whole.selection.history
    assert second.selection.best_epoch == whole.selection.best_epoch
