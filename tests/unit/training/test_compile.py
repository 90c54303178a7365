"""``trainer.compile``: compiled training gives the eager losses; where it cannot run, the
trainer refuses before training and says what is missing."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from graphssl.tasks.components import build_datamodule, build_method, resolve_config
from graphssl.training import compile as compile_module
from graphssl.training.compile import compile_problem
from graphssl.training.trainer import Trainer
from graphssl.utils import seed_everything

CONF = Path(__file__).resolve().parents[3] / "conf"


def _fit(compiled: bool, method: str = "dgi"):  # type: ignore[no-untyped-def]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            config_name="train",
            overrides=[
                "dataset=sbm",
                f"model={method}",
                "encoder.hidden_channels=16",
                "trainer.epochs=3",
                "trainer.patience=null",
                "trainer.progress=false",
                f"trainer.compile={str(compiled).lower()}",
            ],
        )
    cfg = resolve_config(cfg)
    seed_everything(0)
    dm = build_datamodule(cfg)
    model = build_method(cfg, dm)
    trainer = instantiate(cfg.trainer)
    result = trainer.fit(model, dm)
    return [e.metrics["loss"] for e in result.epochs], model


@pytest.mark.slow
@pytest.mark.skipif(
    compile_problem(torch.device("cpu")) is not None,
    reason="torch.compile cannot run here (no C++ compiler on PATH); install g++ to run it",
)
@pytest.mark.parametrize("method", ["dgi", "grace"])
def test_compiled_training_gives_the_eager_losses(method: str) -> None:
    eager, eager_model = _fit(False, method)
    compiled, compiled_model = _fit(True, method)
    torch.testing.assert_close(torch.tensor(compiled), torch.tensor(eager), rtol=1e-4, atol=1e-6)
    # the same parameter names, and the encoders eager again after training
    assert compiled_model.state_dict().keys() == eager_model.state_dict().keys()
    assert all(m._compiled_call_impl is None for m in compiled_model.encoders().values())


def test_missing_cxx_compiler_is_refused_before_training(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(compile_module.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match=r"no C\+\+ compiler \(g\+\+ or clang\+\+\)"):
        Trainer(epochs=1, compile=True)
    monkeypatch.setenv("CXX", "my-cxx")
    with pytest.raises(RuntimeError, match=r"\$CXX='my-cxx' is not on PATH"):
        Trainer(epochs=1, compile=True)
    Trainer(epochs=1, compile=False)  # eager training needs no compiler


def test_compile_must_be_a_boolean() -> None:
    with pytest.raises(TypeError, match=r"trainer\.compile must be true or false"):
        Trainer(epochs=1, compile="yes")  # type: ignore[arg-type]
