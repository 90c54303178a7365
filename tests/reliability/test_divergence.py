"""A diverging loss stops the run FAILED, naming the epoch and what to lower: a non-finite loss,
or one that grew past a million times its first value (``lr=1e3``), instead of a FINISHED run
whose loss reached 1e9."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from mlflow.tracking import MlflowClient

from graphssl.data.node import SBMDataModule
from graphssl.methods.base import SSLMethod
from graphssl.tasks.train import train
from graphssl.training.trainer import DIVERGENCE_FACTOR, DivergedError, Trainer

CONF = Path(__file__).resolve().parents[2] / "conf"


class Growing(SSLMethod):
    """A loss that multiplies by ``rate`` each step (a learning rate far too large)."""

    def __init__(self, rate: float) -> None:
        super().__init__(optimizer=lambda params: torch.optim.SGD(params, lr=0.0))
        self.w = torch.nn.Parameter(torch.ones(1))
        self.rate = rate
        self.steps = 0

    def loss(self, batch: object) -> dict[str, torch.Tensor]:
        self.steps += 1
        return {"loss": self.w.sum() * self.rate**self.steps}

    def encoders(self) -> dict[str, torch.nn.Module]:
        return {}

    def forward(self, batch: object) -> torch.Tensor:
        return self.w.expand(4, 1)


def _fit(rate: float, epochs: int) -> Trainer:
    trainer = Trainer(epochs=epochs, progress=False)
    trainer.fit(Growing(rate), SBMDataModule(block_size=20, seed=0))
    return trainer


def test_a_loss_past_the_factor_of_its_first_value_is_divergence() -> None:
    with pytest.raises(DivergedError, match=r"diverged at epoch \d+.*lower the learning rate"):
        _fit(rate=100.0, epochs=10)  # 1e2 per epoch: past 1e6 within a few epochs


def test_a_loss_that_grows_within_the_factor_trains_on() -> None:
    trainer = _fit(rate=2.0, epochs=5)  # 32x after 5 steps: far below the factor
    assert trainer.global_step == 5 and DIVERGENCE_FACTOR == 1e6


def test_a_run_with_a_huge_learning_rate_ends_failed(
    outputs_dir: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            config_name="train",
            overrides=[
                "dataset=cora",
                "model=dgi",
                "model.optimizer.lr=1e3",
                "trainer.epochs=30",
                "trainer.progress=false",
                f"paths.outputs_dir={outputs_dir}",
            ],
        )
    with pytest.raises(DivergedError, match=r"at epoch \d+") as caught:
        train(cfg)
    assert isinstance(caught.value, ValueError)  # a user error: one paragraph on the console
    client = MlflowClient(f"sqlite:///{outputs_dir / 'mlflow.db'}")
    [run] = client.search_runs([client.get_experiment_by_name("graphssl").experiment_id])
    assert run.info.status == "FAILED"
    assert "DivergedError" in run.data.tags["error"]
