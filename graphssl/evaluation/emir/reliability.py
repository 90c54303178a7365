"""When to trust an EMIR ranking: a caveat for comparisons below the measured regime.

``benchmarks/emir_agreement.py`` estimates the informativeness of synthetic embedder families
(noisy views of shared latents) at several row counts, twice with different seeds, each run
giving both the in-sample and the held-out figure from one fit. Below about
:data:`MIN_ROWS_PER_TARGET_DIM` rows per target dimension the two figures (and two seeds) rank the
embedders differently: the conditional net fits the rows it is scored on, and the in-sample
ranking reflects how well each source can be memorised rather than what it predicts. With fewer
than :data:`MIN_EMBEDDERS` embedders the median over reference targets rests on a handful of
pairs (the EMIR paper reports ranking correlations near 0.9 from about ten reference models).

The threshold is necessary, not sufficient: on 12 graph embedders of HIV molecules
(``benchmarks/emir_molecules.py``, d = 48-192) the two figures ranked alike only to Spearman 0.61
at 20 rows per dimension and 0.41 at 102, and which of them agreed better with the embedders'
downstream ranks flipped between the two row counts. The caveat therefore names no figure to
trust instead.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["MIN_EMBEDDERS", "MIN_ROWS_PER_TARGET_DIM", "emir_reliability"]

#: Rows per (mean) target dimension below which in-sample and held-out informativeness rankings
#: disagree on the synthetic families of the agreement study: Spearman 0.09-0.43 up to 31 fitted
#: rows per dimension, 0.80 at 77 (while two seeds of either figure agree to 0.94-1.00 there);
#: 100 extrapolates the rise to 0.9 (molecular embedders still disagree at 102: module docstring).
MIN_ROWS_PER_TARGET_DIM: float = 100.0
#: Fewest embedders for a median over references that is more than a few pairs.
MIN_EMBEDDERS: int = 10


def emir_reliability(
    n_rows: int,
    target_dims: Sequence[int] | int,
    n_embedders: int,
    *,
    min_rows_per_dim: float = MIN_ROWS_PER_TARGET_DIM,
    min_embedders: int = MIN_EMBEDDERS,
) -> str | None:
    """A caveat when a comparison is too small for its EMIR ranking to be trusted, else None.

    Args:
        n_rows: rows every embedder embeds (the rows the comparison uses).
        target_dims: the embedders' dimensions (each one is a target), or one dimension.
        n_embedders: embedders compared.
        min_rows_per_dim: rows per mean target dimension below which the in-sample and the
            held-out rankings disagree (default: :data:`MIN_ROWS_PER_TARGET_DIM`).
        min_embedders: fewest embedders for a stable median (default: :data:`MIN_EMBEDDERS`).

    Returns:
        One message naming every shortfall and what to do about it, or ``None``.

    Raises:
        ValueError: for a non-positive row count, dimension or embedder count.
    """
    dims = [target_dims] if isinstance(target_dims, int) else [int(d) for d in target_dims]
    if n_rows < 1 or n_embedders < 1 or not dims or min(dims) < 1:
        raise ValueError(
            f"emir_reliability needs positive n_rows, target_dims and n_embedders, got "
            f"n_rows={n_rows!r}, target_dims={target_dims!r}, n_embedders={n_embedders!r}"
        )
    mean_dim = sum(dims) / len(dims)
    ratio = n_rows / mean_dim
    problems = []
    if ratio < min_rows_per_dim:
        problems.append(
            f"{n_rows} rows for a mean target dimension of {mean_dim:.0f} is {ratio:.1f} rows per "
            f"dimension, below the {min_rows_per_dim:.0f} under which in-sample and held-out "
            "informativeness rank embedders differently (at least "
            f"{round(min_rows_per_dim * mean_dim)} rows; they may still disagree above it), so "
            "neither ranking can be trusted alone: read emir/informativeness_held_out beside "
            "emir/informativeness, or use more rows"
        )
    if n_embedders < min_embedders:
        problems.append(
            f"{n_embedders} embedders give a median over only {n_embedders - 1} reference "
            f"targets; EMIR rankings are stable from about {min_embedders} embedders"
        )
    if not problems:
        return None
    return "EMIR caveat: " + "; ".join(problems) + "."
