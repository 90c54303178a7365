"""Losses as pure functions (style.md rule 3)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def info_nce(z1: Tensor, z2: Tensor, tau: float = 0.5) -> Tensor:
    """GRACE's symmetric InfoNCE with intra- and inter-view negatives.

    z1, z2: ``(N, D)``; row ``i`` of ``z1`` is the positive of row ``i`` of ``z2``.
    """

    def one_side(a: Tensor, b: Tensor) -> Tensor:
        refl = torch.exp(a @ a.t() / tau)
        between = torch.exp(a @ b.t() / tau)
        pos = between.diag()
        denom = refl.sum(1) + between.sum(1) - refl.diag()
        return -torch.log(pos / denom)

    h1, h2 = F.normalize(z1, dim=1), F.normalize(z2, dim=1)
    return 0.5 * (one_side(h1, h2) + one_side(h2, h1)).mean()


def bootstrap_cosine(p: Tensor, z: Tensor) -> Tensor:
    """BYOL/BGRL regression loss ``2 - 2 cos(p, sg(z))`` averaged over rows; p, z: ``(N, D)``."""
    return (2 - 2 * F.cosine_similarity(p, z.detach(), dim=-1)).mean()


def dgi_bce(pos_logits: Tensor, neg_logits: Tensor) -> Tensor:
    """DGI's binary cross-entropy: real nodes labelled 1, corrupted nodes 0; logits ``(N,)``."""
    return F.binary_cross_entropy_with_logits(
        pos_logits, torch.ones_like(pos_logits)
    ) + F.binary_cross_entropy_with_logits(neg_logits, torch.zeros_like(neg_logits))
