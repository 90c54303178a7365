"""``Callback.on_train_batch_end``: every optimizer step's values, which the epoch's metrics
average."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir

from graphssl.tasks.components import build_datamodule, build_method, resolve_config
from graphssl.training.trainer import Callback, Trainer
from graphssl.utils import seed_everything

CONF = Path(__file__).resolve().parents[3] / "conf"


class RecordSteps(Callback):
    def __init__(self) -> None:
        self.steps: list[tuple[int, int, dict[str, float]]] = []  # (global step, index, values)

    def on_train_batch_end(
        self, trainer: Trainer, method: Any, values: dict[str, float], batch_idx: int
    ) -> None:
        self.steps.append((trainer.global_step, batch_idx, dict(values)))


def test_each_step_reports_its_values_and_the_epoch_averages_them() -> None:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            config_name="train",
            overrides=["dataset=sbm", "model=cca_ssg", "encoder.hidden_channels=16"],
        )
    cfg = resolve_config(cfg)
    seed_everything(0)
    dm = build_datamodule(cfg)
    method = build_method(cfg, dm)
    record = RecordSteps()
    trainer = Trainer(
        epochs=2,
        mini_batch=True,
        batch_size=64,
        num_neighbors=[5, 5],
        progress=False,
        log_every=None,
        patience=None,
        callbacks=[record],
    )
    result = trainer.fit(method, dm)
    per_epoch = trainer.steps_per_epoch(dm)
    assert per_epoch > 1
    assert [s[0] for s in record.steps] == list(range(1, 2 * per_epoch + 1))
    assert [s[1] for s in record.steps] == list(range(per_epoch)) * 2
    # every value the method returns, as a float, each step
    assert all(set(v) == {"loss", "invariance", "decorrelation"} for _, _, v in record.steps)
    assert len({v["loss"] for _, _, v in record.steps}) > 1
    for epoch, res in enumerate(result.epochs):
        steps = record.steps[epoch * per_epoch : (epoch + 1) * per_epoch]
        for key, mean in res.metrics.items():
            assert mean == pytest.approx(sum(v[key] for _, _, v in steps) / per_epoch, rel=1e-12)
