"""Diagnostics during training: subset selection, schedule, collapse check."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn

from graphssl.evaluation.diagnostics import embedding_diagnostics
from graphssl.training.callbacks.monitor import (
    CollapseThresholds,
    DiagnosticsMonitor,
    collapse_message,
    select_subset,
)


class Table(nn.Module):
    """A "method" whose embeddings are a fixed matrix; records its mode and grad state."""

    def __init__(self, z: Tensor) -> None:
        super().__init__()
        self.z = nn.Parameter(z)
        self.seen: list[tuple[bool, bool]] = []

    def forward(self) -> Tensor:
        self.seen.append((self.training, torch.is_grad_enabled()))
        return self.z * 1.0


def embed(model: nn.Module) -> Tensor:
    model.eval()
    out = model()
    model.train()
    return out


def collapsed(n: int = 500, d: int = 32, seed: int = 0) -> Tensor:
    """Constant along all directions but one: rank 1 around a constant offset."""
    g = torch.Generator().manual_seed(seed)
    direction = torch.randn(d, generator=g)
    return torch.ones(n, d) + 0.1 * torch.randn(n, 1, generator=g) * direction


def test_select_subset_is_seeded_sorted_and_capped() -> None:
    a, b = select_subset(1000, 100, seed=3), select_subset(1000, 100, seed=3)
    assert torch.equal(a, b) and a.numel() == 100 and torch.all(a[1:] > a[:-1])
    assert not torch.equal(a, select_subset(1000, 100, seed=4))
    assert torch.equal(select_subset(50, 100, seed=0), torch.arange(50))
    assert torch.equal(select_subset(50, None, seed=0), torch.arange(50))
    with pytest.raises(ValueError, match=r"callbacks\.monitor\.subset"):
        select_subset(10, 0, seed=0)


@pytest.mark.parametrize(("every", "expected"), [(1, list(range(7))), (3, [0, 3, 6]), (None, [])])
def test_due_epochs(every: int | None, expected: list[int]) -> None:
    mon = DiagnosticsMonitor(embed, embedding_diagnostics, every=every)
    assert [e for e in range(7) if mon.due(e)] == expected


def test_measure_uses_fixed_subset_under_no_grad() -> None:
    z = torch.randn(300, 16, generator=torch.Generator().manual_seed(0))
    model = Table(z)
    mon = DiagnosticsMonitor(embed, embedding_diagnostics, every=1, subset=100, seed=0)
    r1, r2 = mon.measure(model, 0), mon.measure(model, 1)
    assert r1.diagnostics == r2.diagnostics and r1.alarm is None
    assert all(not grad for _, grad in model.seen)

    ref = embedding_diagnostics(z.detach()[select_subset(300, 100, 0)])
    assert r1.diagnostics["rankme"] == pytest.approx(ref["rankme"])


def test_collapsed_embeddings_fire_the_alarm() -> None:
    mon = DiagnosticsMonitor(embed, embedding_diagnostics, every=1, subset=256)
    res = mon.measure(Table(collapsed()), 4)
    assert res.diagnostics["stable_rank"] < 1.5
    assert res.alarm is not None and res.alarm.startswith("epoch 4: rankme*=")
    assert "stable_rank=" in res.alarm


def test_collapse_message_thresholds() -> None:
    th = CollapseThresholds(rankme_normalized=0.01, stable_rank=1.5)
    assert collapse_message({"rankme_normalized": 0.5, "stable_rank": 10.0}, 0, th) is None
    assert collapse_message({"rankme_normalized": 0.001, "stable_rank": 10.0}, 2, th)
    assert collapse_message({"rankme_normalized": 0.5, "stable_rank": 1.1}, 2, th)
    assert collapse_message({"rankme_normalized": math.nan, "stable_rank": math.nan}, 2, th)
    off = CollapseThresholds(rankme_normalized=None, stable_rank=None, mean_cosine=None)
    assert collapse_message({"rankme_normalized": 0.0, "stable_rank": 1.0}, 0, off) is None
    assert (
        collapse_message({"rankme_normalized": 0.0, "stable_rank": 1.0, "mean_cosine": 1.0}, 0, off)
        is None
    )


def test_collapse_message_direction_check() -> None:
    th = CollapseThresholds()
    assert th.mean_cosine == 0.97 and th.stable_rank == 1.03
    healthy = {"rankme_normalized": 0.5, "stable_rank": 10.0}
    assert collapse_message({**healthy, "mean_cosine": 0.97}, 3, th) is None  # not above
    assert collapse_message({**healthy, "mean_cosine": 0.94}, 3, th) is None  # healthy GraphMAE
    assert collapse_message({**healthy, "mean_cosine": math.nan}, 3, th) is None
    assert (
        collapse_message({**healthy, "mean_cosine": 0.99}, 12, th)
        == "epoch 12: mean_cosine 0.99 > 0.97 (direction collapse)"
    )
    both = collapse_message(
        {"rankme_normalized": 0.5, "stable_rank": 1.01, "mean_cosine": 0.995}, 1, th
    )
    assert both == (
        "epoch 1: rankme*=0.5, stable_rank=1.01 (rank collapse); "
        "mean_cosine 0.995 > 0.97 (direction collapse)"
    )
    assert collapse_message({**healthy, "mean_cosine": 0.7}, 3, CollapseThresholds(mean_cosine=0.6))


def direction_collapsed(n: int = 2048, d: int = 32, loud: int = 10, seed: int = 0) -> Tensor:
    """Almost every row near one direction (plus isotropic noise); a few rows of large norm in
    random directions keep the norm-weighted spectrum spread, so no rank check fires."""
    g = torch.Generator().manual_seed(seed)
    u = torch.nn.functional.normalize(torch.randn(d, generator=g), dim=0)
    z = 100.0 * u + torch.randn(n, d, generator=g)
    z[:loud] = 1500.0 * torch.nn.functional.normalize(torch.randn(loud, d, generator=g), dim=1)
    return z


def test_direction_collapse_with_a_high_rank_fires_only_the_direction_check() -> None:
    mon = DiagnosticsMonitor(embed, embedding_diagnostics, every=1, subset=None)
    res = mon.measure(Table(direction_collapsed()), 7)
    diag = res.diagnostics
    assert diag["mean_cosine"] > 0.97
    assert diag["stable_rank"] > 1.5 and diag["rankme_normalized"] > 0.01
    assert diag["effective_rank"] > 10
    assert res.alarm is not None and res.alarm.startswith("epoch 7: mean_cosine ")
    assert res.alarm.endswith("(direction collapse)") and "rank collapse" not in res.alarm
    # the same rows, pointed in random directions: no alarm
    healthy = torch.randn(512, 32, generator=torch.Generator().manual_seed(1))
    assert mon.measure(Table(healthy), 8).alarm is None


def test_stable_rank_bounds_the_mean_cosine_of_equal_norm_rows() -> None:
    # for unit rows, stable rank <= 1 / mean_cosine: a direction collapse above 0.97 of rows
    # of similar norm also trips the default stable-rank check (both reasons are reported)
    g = torch.Generator().manual_seed(0)
    u = torch.nn.functional.normalize(torch.randn(32, generator=g), dim=0)
    z = torch.nn.functional.normalize(60.0 * u + torch.randn(512, 32, generator=g), dim=1)
    diag = embedding_diagnostics(z)
    assert diag["mean_cosine"] > 0.97
    assert diag["stable_rank"] <= 1.0 / diag["mean_cosine"] + 1e-9
    msg = collapse_message(diag, 0, CollapseThresholds())
    assert msg is not None and "(rank collapse)" in msg and "(direction collapse)" in msg


def test_nonfinite_embeddings_count_as_collapse() -> None:
    mon = DiagnosticsMonitor(embed, embedding_diagnostics, every=1)
    res = mon.measure(Table(torch.full((20, 4), math.nan)), 0)
    assert res.alarm is not None and res.diagnostics["nonfinite_rows"] == 20
