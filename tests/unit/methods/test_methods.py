"""Every method in conf/model trains on a small generated graph: finite, falling loss, and
embeddings the probes accept."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from graphssl.evaluation.extraction import extract_embeddings
from graphssl.evaluation.linear_probe import LogRegEvaluator
from graphssl.pipeline import build_datamodule, build_method, resolve_config
from graphssl.training.trainer import Trainer
from graphssl.utils import seed_everything

CONF = Path(__file__).resolve().parents[3] / "conf"
METHODS = sorted(p.stem for p in (CONF / "model").glob("*.yaml"))


def small_config(model: str, *extra: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[
            f"model={model}", "dataset=sbm", "encoder.hidden_channels=32",
            "encoder.num_layers=2", "trainer.epochs=30", "trainer.patience=null",
            "trainer.progress=false", *extra,
        ])
    return resolve_config(cfg)


@pytest.mark.parametrize("model", METHODS)
def test_method_trains_and_loss_falls(model: str) -> None:
    cfg = small_config(model)
    seed_everything(0)
    dm = build_datamodule(cfg)
    method = build_method(cfg, dm)
    trainer: Trainer = instantiate(cfg.trainer)
    result = trainer.fit(method, dm)
    losses = result.losses
    assert len(losses) == 30
    assert all(math.isfinite(v) for v in losses)
    first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    assert last < first, f"{model}: loss did not fall ({first:.4f} -> {last:.4f})"

    z, y = extract_embeddings(method, dm)
    assert z.shape == (dm.data.num_nodes, cfg.encoder.hidden_channels)
    assert torch.isfinite(z).all()
    split = dm.splits()[0]
    res = LogRegEvaluator(weight_decay=[1e-2, 1e-4]).evaluate(z, y, split.train, split.val,
                                                             split.test)
    assert 0.0 <= res["test_acc"] <= 1.0


@pytest.mark.parametrize("model", METHODS)
def test_method_trains_on_mini_batches(model: str) -> None:
    cfg = small_config(model, "trainer.epochs=2", "trainer.mini_batch=true",
                       "trainer.batch_size=64")
    seed_everything(0)
    dm = build_datamodule(cfg)
    method = build_method(cfg, dm)
    if not method.supports_mini_batch:
        pytest.skip(f"{model} trains full-batch only (supports_mini_batch=False)")
    result = instantiate(cfg.trainer).fit(method, dm)
    assert len(result.losses) == 2 and all(math.isfinite(v) for v in result.losses)


def test_training_is_deterministic() -> None:
    def once() -> torch.Tensor:
        cfg = small_config("grace", "trainer.epochs=3")
        seed_everything(0)
        dm = build_datamodule(cfg)
        method = build_method(cfg, dm)
        instantiate(cfg.trainer).fit(method, dm)
        return extract_embeddings(method, dm)[0]

    assert torch.equal(once(), once())


def test_diverging_loss_raises() -> None:
    from graphssl.training.trainer import DivergedError

    cfg = small_config("dgi", "trainer.epochs=2")
    dm = build_datamodule(cfg)
    dm.data.x[0, 0] = float("nan")
    method = build_method(cfg, dm)
    with pytest.raises(DivergedError, match="loss became nan"):
        instantiate(cfg.trainer).fit(method, dm)
