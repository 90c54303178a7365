"""The train task builds the trainer callbacks of ``conf/callbacks/`` with what they ask for: the
run's configured extraction, the metrics sink, the selection probe, labels, splits and the
checkpoint path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from hydra import compose, initialize_config_dir

from graphssl.evaluation import evaluator
from graphssl.tasks.components import build_datamodule, resolve_config
from graphssl.tasks.train import build_callbacks
from graphssl.training.callbacks import DiagnosticsCallback, ModelCheckpoint, SelectionCallback

CONF = Path(__file__).resolve().parents[3] / "conf"


class Sink:
    def __init__(self) -> None:
        self.metrics: list[tuple[dict[str, float], int]] = []
        self.tags: list[dict[str, Any]] = []

    def log_metrics(self, metrics: dict[str, float], step: int = 0) -> None:
        self.metrics.append((dict(metrics), step))

    def set_tags(self, tags: dict[str, Any]) -> None:
        self.tags.append(dict(tags))


def _cfg(*overrides: str) -> Any:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return resolve_config(compose(config_name="train", overrides=["dataset=sbm", *overrides]))


def test_off_by_default_and_on_from_the_eval_keys(tmp_path: Path) -> None:
    cfg = _cfg()
    dm = build_datamodule(cfg)
    callbacks, by_name = build_callbacks(cfg, dm, Sink(), checkpoint_path=tmp_path / "last.pt")
    assert set(by_name) == {"checkpoint"} and callbacks == [by_name["checkpoint"]]

    cfg = _cfg(
        "callbacks.selection.every=2", "callbacks.selection.probe=knn", "callbacks.monitor.every=3"
    )
    callbacks, by_name = build_callbacks(cfg, build_datamodule(cfg), Sink(), tmp_path / "last.pt")
    assert set(by_name) == {"selection", "monitor", "checkpoint"} and len(callbacks) == 3
    sel, mon = by_name["selection"], by_name["monitor"]
    assert isinstance(sel, SelectionCallback) and isinstance(mon, DiagnosticsCallback)
    assert sel.selection.every == 2 and type(sel.selection.probe).__name__ == "KNNProbe"
    assert mon.monitor.every == 3 and mon.monitor.thresholds.stable_rank == 1.03


def test_callbacks_none_turns_them_off_but_keeps_checkpoints(tmp_path: Path) -> None:
    cfg = _cfg("callbacks=none")
    assert "selection" not in cfg.callbacks and "monitor" not in cfg.callbacks
    _, by_name = build_callbacks(cfg, build_datamodule(cfg), Sink(), tmp_path / "last.pt")
    assert set(by_name) == {"checkpoint"}


def test_the_checkpoint_callback_writes_the_runs_path_every_trainer_checkpoint_every(
    tmp_path: Path,
) -> None:
    for overrides in ([], ["callbacks=none"]):
        cfg = _cfg("trainer.checkpoint_every=7", *overrides)
        _, by_name = build_callbacks(cfg, build_datamodule(cfg), Sink(), tmp_path / "last.pt")
        ckpt = by_name["checkpoint"]
        assert isinstance(ckpt, ModelCheckpoint)
        assert ckpt.checkpoint_path == tmp_path / "last.pt" and ckpt.every_n_epochs == 7
    cfg = _cfg()  # trainer.checkpoint_every=null: on, for the epochs another callback asks for
    _, by_name = build_callbacks(cfg, build_datamodule(cfg), Sink(), tmp_path / "last.pt")
    assert by_name["checkpoint"].every_n_epochs is None  # type: ignore[attr-defined]


def test_the_checkpoint_entry_null_absent_or_without_a_path(tmp_path: Path) -> None:
    cfg = _cfg("callbacks.checkpoint=null", "trainer.checkpoint_every=7")
    assert build_callbacks(cfg, build_datamodule(cfg), Sink(), tmp_path / "last.pt") == ([], {})

    # a config without the entry (e.g. a stored one rerun) still checkpoints
    cfg = _cfg("~callbacks.checkpoint", "trainer.checkpoint_every=7")
    _, by_name = build_callbacks(cfg, build_datamodule(cfg), Sink(), tmp_path / "last.pt")
    ckpt = by_name["checkpoint"]
    assert isinstance(ckpt, ModelCheckpoint) and ckpt.every_n_epochs == 7

    cfg = _cfg()
    with pytest.raises(ValueError, match="asks for checkpoint_path, but none was given"):
        build_callbacks(cfg, build_datamodule(cfg), Sink())


def test_the_monitor_uses_the_runs_configured_extraction(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _cfg(
        "callbacks.monitor.every=1",
        "eval.extraction.mini_batch=true",
        "eval.extraction.num_neighbors=[2,2]",
        "eval.extraction.encoder_source=encoder",
    )
    dm = build_datamodule(cfg)
    seen: list[dict[str, Any]] = []

    def fake_extract(model: Any, datamodule: Any, **kwargs: Any) -> tuple[torch.Tensor, None]:
        seen.append(kwargs)
        return torch.randn(50, 8, generator=torch.Generator().manual_seed(0)), None

    monkeypatch.setattr(evaluator, "extract_embeddings", fake_extract)
    _, by_name = build_callbacks(cfg, dm, Sink(), Path("last.pt"))
    result = by_name["monitor"].monitor.measure(torch.nn.Linear(2, 2), 0)  # type: ignore[attr-defined]
    assert "rankme" in result.diagnostics
    assert seen == [
        {
            "encoder_source": "encoder",
            "device": "cpu",
            "mini_batch": True,
            "num_neighbors": [2, 2],
            "mode": "auto",
            "memory_budget_gb": cfg.trainer.memory_budget_gb,
            "chunk_size": None,
        }
    ]


def test_selection_on_a_probe_that_is_not_configured() -> None:
    cfg = _cfg("callbacks.selection.every=1", "callbacks.selection.probe=svm")
    with pytest.raises(
        ValueError, match=r"callbacks.selection.probe='svm' is not among the configured"
    ):
        build_callbacks(cfg, build_datamodule(cfg), Sink(), Path("last.pt"))
