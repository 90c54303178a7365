"""The trainer's sampler-throughput figures: steps, time in the batch iterator, compute."""

from __future__ import annotations

import time
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from graphssl.tasks.components import build_datamodule, build_method, resolve_config
from graphssl.utils import seed_everything

CONF = Path(__file__).resolve().parents[3] / "conf"


def _fit(mini_batch: bool, monkeypatch=None, delay: float = 0.0):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            config_name="train",
            overrides=[
                "dataset=sbm",
                "model=dgi",
                "encoder.hidden_channels=16",
                "trainer.epochs=2",
                "trainer.patience=null",
                "trainer.progress=false",
                f"trainer.mini_batch={str(mini_batch).lower()}",
                "trainer.batch_size=64",
            ],
        )
    cfg = resolve_config(cfg)
    seed_everything(0)
    dm = build_datamodule(cfg)
    method = build_method(cfg, dm)
    trainer = instantiate(cfg.trainer)
    if delay and monkeypatch is not None:
        real = trainer._batches

        def slow(*args, **kwargs):
            for batch in real(*args, **kwargs):
                time.sleep(delay)  # a slow sampler: the wait must land in sample_seconds
                yield batch

        monkeypatch.setattr(trainer, "_batches", slow)
    return trainer.fit(method, dm), trainer.steps_per_epoch(dm)


def test_mini_batch_fit_reports_throughput(monkeypatch) -> None:
    result, steps = _fit(True, monkeypatch, delay=0.02)
    assert steps > 1
    assert result.num_batches == 2 * steps
    out = result.throughput()
    assert set(out) == {"time/batches_per_second", "time/sample_seconds", "time/compute_seconds"}
    # every batch waited 20 ms in the iterator; compute is the rest of the loop
    assert out["time/sample_seconds"] >= 0.02 * result.num_batches
    assert out["time/compute_seconds"] > 0
    loop = out["time/sample_seconds"] + out["time/compute_seconds"]
    assert abs(out["time/batches_per_second"] * loop - result.num_batches) < 1e-6 * loop + 1e-6
    assert loop <= sum(e.seconds for e in result.epochs) + 1e-6


def test_full_batch_fit_counts_one_step_per_epoch() -> None:
    result, steps = _fit(False)
    assert steps == 1 and result.num_batches == 2
    assert result.throughput()["time/batches_per_second"] > 0
