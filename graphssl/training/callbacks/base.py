"""What a trainer callback logs through: a metrics sink the entry layer provides."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = ["MetricSink", "NullSink"]


@runtime_checkable
class MetricSink(Protocol):
    """Where callbacks send metrics and tags (the train task passes the run's MLflow tracker,
    :class:`graphssl.tracking.run.RunTracker`)."""

    def log_metrics(self, metrics: Mapping[str, float], step: int = 0) -> None: ...

    def set_tags(self, tags: Mapping[str, Any]) -> None: ...


class NullSink:
    """A sink that drops everything (callbacks used outside a tracked run, e.g. in scripts)."""

    def log_metrics(self, metrics: Mapping[str, float], step: int = 0) -> None:
        return None

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        return None
