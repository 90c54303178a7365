"""Trainer callbacks built from ``conf/callbacks/`` (checkpoints, model selection, diagnostics
monitor).

They measure the model through functions the train task injects (the run's extraction, a
probe, the diagnostics suite) and log through a :class:`MetricSink`, so nothing here imports
the evaluation or tracking layers.
"""

from graphssl.training.callbacks.base import MetricSink, NullSink
from graphssl.training.callbacks.checkpoint import ModelCheckpoint
from graphssl.training.callbacks.monitor import DiagnosticsCallback, DiagnosticsMonitor
from graphssl.training.callbacks.selection import ProbeSelection, SelectionCallback

__all__ = [
    "DiagnosticsCallback",
    "DiagnosticsMonitor",
    "MetricSink",
    "ModelCheckpoint",
    "NullSink",
    "ProbeSelection",
    "SelectionCallback",
]
