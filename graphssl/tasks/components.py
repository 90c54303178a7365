"""What the tasks build from a composed config: the resolved config, the datamodule, the
method, the probes that fit the dataset, and the run's configured extraction."""

from __future__ import annotations

from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from graphssl.data.base import DataModule
from graphssl.evaluation.extraction import ExtractionPlan, extract_embeddings, plan_extraction
from graphssl.evaluation.runner import evaluation_settings, run_probes
from graphssl.methods.base import SSLMethod

__all__ = [
    "build_datamodule",
    "build_method",
    "build_probes",
    "configured_extraction",
    "configured_extraction_plan",
    "method_config",
    "probe_configs",
    "resolve_config",
    "set_threads",
]


def resolve_config(cfg: DictConfig) -> DictConfig:
    """A resolved copy of ``cfg`` (without the ``hydra`` node); missing values fail here,
    before any work."""
    keys = [str(k) for k in cfg if k != "hydra"]
    container = OmegaConf.to_container(
        OmegaConf.masked_copy(cfg, keys), resolve=True, throw_on_missing=True
    )
    assert isinstance(container, dict)
    out = OmegaConf.create(container)
    assert isinstance(out, DictConfig)
    return out


def build_datamodule(cfg: DictConfig) -> DataModule:
    """Instantiate ``cfg.dataset`` and set it up."""
    dm = instantiate(cfg.dataset)
    if not isinstance(dm, DataModule):
        raise TypeError(
            f"dataset._target_ must build a graphssl DataModule, got "
            f"{type(dm).__name__} from {cfg.dataset['_target_']!r}"
        )
    dm.setup()
    return dm


def _fill_from_dataset(enc: DictConfig, dm: DataModule) -> None:
    """Set the encoder keys that are -1/null and that the dataset decides: ``in_channels``
    for GNNs; ``in_chans``/``img_size`` for image encoders (``dm.encoder_overrides()``)."""
    pending = [str(k) for k, v in enc.items() if v is None or (isinstance(v, int) and v == -1)]
    if not pending:
        return
    overrides_fn = getattr(dm, "encoder_overrides", None)
    if callable(overrides_fn):
        overrides = dict(overrides_fn())
    elif "in_channels" in pending:
        overrides = {"in_channels": dm.num_features}
    else:
        overrides = {}
    for key in pending:
        if key in overrides:
            enc[key] = overrides[key]


def method_config(cfg: DictConfig, dm: DataModule) -> DictConfig:
    """``cfg.model`` resolved, with the sizes taken from the dataset filled in (the encoder's
    input size, ``num_classes``): instantiating it needs no dataset."""
    model_cfg = OmegaConf.create(OmegaConf.to_container(cfg.model, resolve=True))
    assert isinstance(model_cfg, DictConfig)
    enc = model_cfg.get("encoder")
    if isinstance(enc, DictConfig):
        _fill_from_dataset(enc, dm)
    if model_cfg.get("num_classes", None) in (-1, None) and "num_classes" in model_cfg:
        model_cfg.num_classes = dm.num_classes  # e.g. the supervised classifier
    return model_cfg


def build_method(cfg: DictConfig, dm: DataModule) -> SSLMethod:
    """Instantiate ``cfg.model`` with the encoder's input size taken from the dataset."""
    method = instantiate(method_config(cfg, dm))
    if not isinstance(method, SSLMethod):
        raise TypeError(
            f"model._target_ must build a graphssl SSLMethod, got "
            f"{type(method).__name__} from {cfg.model['_target_']!r}"
        )
    return method


_RIDGE = "graphssl.evaluation.regression_probe.RidgeEvaluator"


def probe_configs(probes: DictConfig | None, task: str) -> dict[str, Any]:
    """The configured probes that fit the dataset's ``task`` (graph-level datasets declare one).

    ``"regression"`` keeps the ridge probes, or uses a default ridge probe when only
    classifiers are configured; ``"multilabel"`` keeps the logistic-regression probes with
    ``multilabel=true``; ``"classification"`` keeps everything configured.
    """
    cfgs = {str(k): v for k, v in (probes or {}).items() if v is not None}
    if task == "regression":
        ridge = {k: v for k, v in cfgs.items() if v.get("_target_") == _RIDGE}
        return ridge or ({"ridge": {"_target_": _RIDGE}} if cfgs else {})
    if task == "multilabel":
        return {
            k: OmegaConf.merge(v, {"multilabel": True})
            for k, v in cfgs.items()
            if str(v.get("_target_", "")).endswith("LogRegEvaluator")
        }
    return cfgs


def build_probes(probes: DictConfig | None, dm: DataModule) -> dict[str, Any]:
    """The configured probes that fit ``dm``'s task (:func:`probe_configs`), instantiated."""
    return {
        name: instantiate(p)
        for name, p in probe_configs(probes, getattr(dm, "task", "classification")).items()
    }


def configured_probes(
    eval_cfg: DictConfig, dm: DataModule, z: torch.Tensor, y: torch.Tensor | None, seed: int
) -> dict[str, float]:
    """:func:`run_probes` with the run's probes on ``dm``'s splits and its row cap
    (``eval.max_rows``, drawn with ``seed``)."""
    caps = evaluation_settings(eval_cfg)
    probes = build_probes(eval_cfg.probes, dm)
    return run_probes(z, y, dm.splits(), probes, max_rows=caps["max_rows"], seed=seed)


def configured_extraction(
    cfg: DictConfig, model: torch.nn.Module, dm: DataModule
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`extract_embeddings` with the run's ``eval.extraction`` settings and device."""
    ex = cfg.eval.extraction
    return extract_embeddings(
        model,
        dm,
        encoder_source=ex.encoder_source,
        device=str(cfg.trainer.device),
        mini_batch=bool(ex.mini_batch),
        num_neighbors=ex.num_neighbors,
        **_extraction_mode(ex),
    )


def configured_extraction_plan(
    cfg: DictConfig, model: torch.nn.Module, dm: DataModule
) -> ExtractionPlan:
    """The :class:`~graphssl.evaluation.extraction.ExtractionPlan` that
    :func:`configured_extraction` follows (its mode and the reason for it)."""
    ex = cfg.eval.extraction
    return plan_extraction(
        model, dm, ex.encoder_source, mini_batch=bool(ex.mini_batch), **_extraction_mode(ex)
    )


def _extraction_mode(ex: DictConfig) -> dict[str, Any]:
    """``mode``, ``memory_budget_gb`` and ``chunk_size`` of ``eval.extraction`` (configs
    written before these keys existed: full-batch or mini-batch as ``mini_batch`` says)."""
    return {
        "mode": str(ex.get("mode", "auto")),
        "memory_budget_gb": ex.get("memory_budget_gb"),
        "chunk_size": ex.get("chunk_size"),
    }


def set_threads(num_threads: Any) -> None:
    """Apply ``num_threads`` (``null``: leave PyTorch's default)."""
    if num_threads is None:
        return
    if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
        raise ValueError(f"num_threads must be a positive integer or null, got {num_threads!r}")
    torch.set_num_threads(num_threads)
