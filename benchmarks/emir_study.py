"""Table and ranking helpers shared by the EMIR study scripts (``emir_molecules.py``,
``emir_zoo.py``).

The scripts import it by name after putting ``benchmarks/`` on ``sys.path``; nothing here
imports graphssl at module level, so importing it is cheap.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy.stats import rankdata


def rank_desc(values: Mapping[str, float]) -> dict[str, float]:
    """Rank 1 = the largest value (ties averaged, NaN last)."""
    names = list(values)
    v = np.array([values[n] for n in names], dtype=np.float64)
    v = np.where(np.isnan(v), -np.inf, v)
    return dict(zip(names, (float(r) for r in rankdata(-v, method="average"))))


def fmt_rank(r: float) -> str:
    """``3`` for a whole rank, ``2.5`` for a shared one."""
    return f"{r:.0f}" if float(r).is_integer() else f"{r:.1f}"


def agreement(result: Any) -> float | None:
    """Spearman between a compare result's in-sample and held-out informativeness over its
    embedders (``None`` when it has no held-out estimate)."""
    from graphssl.evaluation.correlation import correlation

    if not result.informativeness_held_out:
        return None
    names = list(result.informativeness)
    return correlation(
        [result.informativeness[n] for n in names],
        [result.informativeness_held_out[n] for n in names],
    )[0]


def csv_text(rows: Sequence[Mapping[str, Any]]) -> str:
    """``rows`` (same keys, in the first row's order) as CSV text with a header line."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()
