"""Subsampling stability study (Tsitsulin et al. 2023, §4.1.2, Table 1) on generated embeddings."""

from __future__ import annotations

import numpy as np
import pytest

from graphssl.evaluation.stability import (
    METRIC_LABELS,
    generated_embeddings,
    markdown_table,
    stability_study,
)

SIZES = [128, 256, 512, 1024, 2048, 4096, 8192]  # 4096 and 8192 are >= N: dropped


@pytest.fixture(scope="module")
def result():  # type: ignore[no-untyped-def]
    z = generated_embeddings(3000, 128, decay=0.5, seed=0)
    return stability_study({"g": z}, batch_sizes=SIZES, repeats=2, seed=0)


def test_batch_sizes_are_capped_below_n(result) -> None:  # type: ignore[no-untyped-def]
    assert result.batch_sizes == [128, 256, 512, 1024, 2048]
    assert result.ratios["rankme"][128].shape == (1, 2)


def test_rankme_is_bounded(result) -> None:  # type: ignore[no-untyped-def]
    q = np.concatenate([a.ravel() for a in result.ratios["rankme"].values()])
    assert np.all(q <= 1.0) and result.bounded_fraction("rankme") == 1.0


def test_reached_is_monotone_in_the_factor(result) -> None:  # type: ignore[no-untyped-def]
    for m in result.metrics:
        bs = [result.reached_at(m, f) for f in result.factors]
        known = [b for b in bs if b is not None]
        assert known == sorted(known)
        # once a factor is never reached, no larger factor is
        first_none = next((i for i, b in enumerate(bs) if b is None), len(bs))
        assert all(b is None for b in bs[first_none:])


def test_table_shape(result) -> None:  # type: ignore[no-untyped-def]
    lines = markdown_table(result).splitlines()
    assert lines[0] == "| metric | Bounded | 0.5 | 0.7 | 0.9 | 0.95 |"
    assert len(lines) == 2 + len(METRIC_LABELS)
    assert all(line.count("|") == 7 for line in lines)
    assert lines[2].startswith("| α-ReQ |")
    rankme = next(line for line in lines if line.startswith("| RankMe |"))
    assert "✓ (100 %)" in rankme


def test_errors_name_the_problem() -> None:
    z = generated_embeddings(100, 8)
    with pytest.raises(ValueError, match="below the smallest source"):
        stability_study([z], batch_sizes=[128, 256])
    with pytest.raises(ValueError, match="unknown diagnostics"):
        stability_study([z], batch_sizes=[64], repeats=1, metrics=["nope"])
