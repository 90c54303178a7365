"""``dataset.corruption``: a sparsifier applied after loading, and the achieved degree."""

from __future__ import annotations

import pytest

from graphssl.data.corruptions import ConnectedSparsify, NaiveSparsify
from graphssl.data.node import SBMDataModule


@pytest.mark.parametrize("corruption", [NaiveSparsify, ConnectedSparsify])
def test_corruption_is_applied_after_loading(corruption: type) -> None:
    full = SBMDataModule(block_size=60, p_in=0.2, p_out=0.02, seed=0)
    full.setup()
    assert full.graph_stats()["data/avg_degree"] > 5
    dm = SBMDataModule(
        block_size=60, p_in=0.2, p_out=0.02, seed=0, corruption=corruption(avg_degree=2.0, seed=0)
    )
    dm.setup()
    stats = dm.graph_stats()
    assert stats["data/avg_degree"] == pytest.approx(2.0, abs=0.05)
    assert stats["data/num_nodes"] == 120
    # splits are built from the (unchanged) node set
    assert [s.train.tolist() for s in dm.splits()] == [s.train.tolist() for s in full.splits()]
