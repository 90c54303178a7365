"""Losses against naive references."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

from graphssl.methods import losses
from graphssl.methods.losses import (
    graphcl_nt_xent,
    graphcl_nt_xent_terms,
    info_nce,
    info_nce_bytes,
    info_nce_terms,
    simclr_nt_xent,
    simclr_nt_xent_terms,
)


def _info_nce_reference(z1: torch.Tensor, z2: torch.Tensor, tau: float) -> torch.Tensor:
    """GRACE's loss as its reference code writes it: one pass per direction."""

    def one_side(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        refl = torch.exp(a @ a.t() / tau)
        between = torch.exp(a @ b.t() / tau)
        return -torch.log(between.diag() / (refl.sum(1) + between.sum(1) - refl.diag()))

    h1, h2 = F.normalize(z1, dim=1), F.normalize(z2, dim=1)
    return 0.5 * (one_side(h1, h2) + one_side(h2, h1)).mean()


def test_info_nce_matches_the_two_pass_reference() -> None:
    g = torch.Generator().manual_seed(0)
    for tau in (0.2, 0.5, 0.9):
        z1 = torch.randn(64, 16, generator=g, requires_grad=True)
        z2 = torch.randn(64, 16, generator=g, requires_grad=True)
        ours, ref = info_nce(z1, z2, tau), _info_nce_reference(z1, z2, tau)
        torch.testing.assert_close(ours, ref, rtol=1e-6, atol=0)
        grads = torch.autograd.grad(ours, (z1, z2))
        ref_grads = torch.autograd.grad(ref, (z1, z2))
        for got, want in zip(grads, ref_grads, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(("rows", "block"), [(37, 8), (37, 1), (37, 36), (37, 37), (37, 100)])
def test_info_nce_in_blocks_equals_the_whole_matrices(rows: int, block: int) -> None:
    g = torch.Generator().manual_seed(rows + block)
    z1 = torch.randn(rows, 6, generator=g, dtype=torch.float64, requires_grad=True)
    z2 = torch.randn(rows, 6, generator=g, dtype=torch.float64, requires_grad=True)
    whole = info_nce(z1, z2, 0.3)
    blocks = info_nce(z1, z2, 0.3, block_rows=block)
    torch.testing.assert_close(blocks, whole, rtol=1e-12, atol=1e-12)
    for ours, ref in zip(
        torch.autograd.grad(blocks, (z1, z2)), torch.autograd.grad(whole, (z1, z2)), strict=True
    ):
        torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12)
    small = (z1[:7].detach().requires_grad_(), z2[:7].detach().requires_grad_())
    assert torch.autograd.gradcheck(lambda a, b: info_nce(a, b, 0.5, block_rows=3), small)


def test_info_nce_above_the_dense_rows_never_holds_an_n_by_n_matrix(
    monkeypatch, largest_tensor
) -> None:
    monkeypatch.setattr(losses, "INFO_NCE_DENSE_ROWS", 100)
    monkeypatch.setattr(losses, "INFO_NCE_BLOCK_ELEMENTS", 1000)
    z1, z2 = (torch.randn(250, 3, dtype=torch.float64, requires_grad=True) for _ in range(2))
    assert losses.info_nce_block_rows(100) == 0 and losses.info_nce_block_rows(250) == 4
    peaks = {}
    for rows in (100, 250):  # the dense path, then blocks of 4 rows
        with largest_tensor() as seen:
            info_nce(z1[:rows], z2[:rows]).backward()
        peaks[rows] = seen.numel
    assert peaks == {100: 100 * 100, 250: 4 * 250}
    assert info_nce_bytes(100, 8) == 8 * 100 * 100 * 8
    assert info_nce_bytes(250, 8) == 4 * 4 * 250 * 8


def test_info_nce_bytes_grow_as_the_square_then_stay_bounded() -> None:
    dense = losses.INFO_NCE_DENSE_ROWS
    assert info_nce_bytes(dense, 4) == 8 * dense * dense * 4  # 512 MiB in float32
    assert info_nce_bytes(dense // 2, 4) * 4 == info_nce_bytes(dense, 4)
    # above, four blocks of about INFO_NCE_BLOCK_ELEMENTS elements whatever the rows
    for rows in (dense + 1, 19_717, 169_343, 2_449_029):
        assert info_nce_bytes(rows, 4) <= 4 * losses.INFO_NCE_BLOCK_ELEMENTS * 4


def test_info_nce_known_answer_for_orthogonal_views() -> None:
    # two identical one-hot views, N = D = 2: s_ii = 1, s_ij = 0, r_ij = 0
    z = torch.eye(2)
    tau = 0.5
    e = torch.exp(torch.tensor(1 / tau))
    want = -torch.log(e / (e + 1 + 1))  # positive + one inter-view + one intra-view negative
    torch.testing.assert_close(info_nce(z, z.clone(), tau), want)


@pytest.mark.parametrize(
    ("whole", "terms"),
    [
        (info_nce, info_nce_terms),
        (simclr_nt_xent, simclr_nt_xent_terms),
        (graphcl_nt_xent, graphcl_nt_xent_terms),
    ],
)
def test_the_terms_of_anchor_ranges_make_up_the_whole_loss(whole: Any, terms: Any) -> None:
    """What a process computes for its own rows: the ranges' terms, concatenated, are the
    terms of all rows, whose mean is the loss, and so is its gradient."""
    g = torch.Generator().manual_seed(0)
    z1 = torch.randn(10, 6, generator=g, dtype=torch.float64, requires_grad=True)
    z2 = torch.randn(10, 6, generator=g, dtype=torch.float64, requires_grad=True)
    loss = whole(z1, z2, 0.3)
    parts = torch.cat([terms(z1, z2, 0.3, anchors=r) for r in (slice(0, 3), slice(3, 10))])
    torch.testing.assert_close(parts, terms(z1, z2, 0.3), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(parts.mean(), loss, rtol=1e-12, atol=1e-12)
    expected = torch.autograd.grad(loss, (z1, z2))
    for got, want in zip(torch.autograd.grad(parts.mean(), (z1, z2)), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    # a range's terms do not depend on which rows the other ranges hold: shuffle those
    shuffled = torch.cat([z1[:3], z1[3:].flip(0)]), torch.cat([z2[:3], z2[3:].flip(0)])
    torch.testing.assert_close(
        terms(*shuffled, 0.3, anchors=slice(0, 3)), parts[:3], rtol=1e-12, atol=1e-12
    )


def test_info_nce_terms_from_column_sums_over_processes_make_up_the_whole_loss() -> None:
    """Two anchor ranges, as two processes hold them: with ``sum_columns`` each range takes its
    view-2 anchors' inter-view sums from the column sums of every range's view-1 block, and
    the terms and their gradient are those of the whole loss."""
    g = torch.Generator().manual_seed(1)
    z1 = torch.randn(9, 5, generator=g, dtype=torch.float64, requires_grad=True)
    z2 = torch.randn(9, 5, generator=g, dtype=torch.float64, requires_grad=True)
    ranges = (slice(0, 4), slice(4, 9))
    partial: dict[int, torch.Tensor] = {}

    def record(r: slice) -> Any:
        def start(local: torch.Tensor) -> Any:
            partial[r.start] = local
            return lambda: local

        return start

    for r in ranges:  # each range's own column sums (a process's part of the sum)
        info_nce_terms(z1, z2, 0.3, anchors=r, sum_columns=record(r))

    def summed(r: slice) -> Any:
        others = sum(v for k, v in partial.items() if k != r.start)
        return lambda local: lambda: local + others

    parts = torch.cat(
        [info_nce_terms(z1, z2, 0.3, anchors=r, sum_columns=summed(r)) for r in ranges]
    )
    loss = info_nce(z1, z2, 0.3)
    torch.testing.assert_close(parts, info_nce_terms(z1, z2, 0.3), rtol=1e-12, atol=1e-12)
    expected = torch.autograd.grad(loss, (z1, z2))
    for got, want in zip(torch.autograd.grad(parts.mean(), (z1, z2)), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    # a range's own sums alone are not the whole sums: the exchange matters
    alone = torch.cat(
        [info_nce_terms(z1, z2, 0.3, anchors=r, sum_columns=record(r)) for r in ranges]
    )
    assert not torch.allclose(alone, parts)
