"""Run the configured probes and diagnostics on extracted embeddings.

Consumes tensors only (embeddings, labels, splits) and returns flat metric dicts keyed as the
rest of graphssl logs them: ``probe/<probe>/<split>_<metric>`` and ``diag/<name>``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from torch import Tensor

from graphssl.evaluation.aggregate import mean_std
from graphssl.evaluation.diagnostics import embedding_diagnostics

log = logging.getLogger(__name__)


class Probe(Protocol):
    def evaluate(
        self,
        embeddings: Tensor,
        labels: Tensor | None,
        train_mask: Tensor,
        val_mask: Tensor,
        test_mask: Tensor,
    ) -> dict[str, Any]: ...


class SplitLike(Protocol):
    @property
    def train(self) -> Tensor: ...
    @property
    def val(self) -> Tensor: ...
    @property
    def test(self) -> Tensor: ...


def run_probes(
    embeddings: Tensor,
    labels: Tensor | None,
    splits: Sequence[SplitLike],
    probes: Mapping[str, Probe],
) -> dict[str, float]:
    """Evaluate every probe on every split; several splits give ``<metric>`` (mean) and
    ``<metric>_std``.

    Raises:
        ValueError: when there are probes but no labels or no splits.
    """
    if not probes:
        return {}
    if labels is None:
        raise ValueError(
            f"probes {sorted(probes)} need labels, but the dataset has none; expected a dataset "
            f"with a 'y' attribute, or set eval.probes={{}} to run diagnostics only"
        )
    if not splits:
        raise ValueError("probes need at least one train/val/test split; the dataset has none")
    out: dict[str, float] = {}
    for name, probe in probes.items():
        results = [probe.evaluate(embeddings, labels, s.train, s.val, s.test) for s in splits]
        summary = (
            mean_std(results)
            if len(results) > 1
            else {k: float(v) for k, v in results[0].items() if isinstance(v, (int, float, bool))}
        )
        if len(results) > 1:
            summary["num_splits"] = float(len(results))
        out.update({f"probe/{name}/{k}": v for k, v in summary.items()})
    return out


def run_diagnostics(embeddings: Tensor, *, reference: bool = False) -> dict[str, float]:
    """The whole diagnostics suite as ``diag/<name>``."""
    diags = embedding_diagnostics(embeddings, reference=reference)
    return {f"diag/{k}": float(v) for k, v in diags.items()}
