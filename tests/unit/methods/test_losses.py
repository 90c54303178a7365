"""Losses against naive references."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from graphssl.methods.losses import info_nce


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


def test_info_nce_known_answer_for_orthogonal_views() -> None:
    # two identical one-hot views, N = D = 2: s_ii = 1, s_ij = 0, r_ij = 0
    z = torch.eye(2)
    tau = 0.5
    e = torch.exp(torch.tensor(1 / tau))
    want = -torch.log(e / (e + 1 + 1))  # positive + one inter-view + one intra-view negative
    torch.testing.assert_close(info_nce(z, z.clone(), tau), want)
