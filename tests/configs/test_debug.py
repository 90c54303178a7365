"""The debug group: every preset composes with each debug option, and gets its short settings."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from graphssl.tasks.components import resolve_config

CONF = Path(__file__).resolve().parents[2] / "conf"
PRESETS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


def compose_with(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides), return_hydra_config=True)


def test_debug_options_exist() -> None:
    assert sorted(p.stem for p in (CONF / "debug").glob("*.yaml")) == ["default", "fast", "overfit"]
    assert compose_with().get("debug") is None  # off unless asked for


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_composes_with_debug_fast(preset: str) -> None:
    cfg = compose_with(f"experiment={preset}", "debug=fast")
    assert cfg.hydra.mode.name == "RUN"  # a sweep preset smoke-tests one job
    resolved = resolve_config(cfg)
    assert resolved.trainer.epochs == 1
    assert resolved.trainer.limit_batches == 3
    assert resolved.trainer.checkpoint_every is None
    assert resolved.eval.figures is False
    assert resolved.logger.log_embeddings is False
    assert resolved.logger.experiment_name == "debug"
    assert str(resolved.logger.tracking_uri).endswith("/debug/mlflow.db")


@pytest.mark.parametrize(
    ("option", "epochs", "limit"), [("default", 2, None), ("fast", 1, 3), ("overfit", 100, 3)]
)
def test_debug_option_settings(option: str, epochs: int, limit: int | None) -> None:
    cfg = resolve_config(compose_with("experiment=grace_citeseer", f"debug={option}"))
    assert (cfg.trainer.epochs, cfg.trainer.limit_batches) == (epochs, limit)
    assert cfg.trainer.patience is None
    assert cfg.model.tau == 0.9  # the preset's own settings stay


def test_debug_fast_keeps_explicit_overrides() -> None:
    cfg = resolve_config(compose_with("debug=fast", "trainer.epochs=4"))
    assert cfg.trainer.epochs == 4


def test_debug_fast_shrinks_only_datasets_that_can_shrink() -> None:
    from graphssl.tasks.debug import apply_debug_limits

    zoo = apply_debug_limits(resolve_config(compose_with("experiment=model_zoo", "debug=fast")))
    assert (zoo.dataset.subset, zoo.dataset.test_subset) == (1000, 500)
    digits = apply_debug_limits(resolve_config(compose_with("dataset=digits", "debug=fast")))
    assert digits.dataset.subset == 1000 and "test_subset" not in digits.dataset
    cora = apply_debug_limits(resolve_config(compose_with("dataset=cora", "debug=fast")))
    assert "subset" not in cora.dataset
    plain = apply_debug_limits(resolve_config(compose_with("experiment=model_zoo")))
    assert plain.dataset.subset == 10000


def test_debug_fast_caps_only_probes_with_an_iteration_budget() -> None:
    from graphssl.tasks.debug import apply_debug_limits

    fast = apply_debug_limits(resolve_config(compose_with("experiment=graphcl_nci1", "debug=fast")))
    assert fast.eval.probes.logreg.max_iter == 100
    assert "max_iter" not in fast.eval.probes.knn  # no such key: left as it is
    papers = apply_debug_limits(resolve_config(compose_with("eval=graph_papers", "debug=fast")))
    assert papers.eval.probes.knn is None and "max_iter" not in papers.eval.probes.svc
    plain = apply_debug_limits(resolve_config(compose_with("experiment=graphcl_nci1")))
    assert plain.eval.probes.logreg.max_iter == 5000


def test_debug_fast_limits_a_sweep_presets_trials_and_epochs() -> None:
    from graphssl.tracking.sweep import apply_sweep_limits

    cfg = compose_with("experiment=bgrl_search", "debug=fast", "hydra.mode=MULTIRUN")
    assert cfg.hydra.sweeper.n_trials == 24
    assert "trainer.epochs" in cfg.hydra.sweeper.params
    changed = apply_sweep_limits(cfg)
    assert cfg.hydra.sweeper.n_trials == 2
    assert "trainer.epochs" not in cfg.hydra.sweeper.params  # every trial: debug's 1 epoch
    assert "model.optimizer.lr" in cfg.hydra.sweeper.params  # the rest is still searched
    assert changed == [
        "hydra.sweeper.n_trials: 24 -> 2",
        "trainer.epochs: choice(50, 100, 200) -> 1",
    ]
    # without debug=fast the search is left as it is
    plain = compose_with("experiment=bgrl_search", "hydra.mode=MULTIRUN")
    assert apply_sweep_limits(plain) == [] and plain.hydra.sweeper.n_trials == 24


def test_debug_fast_sweep_preset_runs_two_trials_of_one_epoch(tasks) -> None:
    """Hydra's own multirun (the Optuna sweeper and the sweep callback, as ``graphssl -m
    experiment=bgrl_search debug=fast`` runs them) with a task that only records its config."""
    pytest.importorskip(
        "hydra_plugins.hydra_optuna_sweeper",
        reason="hydra-optuna-sweeper not installed (make install, the dev extra has it)",
    )
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    epochs: list[int] = []

    def task(cfg) -> float:
        epochs.append(cfg.trainer.epochs)
        return 0.5

    store = f"sqlite:///{tasks.outputs / 'mlflow.db'}"
    overrides = ["experiment=bgrl_search", "debug=fast", f"logger.tracking_uri={store}"]
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            GlobalHydra.instance().hydra.multirun(  # type: ignore[union-attr]
                config_name="train",
                task_function=task,
                overrides=[*overrides, "hydra.mode=MULTIRUN"],
                with_log_configuration=False,
            )
    finally:
        HydraConfig.instance().cfg = None  # type: ignore[assignment]
    assert epochs == [1, 1]
