"""Seeded row caps for evaluating large embedding matrices.

On graphs with millions of nodes the probes and figures need not see every row to give a
faithful number: a seeded uniform subsample of each split keeps the estimate unbiased, and its
cost bounded. :func:`cap_rows` draws one, keeping at least one row of every class that the split
holds, so that a rare class never disappears from a probe's training rows unnoticed.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["CappedRows", "cap_rows", "check_max_rows", "row_generator"]


def check_max_rows(max_rows: object, name: str = "max_rows") -> int | None:
    """``max_rows`` as an int (``None`` passes through), or a ValueError naming it."""
    if max_rows is None:
        return None
    if isinstance(max_rows, bool) or not isinstance(max_rows, numbers.Integral) or max_rows < 1:
        raise ValueError(f"{name} must be a positive integer or null (no cap), got {max_rows!r}")
    return int(max_rows)


def row_generator(seed: int) -> torch.Generator:
    """A CPU generator seeded with ``seed``: the same seed draws the same rows."""
    return torch.Generator().manual_seed(int(seed))


@dataclass(frozen=True)
class CappedRows:
    """The rows kept by :func:`cap_rows`.

    Attributes:
        rows: ``long`` indices, a subset of the split's in the split's order.
        capped: whether rows were dropped.
        added: rows added beyond the cap so that every class keeps one.
    """

    rows: Tensor
    capped: bool
    added: int = 0


def cap_rows(
    rows: Tensor,
    max_rows: int | None,
    generator: torch.Generator,
    labels: Tensor | None = None,
) -> CappedRows:
    """At most ``max_rows`` of ``rows``, drawn uniformly without replacement.

    When ``labels`` are single-label class ids (``[N]`` integers), every class present among
    ``rows`` keeps at least one row: a class the draw missed gets one of its rows back (drawn
    from the same permutation), so the result may exceed ``max_rows`` by the number of such
    classes (:attr:`CappedRows.added`).

    Args:
        rows: ``long`` indices of one split.
        max_rows: the cap; ``None`` keeps every row.
        generator: a CPU generator (:func:`row_generator`); draws advance it.
        labels: ``[N]`` labels of the whole matrix (indexed by ``rows``), or ``None``.

    Returns:
        The kept rows, in the order they have in ``rows``.
    """
    n = rows.numel()
    if max_rows is None or n <= max_rows:
        return CappedRows(rows=rows, capped=False)
    perm = torch.randperm(n, generator=generator).to(rows.device)
    keep = perm[:max_rows]
    added = 0
    if labels is not None and labels.ndim == 1 and not labels.is_floating_point():
        _, encoded = torch.unique(labels[rows], return_inverse=True)
        n_classes = int(encoded.max()) + 1
        present = torch.zeros(n_classes, dtype=torch.bool, device=rows.device)
        present[encoded[keep]] = True
        if not bool(present.all()):
            # the first row of each missing class in the rest of the permutation
            rest = perm[max_rows:]
            position = torch.arange(rest.numel(), device=rows.device)
            first = torch.full((n_classes,), rest.numel(), dtype=torch.long, device=rows.device)
            first.scatter_reduce_(0, encoded[rest], position, reduce="amin")
            extra = rest[first[~present]]
            keep = torch.cat([keep, extra])
            added = extra.numel()
    return CappedRows(rows=rows[keep.sort().values], capped=True, added=added)
