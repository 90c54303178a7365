"""Each modality selects its own encoder; a mismatch is refused before anything is built."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from graphssl.tasks.components import resolve_config
from graphssl.tasks.modality import check_modalities
from graphssl.tasks.train import train

CONF = Path(__file__).resolve().parents[3] / "conf"


def compose_with(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides))


@pytest.mark.parametrize("dataset", ["fashion_mnist", "digits", "image_folder"])
def test_image_datasets_select_a_timm_encoder(dataset: str) -> None:
    cfg = compose_with(f"dataset={dataset}", "model=simclr")
    assert cfg.encoder._target_ == "graphssl.models.vision.TimmEncoder"
    assert cfg.encoder.name == "resnet10t"  # timm_small
    check_modalities(resolve_config(cfg))


@pytest.mark.parametrize("dataset", ["cora", "mutag", "sbm", "fashion_mnist_knn"])
def test_graph_datasets_keep_the_gnn(dataset: str) -> None:
    cfg = compose_with(f"dataset={dataset}")
    assert cfg.encoder._target_ == "graphssl.models.encoders.GCNEncoder"
    check_modalities(resolve_config(cfg))


def test_an_explicit_encoder_wins() -> None:
    cfg = compose_with("dataset=digits", "model=simclr", "encoder=timm_resnet18")
    assert cfg.encoder.name == "resnet18"
    assert compose_with("experiment=model_zoo").encoder._target_.endswith("TimmEncoder")


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (("dataset=cora", "model=simclr"), "model SimCLR is an image method, but dataset 'Cora'"),
        (("dataset=digits", "model=dgi"), "dataset 'digits' holds images, but model DGI"),
        (
            ("dataset=digits", "model=simclr", "encoder=gcn"),
            "encoder GCNEncoder is a GNN, but dataset 'digits' holds images",
        ),
        (
            ("dataset=cora", "model=dgi", "encoder=timm_small"),
            "encoder TimmEncoder is an image backbone, but dataset 'Cora' is a graph",
        ),
    ],
)
def test_a_mismatch_is_refused_before_any_work(
    overrides: tuple[str, ...], expected: str, tmp_path: Path
) -> None:
    outputs = tmp_path / "outputs"
    cfg = compose_with(*overrides, f"paths.outputs_dir={outputs}", "paths.data_dir=/nonexistent")
    with pytest.raises(ValueError, match="choose") as info:
        train(cfg)
    assert expected in str(info.value)
    assert not outputs.exists()  # no store, no run, no dataset touched
