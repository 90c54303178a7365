"""Every method in conf/model trains on a small generated graph: finite, falling loss, and
embeddings the probes accept."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import get_class, instantiate
from omegaconf import OmegaConf

from graphssl.evaluation.extraction import extract_embeddings
from graphssl.evaluation.logreg_probe import LogRegProbe
from graphssl.methods.image import ImageSSLMethod
from graphssl.tasks.components import build_datamodule, build_method, resolve_config
from graphssl.training.trainer import Trainer
from graphssl.utils import seed_everything

CONF = Path(__file__).resolve().parents[3] / "conf"
METHODS = sorted(p.stem for p in (CONF / "model").glob("*.yaml"))


def dataset_for(model: str) -> str:
    """Graph-level methods (InfoGraph, GraphCL) train on generated graphs, the others on an SBM."""
    target = OmegaConf.load(CONF / "model" / f"{model}.yaml")["_target_"]
    return "synthetic_graphs" if getattr(get_class(target), "graph_level", False) else "sbm"


def is_image_method(model: str) -> bool:
    """Image methods (SimCLR, BYOL, DINO, supervised) train on digits with a tiny timm model."""
    target = OmegaConf.load(CONF / "model" / f"{model}.yaml")["_target_"]
    return issubclass(get_class(target), ImageSSLMethod)


IMAGE_OVERRIDES = (
    "dataset=digits",
    "encoder=timm_small",
    "encoder.name=test_resnet",
    "dataset.subset=256",
    "dataset.image_size=16",
    "dataset.batch_size=64",
    "trainer.epochs=6",
)


def small_config(model: str, *extra: str):
    graph = (
        f"dataset={dataset_for(model)}",
        "encoder.hidden_channels=32",
        "encoder.num_layers=2",
        "trainer.epochs=30",
    )
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            config_name="train",
            overrides=[
                f"model={model}",
                *(IMAGE_OVERRIDES if is_image_method(model) else graph),
                "trainer.patience=null",
                "trainer.progress=false",
                *extra,
            ],
        )
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
    if method.configure_optimizer() is None:
        # Gradient-free (DeepWalk/node2vec): the whole fit is one summary "epoch" and gensim
        # reports no loss, so there is no loss curve to check; the probe below checks the
        # embeddings.
        assert len(losses) == 1
    else:
        assert len(losses) == cfg.trainer.epochs
        assert all(math.isfinite(v) for v in losses)
        first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
        assert last < first, f"{model}: loss did not fall ({first:.4f} -> {last:.4f})"

    z, y = extract_embeddings(method, dm)
    if isinstance(method, ImageSSLMethod):  # one row per image
        assert z.shape == (len(dm.labels), method.backbone.out_channels)
    elif method.graph_level:  # one row per graph
        assert y is not None and z.shape[0] == y.shape[0] == len(dm.graphs)  # type: ignore[attr-defined]
    else:
        dim = cfg.model.encoder.hidden_channels if "encoder" in cfg.model else z.shape[1]
        assert z.shape == (dm.data.num_nodes, dim)
    assert torch.isfinite(z).all()
    split = dm.splits()[0]
    res = LogRegProbe(weight_decay=[1e-2, 1e-4]).evaluate(z, y, split.train, split.val, split.test)
    assert 0.0 <= res["test_acc"] <= 1.0


@pytest.mark.parametrize("model", METHODS)
def test_method_trains_on_mini_batches(model: str) -> None:
    cfg = small_config(
        model, "trainer.epochs=2", "trainer.mini_batch=true", "trainer.batch_size=64"
    )
    seed_everything(0)
    dm = build_datamodule(cfg)
    method = build_method(cfg, dm)
    if not method.supports_mini_batch:
        # NeighborLoader mini-batches apply to node-level graph methods only: graph-level and
        # image methods already train on batches of items, and DeepWalk trains on walks.
        with pytest.raises(ValueError, match=r"trainer\.mini_batch=false"):
            instantiate(cfg.trainer).fit(method, dm)
        return
    result = instantiate(cfg.trainer).fit(method, dm)
    assert len(result.losses) == 2 and all(math.isfinite(v) for v in result.losses)


def test_mini_batch_loader_is_kept_across_epochs(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = small_config(
        "dgi", "trainer.epochs=3", "trainer.mini_batch=true", "trainer.batch_size=64"
    )
    seed_everything(0)
    dm = build_datamodule(cfg)
    method = build_method(cfg, dm)
    built: list[object] = []
    real = dm.neighbor_loader

    def counting(*args: object, **kwargs: object) -> object:
        built.append(real(*args, **kwargs))  # type: ignore[arg-type]
        return built[-1]

    monkeypatch.setattr(dm, "neighbor_loader", counting)
    result = instantiate(cfg.trainer).fit(method, dm)
    assert len(result.losses) == 3 and len(built) == 1


def test_mini_batch_training_and_extraction_share_one_sampler_index(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch_geometric.typing

    from graphssl.data import sampler

    monkeypatch.setattr(torch_geometric.typing, "WITH_PYG_LIB", False)
    monkeypatch.setattr(torch_geometric.typing, "WITH_TORCH_SPARSE", False)
    cfg = small_config(
        "dgi",
        "encoder=sage",
        "trainer.epochs=2",
        "trainer.mini_batch=true",
        "trainer.batch_size=64",
    )
    seed_everything(0)
    dm = build_datamodule(cfg)
    method = build_method(cfg, dm)
    built: list[sampler.SamplerIndex] = []
    real_build = sampler.build_sampler_index

    def counting_build(*args: object, **kwargs: object) -> sampler.SamplerIndex:
        built.append(real_build(*args, **kwargs))  # type: ignore[arg-type]
        return built[-1]

    loaders: list[object] = []
    real_loader = dm.neighbor_loader

    def recording(*args: object, **kwargs: object) -> object:
        loaders.append(real_loader(*args, **kwargs))  # type: ignore[arg-type]
        return loaders[-1]

    monkeypatch.setattr(sampler, "build_sampler_index", counting_build)
    monkeypatch.setattr(dm, "neighbor_loader", recording)
    instantiate(cfg.trainer).fit(method, dm)
    mini, _ = extract_embeddings(method, dm, mini_batch=True)
    # the training loader, then the extraction loader, over one index built once
    assert len(loaders) == 2 and len(built) == 1
    rows = [loader.node_sampler.row for loader in loaders]  # type: ignore[attr-defined]
    assert rows[0] is rows[1] is built[0].row
    assert mini.shape[0] == dm.data.num_nodes and torch.isfinite(mini).all()


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
