"""MLflow's own run conventions, filled in by graphssl's runs.

- :func:`standard_tags`: ``mlflow.source.git.commit`` (the run page's "Source" commit),
  ``mlflow.user`` and ``mlflow.note.content`` (the run's "Description": the command's
  override string), besides graphssl's ``git.commit``.
- :func:`split_config_values`: the values a probe reports that are choices rather than
  measurements (the chosen ``weight_decay``, ``k``, ``converged``, ``num_splits``) go to tags,
  not to one-point metric charts. Tags, not params: MLflow refuses to change a param, and a
  resumed run may choose differently.
"""

from __future__ import annotations

import getpass
from collections.abc import Mapping, Sequence

__all__ = ["CONFIG_VALUE_NAMES", "split_config_values", "standard_tags"]

#: last segment of the ``probe/<name>/<value>`` keys logged as tags
CONFIG_VALUE_NAMES = frozenset(
    {"k", "k_std", "weight_decay", "weight_decay_std", "converged", "converged_std", "num_splits"}
)


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no login name (a container without a passwd entry)
        return "unknown"


def standard_tags(
    git_commit: str, overrides: Sequence[str] | None, command: str = "graphssl"
) -> dict[str, str]:
    """MLflow's conventional tags of a run launched as ``command`` with ``overrides``."""
    tags = {"mlflow.user": _user()}
    if git_commit and git_commit != "unknown":
        tags["mlflow.source.git.commit"] = git_commit.removesuffix("-dirty")
    line = " ".join([command, *(overrides or [])])
    tags["mlflow.note.content"] = f"`{line}`"
    return tags


def split_config_values(
    metrics: Mapping[str, float],
) -> tuple[dict[str, float], dict[str, str]]:
    """``(measurements, configuration values)``: the second as tags (``str`` values)."""
    keep: dict[str, float] = {}
    tags: dict[str, str] = {}
    for key, value in metrics.items():
        if key.startswith("probe/") and key.rsplit("/", 1)[-1] in CONFIG_VALUE_NAMES:
            v = float(value)
            whole = v.is_integer() and not key.endswith("weight_decay")
            tags[key] = str(int(v)) if whole else str(v)
        else:
            keep[key] = value
    return keep, tags
