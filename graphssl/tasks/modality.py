"""Graphs or images: a run's dataset, method and encoder must agree, checked before any work.

An image dataset selects a timm encoder by default (``conf/dataset/<image dataset>.yaml``
overrides ``/encoder``), a graph dataset the default GNN; what is chosen explicitly and does not
fit — an image method on a graph, a GNN on images — is refused here from the classes the config
names, before anything is loaded or logged, with the options that fit.
"""

from __future__ import annotations

from typing import Any

from hydra.utils import get_class
from omegaconf import DictConfig

from graphssl.data.images import ImageDataModule
from graphssl.methods.image import ImageSSLMethod
from graphssl.models.vision import TimmEncoder

__all__ = ["check_modalities", "modality_of"]

#: the config options of each modality, for the messages
IMAGE_DATASETS = "dataset=fashion_mnist|digits|image_folder"
IMAGE_METHODS = "model=simclr|byol|dino|supervised"
IMAGE_ENCODERS = "encoder=timm_small|timm_resnet18"
GRAPH_METHODS = "model=dgi|grace|bgrl|cca_ssg|graphmae|infograph|graphcl|..."
GRAPH_ENCODERS = "encoder=gcn|sage|gat|gin|mlp"


def _cls(node: Any) -> type | None:
    target = node.get("_target_") if isinstance(node, DictConfig) else None
    if not target or node.get("_partial_", False):
        return None
    try:
        cls = get_class(str(target))
    except (ImportError, ValueError):
        return None  # not a class (or unknown): instantiation reports it with its own error
    return cls if isinstance(cls, type) else None


def modality_of(node: Any, image_base: type) -> str | None:
    """``"image"`` when ``node``'s ``_target_`` is a subclass of ``image_base``, ``"graph"``
    for any other class, ``None`` when it names no class."""
    cls = _cls(node)
    if cls is None:
        return None
    return "image" if issubclass(cls, image_base) else "graph"


def check_modalities(cfg: DictConfig) -> None:
    """Refuse a dataset, method and encoder of different modalities.

    Raises:
        ValueError: one paragraph naming the dataset, the mismatching method or encoder and
            the options that fit.
    """
    data = modality_of(cfg.get("dataset"), ImageDataModule)
    if data is None:
        return
    dataset = f"dataset {cfg.dataset.get('name', cfg.dataset.get('_target_'))!r}"
    model_cfg = cfg.get("model")
    method = modality_of(model_cfg, ImageSSLMethod)
    model_name = str(model_cfg.get("_target_", "?")).rsplit(".", 1)[-1] if model_cfg else "?"
    if method is not None and method != data:
        if data == "image":
            raise ValueError(
                f"{dataset} holds images, but model {model_name} is a graph method; choose an "
                f"image method ({IMAGE_METHODS}) or a graph dataset"
            )
        raise ValueError(
            f"model {model_name} is an image method, but {dataset} is a graph; choose a graph "
            f"method ({GRAPH_METHODS}) or an image dataset ({IMAGE_DATASETS})"
        )
    enc_cfg = model_cfg.get("encoder") if isinstance(model_cfg, DictConfig) else None
    encoder = modality_of(enc_cfg, TimmEncoder)
    if encoder is None or encoder == data:
        return
    enc_name = str(enc_cfg.get("_target_")).rsplit(".", 1)[-1] if enc_cfg is not None else "?"
    if data == "image":
        raise ValueError(
            f"encoder {enc_name} is a GNN, but {dataset} holds images; leave encoder unset "
            f"(an image dataset selects encoder=timm_small) or choose an image backbone "
            f"({IMAGE_ENCODERS})"
        )
    raise ValueError(
        f"encoder {enc_name} is an image backbone, but {dataset} is a graph; choose a GNN "
        f"({GRAPH_ENCODERS})"
    )
