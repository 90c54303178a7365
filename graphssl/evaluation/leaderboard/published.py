"""Published figures (``conf/published.yaml``): each a method, a dataset, a probe's value and the
paper it comes from, validated once for every leaderboard."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Published", "published_figures", "same_name"]


@dataclass(frozen=True)
class Published:
    """A published figure: ``value`` (in the runs' units) of ``probe/<probe>/<metric>`` for
    ``method`` on ``dataset``, and where it was published."""

    method: str
    dataset: str
    probe: str
    metric: str
    value: float
    source: str


def same_name(name: str) -> str:
    """``name`` in the form names compare in: case-insensitively, ``-`` and ``_`` alike
    (``Cora`` = ``cora``, ``ogbn-arxiv`` = ``ogbn_arxiv``)."""
    return name.casefold().replace("-", "_")


def published_figures(entries: Sequence[Mapping[str, Any]], scale: float = 1.0) -> list[Published]:
    """The published figures of a data file's ``figures`` list, each value times ``scale``
    (e.g. 0.01 for percentages against accuracies logged as fractions).

    Raises:
        ValueError: an entry lacks a field, has a value that is not a number, or repeats a
            (method, dataset, probe, metric) figure; the message names the entry.
    """
    out: list[Published] = []
    seen: dict[tuple[str, str, str, str], int] = {}
    required = ("method", "dataset", "probe", "metric", "value", "source")
    for i, entry in enumerate(entries):
        missing = [k for k in required if entry.get(k) in (None, "")]
        if missing:
            raise ValueError(
                f"published figure #{i} ({dict(entry)!r}) lacks {missing}; expected every "
                f"entry to give {list(required)}"
            )
        try:
            value = float(entry["value"]) * scale
        except (TypeError, ValueError):
            raise ValueError(
                f"published figure #{i}: value {entry['value']!r} is not a number"
            ) from None
        fig = Published(
            str(entry["method"]),
            str(entry["dataset"]),
            str(entry["probe"]),
            str(entry["metric"]),
            value,
            str(entry["source"]),
        )
        key = (same_name(fig.method), same_name(fig.dataset), fig.probe, fig.metric)
        if key in seen:
            raise ValueError(
                f"published figures #{seen[key]} and #{i} both give {fig.method} on "
                f"{fig.dataset} (probe {fig.probe}, {fig.metric}); expected one figure each"
            )
        seen[key] = i
        out.append(fig)
    return out
