"""Limits of the ``debug`` config group, applied where the configuration has the key.

``debug=fast`` must run any preset in seconds, but only some datasets can be shrunk (an image
dataset's ``subset``/``test_subset``; a citation graph has no such key, and a DataModule
refuses keys it does not take). ``debug_limits.dataset`` therefore lists the keys to set, and
:func:`apply_debug_limits` sets each one the composed ``dataset`` node already has. In the same
way ``debug_limits.probes`` caps every configured probe that has the key (the logistic
regression's L-BFGS budget ``max_iter``): wide, nearly separable embeddings would otherwise
spend minutes at the weak end of its L2 grid, and a smoke run checks that probes run, not that
they converge.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, open_dict

__all__ = ["apply_debug_limits"]


def apply_debug_limits(cfg: DictConfig) -> DictConfig:
    """Set each ``debug_limits.dataset.<key>`` that ``cfg.dataset`` has, and each
    ``debug_limits.probes.<key>`` that a probe of ``cfg.eval.probes`` has (in place); returns
    ``cfg``."""
    limits = cfg.get("debug_limits") or {}
    _set_present(cfg.get("dataset"), limits.get("dataset") or {})
    evaluation = cfg.get("eval")
    probes = evaluation.get("probes") if isinstance(evaluation, DictConfig) else None
    if isinstance(probes, DictConfig):
        probe_limits = limits.get("probes") or {}
        for name in probes:
            _set_present(probes.get(name), probe_limits)
    return cfg


def _set_present(node: Any, limits: Mapping[str, Any]) -> None:
    if not isinstance(node, DictConfig):
        return
    with open_dict(node):
        for key, value in limits.items():
            if key in node:
                node[key] = value
