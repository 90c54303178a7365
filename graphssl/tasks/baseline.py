"""The untrained-encoder baseline of a run: the same method, freshly initialised, evaluated as
the trained one.

Self-supervision is worth what it adds over the architecture alone: on large graphs an
untrained GNN is often within a few points of trained SSL encoders. :func:`untrained_baseline`
re-seeds the generators with the run's seed, builds a second method from the same config
(same encoder architecture, new random weights, never trained), and extracts, diagnoses and
probes it exactly as the trained one — the same ``eval.extraction`` settings, the same probes,
the same splits. It logs

* ``probe/<p>/baseline_<key>`` for every key ``<p>`` reported for the trained encoder
  (``baseline_val_acc``, ``baseline_test_acc``, ``baseline_weight_decay``, ...),
* ``probe/<p>/gain``: trained minus baseline on the probe's headline test metric
  (:data:`HEADLINE`: ``test_acc`` for classification, ``test_ap`` for multilabel,
  ``test_mae`` for regression, where the sign is flipped — baseline minus trained — so that
  a positive gain always means training helped),
* ``diag_baseline/<name>``: the diagnostics suite on the untrained embeddings, so a report can
  ask whether a diagnostic separates trained from untrained encoders,
* ``time/baseline_seconds``.

The generators are saved before and restored after, so the baseline never shifts the random
stream of whatever the run does next; the trained run's metrics are the same with
``eval.baseline`` on or off. Methods whose class sets ``has_untrained_baseline = False``
(the supervised reference, DeepWalk/node2vec whose embedding table *is* the training) get none.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from omegaconf import DictConfig

from graphssl.data.base import DataModule
from graphssl.evaluation.probe import HEADLINE
from graphssl.evaluation.runner import run_diagnostics
from graphssl.methods.base import SSLMethod
from graphssl.tasks.components import build_method, configured_extraction, configured_probes
from graphssl.tasks.official import ogb_probe_metrics
from graphssl.utils import capture_rng, restore_rng, seed_everything

__all__ = ["HEADLINE", "baseline_enabled", "gains", "untrained_baseline"]

log = logging.getLogger(__name__)


def gains(metrics: Mapping[str, float]) -> dict[str, float]:
    """``probe/<p>/gain`` for every probe with a headline metric and its ``baseline_`` twin."""
    probes = {k.split("/")[1] for k in metrics if k.startswith("probe/") and k.count("/") == 2}
    out: dict[str, float] = {}
    for p in sorted(probes):
        for key, higher in HEADLINE:
            trained = metrics.get(f"probe/{p}/{key}")
            base = metrics.get(f"probe/{p}/baseline_{key}")
            if trained is None or base is None:
                continue
            out[f"probe/{p}/gain"] = float(trained - base) if higher else float(base - trained)
            break
    return out


def baseline_enabled(cfg: DictConfig, method: SSLMethod) -> bool:
    """``eval.baseline`` and the method has an untrained baseline."""
    if not bool(cfg.eval.get("baseline", False)):
        return False
    if not getattr(method, "has_untrained_baseline", True):
        log.info(
            "eval.baseline: %s has no untrained-encoder baseline; skipped", type(method).__name__
        )
        return False
    return True


def untrained_baseline(
    cfg: DictConfig, dm: DataModule, method: SSLMethod, trained: Mapping[str, float]
) -> dict[str, float]:
    """The baseline metrics of a run (module docstring), or ``{}`` when it has none.

    Args:
        cfg: the run's resolved config.
        dm: the run's datamodule (set up).
        method: the trained method (only its class is consulted).
        trained: the trained encoder's metrics, for ``probe/<p>/gain``.
    """
    if not baseline_enabled(cfg, method):
        return {}
    t0 = time.perf_counter()
    rng = capture_rng()
    try:
        seed_everything(int(cfg.seed))
        fresh = build_method(cfg, dm)
        z, y = configured_extraction(cfg, fresh, dm)
        del fresh
        ev = cfg.eval
        out: dict[str, float] = {}
        if ev.diagnostics.enabled:
            diags = run_diagnostics(z, reference=bool(ev.diagnostics.reference))
            out.update({f"diag_baseline/{k.split('/', 1)[1]}": v for k, v in diags.items()})
        probe_metrics = configured_probes(ev, dm, z, y, int(cfg.seed))
        probe_metrics.update(ogb_probe_metrics(cfg, dm, z, y, probe_metrics))
    finally:
        restore_rng(rng)
    for key, value in probe_metrics.items():
        if not key.startswith("probe/"):  # e.g. eval/max_rows: the trained run's already
            continue
        _, name, rest = key.split("/", 2)
        out[f"probe/{name}/baseline_{rest}"] = value
    out.update(gains({**trained, **out}))
    out["time/baseline_seconds"] = time.perf_counter() - t0
    return out
