"""OGB's own metric beside the probes of a run on an OGB dataset (``probe/<p>/ogb_test_*``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from torch import Tensor

from graphssl.data.base import DataModule
from graphssl.evaluation.official import OFFICIAL_METRICS, official_metrics
from graphssl.tasks.components import probe_configs

__all__ = ["ogb_probe_metrics"]

log = logging.getLogger(__name__)


def ogb_probe_metrics(
    cfg: DictConfig,
    dm: DataModule,
    z: Tensor,
    y: Tensor | None,
    probe_metrics: Mapping[str, float],
) -> dict[str, float]:
    """``probe/<p>/ogb_test_<metric>`` for a datamodule that exposes ``ogb_evaluator()`` and
    ``ogb_metric`` (the OGB datasets); ``{}`` for any other.

    Each configured probe is built again and fitted on every split; with one split (OGB's
    official one) a probe whose ``weight_decay`` was selected (``probe/<p>/weight_decay`` in
    ``probe_metrics``) is refitted with that value only instead of its whole grid — the same
    selection, one fit.
    """
    make_evaluator = getattr(dm, "ogb_evaluator", None)
    if not callable(make_evaluator) or y is None:
        return {}
    metric = str(dm.ogb_metric)  # type: ignore[attr-defined]
    if metric not in OFFICIAL_METRICS:
        log.info(
            "OGB metric %r of %s is not fed from the probes (only %s)",
            metric,
            dm.name,
            OFFICIAL_METRICS,
        )
        return {}
    splits = dm.splits()
    configs = probe_configs(cfg.eval.probes, getattr(dm, "task", "classification"))
    if not configs or not splits:
        return {}
    probes = {}
    for name, pc in configs.items():
        chosen = probe_metrics.get(f"probe/{name}/weight_decay")
        if len(splits) == 1 and chosen is not None and "weight_decay" in pc:
            pc = OmegaConf.merge(pc, {"weight_decay": float(chosen)})
        probes[name] = instantiate(pc)
    return official_metrics(z, y, splits, probes, make_evaluator(), metric)
