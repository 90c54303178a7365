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
    with pytest.raises(ValueError, match="diag_subset"):
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
    off = CollapseThresholds(rankme_normalized=None, stable_rank=None)
    assert collapse_message({"rankme_normalized": 0.0, "stable_rank": 1.0}, 0, off) is None


def test_nonfinite_embeddings_count_as_collapse() -> None:
    mon = DiagnosticsMonitor(embed, embedding_diagnostics, every=1)
    res = mon.measure(Table(torch.full((20, 4), math.nan)), 0)
    assert res.alarm is not None and res.diagnostics["nonfinite_rows"] == 20
