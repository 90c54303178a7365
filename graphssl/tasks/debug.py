"""Dataset limits of the ``debug`` config group, applied where the dataset has the key.

``debug=fast`` must run any preset in seconds, but only some datasets can be shrunk (an image
dataset's ``subset``/``test_subset``; a citation graph has no such key, and a DataModule
refuses keys it does not take). ``debug_limits.dataset`` therefore lists the keys to set, and
:func:`apply_debug_limits` sets each one the composed ``dataset`` node already has.
"""

from __future__ import annotations

from omegaconf import DictConfig, open_dict

__all__ = ["apply_debug_limits"]


def apply_debug_limits(cfg: DictConfig) -> DictConfig:
    """Set each ``debug_limits.dataset.<key>`` that ``cfg.dataset`` has (in place); returns it."""
    limits = (cfg.get("debug_limits") or {}).get("dataset") or {}
    dataset = cfg.get("dataset")
    if not isinstance(dataset, DictConfig):
        return cfg
    with open_dict(dataset):
        for key, value in limits.items():
            if key in dataset:
                dataset[key] = value
    return cfg
