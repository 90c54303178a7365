"""Rerun a logged run by its MLflow run id: ``graphssl rerun=<run id>``.

The stored run's resolved config (its ``config.yaml`` artifact) is run again unchanged —
same seed, same data, same hyperparameters — into the same store, as a new run tagged
``graphssl.rerun_of=<run id>``. On CPU the new run's metrics equal the old ones bit for bit
(timings aside).
"""

from __future__ import annotations

import tempfile

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict

from graphssl.tasks.components import resolve_config
from graphssl.tracking.artifacts import get_run, stored_config
from graphssl.tracking.store import TrackingStore

__all__ = ["rerun", "rerun_config"]

#: overrides that may accompany ``rerun=``: where to find the run, not what it computes
_ALLOWED_PREFIXES = ("rerun=", "logger.tracking_uri=", "paths.outputs_dir=", "hydra.")


def rerun_config(cfg: DictConfig) -> tuple[DictConfig, TrackingStore]:
    """The stored config of run ``cfg.rerun`` (with ``rerun`` set to that id) and its store.

    Raises:
        ValueError: overrides other than the store's location accompany ``rerun=``.
        LookupError: the run is not in the store.
        FileNotFoundError: the run logged no ``config.yaml``.
    """
    run_id = str(cfg.rerun)
    if HydraConfig.initialized():
        extra = [o for o in HydraConfig.get().overrides.task if not o.startswith(_ALLOWED_PREFIXES)]
        if extra:
            raise ValueError(
                f"rerun={run_id} runs the stored config unchanged, but overrides {extra} were "
                f"also given; expected only rerun= (and logger.tracking_uri= or "
                f"paths.outputs_dir= to find the store). To change the config, start a new run "
                f"with those overrides, or from_run={run_id} to start from its weights"
            )
    store = TrackingStore.from_config(resolve_config(cfg))
    record = get_run(store, run_id)
    with tempfile.TemporaryDirectory(prefix="graphssl-rerun-") as tmp:
        stored = stored_config(store, record, tmp)
    with open_dict(stored):
        stored.rerun = run_id
        if TrackingStore.from_config(stored).tracking_uri != store.tracking_uri:
            stored.logger.tracking_uri = store.tracking_uri  # log beside the original
    return stored, store


def rerun(cfg: DictConfig) -> dict[str, float]:
    """Train run ``cfg.rerun``'s stored config again; returns the new run's metrics."""
    from graphssl.tasks.train import train

    stored, _ = rerun_config(cfg)
    return train(stored)
