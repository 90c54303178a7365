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


def nt_xent(z1: Tensor, z2: Tensor, tau: float = 0.5) -> Tensor:
    """SimCLR's normalized-temperature cross-entropy (Chen et al., ICML 2020).

    The ``2N`` projections are L2-normalised; each row's positive is the other view of the same
    image and its ``2N - 2`` negatives are every other row of both views. Computed as a
    cross-entropy over cosine logits ``/ tau`` (log-sum-exp, stable for small ``tau``).

    z1, z2: ``(N, D)``; row ``i`` of ``z1`` is the positive of row ``i`` of ``z2``. Returns the
    mean over the ``2N`` rows.
    """
    if z1.shape != z2.shape or z1.ndim != 2:
        raise ValueError(
            f"nt_xent needs two (N, D) tensors of the same shape, got "
            f"{tuple(z1.shape)} and {tuple(z2.shape)}"
        )
    n = z1.shape[0]
    z = F.normalize(torch.cat([z1, z2], dim=0), dim=1)
    logits = z @ z.t() / tau
    logits = logits.masked_fill(torch.eye(2 * n, dtype=torch.bool, device=z.device), -torch.inf)
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
    return F.cross_entropy(logits, targets)


def dino_loss(
    student: list[Tensor],
    teacher: list[Tensor],
    center: Tensor,
    student_temp: float = 0.1,
    teacher_temp: float = 0.04,
) -> Tensor:
    """DINO's cross-entropy between centred, sharpened teacher and student distributions
    (Caron et al., ICCV 2021).

    Args:
        student: ``V`` tensors ``(N, K)`` of student logits, the teacher's views first.
        teacher: ``T <= V`` tensors ``(N, K)`` of teacher logits (the global views).
        center: ``(1, K)`` running mean of the teacher logits, subtracted before sharpening.
        student_temp: temperature of the student softmax (default: ``0.1``).
        teacher_temp: temperature of the teacher softmax (default: ``0.04``).

    Returns:
        ``H(softmax((t - c) / teacher_temp), softmax(s / student_temp))`` averaged over rows and
        over every (teacher view, student view) pair of different views.
    """
    if not teacher or len(student) < 2:
        raise ValueError(
            f"dino_loss needs >= 1 teacher view and >= 2 student views, got "
            f"{len(teacher)} and {len(student)}"
        )
    targets = [F.softmax((t.detach() - center) / teacher_temp, dim=-1) for t in teacher]
    log_probs = [F.log_softmax(s / student_temp, dim=-1) for s in student]
    total = student[0].new_zeros(())
    pairs = 0
    for i, q in enumerate(targets):
        for j, logp in enumerate(log_probs):
            if i == j:
                continue
            total = total + (-(q * logp).sum(dim=-1)).mean()
            pairs += 1
    return total / pairs
