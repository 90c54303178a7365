"""Deprecated: the module is now :mod:`graphssl.evaluation.ridge_probe`; every name of it is
reachable here for one release, with a :class:`DeprecationWarning` (old class names included:
``RidgeEvaluator`` → ``RidgeProbe``). Stored configs whose ``_target_`` names this module keep
working."""

from __future__ import annotations

from typing import Any

from graphssl.evaluation import ridge_probe as _module
from graphssl.evaluation._deprecated import renamed

_RENAMED = {"RidgeEvaluator": "RidgeProbe"}


def __getattr__(name: str) -> Any:
    return renamed(__name__, name, _module, _RENAMED)
