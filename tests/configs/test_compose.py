"""Every YAML in every config group composes and instantiates (the config tree is the registry)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

from graphssl.data.base import DataModule
from graphssl.methods.base import SSLMethod
from graphssl.models.encoders import GNNEncoder
from graphssl.tasks.components import resolve_config
from graphssl.training.trainer import Trainer

CONF = Path(__file__).resolve().parents[2] / "conf"


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def compose_with(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides), return_hydra_config=True)


def test_groups_exist() -> None:
    for group in (
        "dataset",
        "model",
        "encoder",
        "trainer",
        "eval",
        "logger",
        "paths",
        "hydra",
        "experiment",
        "callbacks",
    ):
        assert (CONF / group).is_dir(), group
    assert options("model") and options("dataset") and options("encoder")


@pytest.mark.parametrize("dataset", options("dataset"))
def test_dataset_instantiates(dataset: str) -> None:
    cfg = resolve_config(compose_with(f"dataset={dataset}"))
    dm = instantiate(cfg.dataset)
    assert isinstance(dm, DataModule)
    assert dm.name == cfg.dataset.name


def test_dataset_download_policy_comes_from_paths() -> None:
    """Every downloading dataset takes ``paths.download``/``paths.download_timeout``; the
    suite runs with ``GRAPHSSL_DOWNLOAD=false`` (tests/conftest.py), a run can turn it on."""
    off = instantiate(resolve_config(compose_with("dataset=amazon_photo")).dataset)
    assert off.downloads.enabled is False
    on = instantiate(
        resolve_config(
            compose_with("dataset=ogbn_arxiv", "paths.download=true", "paths.download_timeout=3")
        ).dataset
    )
    assert on.downloads.enabled is True and on.downloads.timeout == 3.0


def test_pyg_dataset_by_class_name_composes() -> None:
    cfg = resolve_config(
        compose_with("dataset=pyg", "dataset.cls=Amazon", "+dataset.kwargs.name=Photo")
    )
    dm = instantiate(cfg.dataset)
    assert (dm.name, dm.cls_name, dm.kwargs) == ("Photo", "Amazon", {"name": "Photo"})


@pytest.mark.parametrize("encoder", options("encoder"))
def test_encoder_instantiates(encoder: str) -> None:
    if encoder.startswith("timm_"):  # image encoders: [B, C, H, W] -> [B, D]
        cfg = resolve_config(compose_with(f"encoder={encoder}", "encoder.in_chans=1"))
        enc = instantiate(cfg.encoder)
        assert enc(torch.randn(2, 1, 32, 32)).shape == (2, enc.out_channels)
        return
    cfg = resolve_config(compose_with(f"encoder={encoder}", "encoder.in_channels=8"))
    enc = instantiate(cfg.encoder)
    assert isinstance(enc, GNNEncoder)
    out = enc(torch.randn(5, 8), torch.tensor([[0, 1, 2], [1, 2, 3]]))
    assert out.shape == (5, cfg.encoder.hidden_channels)


@pytest.mark.parametrize("model", options("model"))
def test_model_instantiates(model: str) -> None:
    cfg = resolve_config(compose_with(f"model={model}", "encoder.in_channels=8"))
    method = instantiate(cfg.model)
    assert isinstance(method, SSLMethod)
    assert method.encoders(), "a method must name its sub-encoders"
    if type(method).fit_without_gradients is SSLMethod.fit_without_gradients:
        assert method.configure_optimizer() is not None  # gradient-free methods need none


@pytest.mark.parametrize("experiment", options("experiment"))
def test_experiment_composes(experiment: str) -> None:
    cfg = resolve_config(compose_with(f"experiment={experiment}"))
    assert OmegaConf.select(cfg, "model._target_")
    instantiate(cfg.dataset)
    if cfg.callbacks.selection.every is not None:  # a preset selecting weights names a probe it has
        assert cfg.callbacks.selection.probe in cfg.eval.probes, (
            experiment,
            cfg.callbacks.selection.probe,
        )
        assert hasattr(instantiate(cfg.eval.probes[cfg.callbacks.selection.probe]), "evaluate")


@pytest.mark.parametrize("experiment", options("experiment"))
def test_k_fold_graph_presets_select_the_probe_by_inner_cv(experiment: str) -> None:
    """The presets whose dataset is split into k folds select the default probe's L2 strength
    by inner cross-validation in each training fold; every other preset keeps the selection on
    its validation split, so its metrics are what they were."""
    cfg = resolve_config(compose_with(f"experiment={experiment}"))
    logreg = cfg.eval.probes.get("logreg")
    if logreg is None:
        return
    k_fold = OmegaConf.select(cfg, "dataset.split") == "kfold"
    assert logreg.selection == ("cv" if k_fold else "split"), experiment
    probe = instantiate(logreg)
    assert (probe.selection, probe.inner_folds, probe.seed) == (logreg.selection, 5, cfg.seed)


def test_eval_graph_selects_by_inner_cv_and_split_stays_one_override_away() -> None:
    for option in ("graph", "graph_papers"):
        cfg = resolve_config(compose_with(f"eval={option}"))
        assert instantiate(cfg.eval.probes.logreg).selection == "cv", option
    cfg = resolve_config(
        compose_with("experiment=infograph_mutag", "eval.probes.logreg.selection=split")
    )
    assert instantiate(cfg.eval.probes.logreg).selection == "split"
    assert resolve_config(compose_with()).eval.probes.logreg.selection == "split"


@pytest.mark.parametrize("eval_option", options("eval"))
def test_eval_options_instantiate(eval_option: str) -> None:
    cfg = resolve_config(compose_with(f"eval={eval_option}"))
    for name, probe in cfg.eval.probes.items():
        if probe is not None:
            assert hasattr(instantiate(probe), "evaluate"), name
    assert cfg.eval.extraction.encoder_source


def test_readme_overrides_compose() -> None:
    """The narrower probe grid (docs/evaluation.md) and the model selection (docs/methods.md)
    commands compose as written."""
    cfg = resolve_config(
        compose_with(
            "experiment=cca_ssg_citeseer",
            "eval.probes.logreg.weight_decay=[0.1,0.01,0.001,0.0001,1e-05,0.0]",
        )
    )
    assert instantiate(cfg.eval.probes.logreg).weight_decays[:2] == (0.1, 0.01)
    default = resolve_config(compose_with()).eval.probes.logreg
    assert instantiate(default).weight_decays[:2] == (100.0, 30.0)
    cfg = resolve_config(
        compose_with(
            "experiment=grace_citeseer",
            "trainer.epochs=400",
            "callbacks.selection.every=25",
            "callbacks.selection.patience=4",
        )
    )
    assert (
        cfg.callbacks.selection.every,
        cfg.callbacks.selection.patience,
        cfg.trainer.epochs,
    ) == (25, 4, 400)


def test_trainer_logger_paths() -> None:
    cfg = resolve_config(compose_with())
    assert isinstance(instantiate(cfg.trainer), Trainer)
    assert cfg.logger.experiment_name
    assert cfg.paths.data_dir and cfg.paths.outputs_dir


def test_hydra_callback_registered() -> None:
    cfg = compose_with()
    target = cfg.hydra.callbacks.mlflow_sweep._target_
    assert target == "graphssl.tracking.sweep.MLflowSweepCallback"
    assert cfg.hydra.job.chdir is False


def test_num_threads_applies_and_rejects_bad_values(monkeypatch: pytest.MonkeyPatch) -> None:
    from threadpoolctl import threadpool_limits

    from graphssl.tasks.components import set_threads as _set_threads
    from graphssl.threads import THREAD_ENV_VARS, pool_sizes

    for name in THREAD_ENV_VARS:  # restored after the test, like the pools and torch's count
        monkeypatch.setenv(name, os.environ.get(name, ""))
    previous = torch.get_num_threads()
    try:
        with threadpool_limits(limits=None):
            _set_threads(1)
            assert torch.get_num_threads() == 1
            assert set(pool_sizes().values()) == {1}  # every BLAS/OpenMP pool too
            _set_threads(None)  # null: torch's count, for every pool
            assert torch.get_num_threads() == 1
            with pytest.raises(ValueError, match=r"num_threads.*got 0"):
                _set_threads(0)
            with pytest.raises(ValueError, match=r"num_threads.*'two'"):
                _set_threads("two")
    finally:
        torch.set_num_threads(previous)


@pytest.mark.parametrize("task", ["train", "evaluate", "compare", "report", "stability"])
def test_every_task_composes_on_the_shared_groups(task: str) -> None:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name=task, return_hydra_config=True)
    # output_dir of compare/report resolves inside a Hydra app only; the shared groups resolve
    paths = OmegaConf.to_container(cfg.paths, resolve=True)
    logger = OmegaConf.to_container(cfg.logger, resolve=True)
    assert isinstance(paths, dict) and isinstance(logger, dict)
    assert paths["outputs_dir"] and logger["tracking_uri"] is None
    assert cfg.hydra.job.chdir is False
    assert cfg.hydra.help.app_name == ("graphssl" if task == "train" else f"graphssl-{task}")
    # only the train task makes a multirun one MLflow parent run
    assert ("mlflow_sweep" in cfg.hydra.callbacks) == (task == "train")


def test_the_ranks_launcher_asks_slurm_for_one_task_per_rank() -> None:
    pytest.importorskip(
        "hydra_plugins.hydra_submitit_launcher",
        reason="hydra-submitit-launcher not installed (make install, the dev extra has it)",
    )
    cfg = compose_with(
        "hydra/launcher=submitit_slurm_ranks", "trainer.devices=4", "trainer.num_nodes=3"
    )
    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    assert launcher["tasks_per_node"] == 4 and launcher["nodes"] == 3
    assert launcher["_target_"].endswith("SlurmLauncher")
