"""The training objectives of graphssl's methods, as pure functions of tensors.

One name per formula: functions that share a paper's name but not its arithmetic get distinct
names (:func:`simclr_nt_xent` and :func:`graphcl_nt_xent`; :func:`dino_loss` centres and sharpens
teacher logits, then takes :func:`dino_cross_entropy`). Keeping them here, free of module state,
lets tests check each against a naive computation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "bootstrap_cosine",
    "dgi_bce",
    "dino_cross_entropy",
    "dino_cross_entropy_terms",
    "dino_loss",
    "dino_loss_terms",
    "graphcl_nt_xent",
    "graphcl_nt_xent_terms",
    "info_nce",
    "info_nce_block_rows",
    "info_nce_bytes",
    "info_nce_terms",
    "simclr_nt_xent",
    "simclr_nt_xent_terms",
]


#: :func:`info_nce` on more rows than this computes its similarities in blocks of rows and
#: never holds an ``N x N`` matrix: the dense path holds eight at its peak (512 MiB in float32
#: at 4096 rows), and on a CPU the blocks' smaller memory traffic outweighs their recomputed
#: exponentials from a few thousand rows on (0.64-0.77x the time at 5000 to 8192 rows)
INFO_NCE_DENSE_ROWS = 4096
#: elements of one ``rows x N`` similarity block of the blocked path (up to four alive at once)
INFO_NCE_BLOCK_ELEMENTS = 2**22


def info_nce_block_rows(num_rows: int) -> int:
    """Rows per block of :func:`info_nce`'s blocked path on ``num_rows`` rows; ``0`` where it
    takes the dense path."""
    if num_rows <= INFO_NCE_DENSE_ROWS:
        return 0
    return max(1, INFO_NCE_BLOCK_ELEMENTS // num_rows)


def info_nce_bytes(num_rows: int, itemsize: int) -> int:
    """Peak bytes of :func:`info_nce`'s similarities on ``num_rows`` rows of ``itemsize``-byte
    elements, forward and backward: eight ``N x N`` matrices on the dense path (measured: about
    7.5 for N of 3000 to 6000), four ``rows x N`` blocks on the blocked one."""
    block = info_nce_block_rows(num_rows)
    return (8 * num_rows if block == 0 else 4 * block) * num_rows * itemsize


def info_nce(z1: Tensor, z2: Tensor, tau: float = 0.5, block_rows: int | None = None) -> Tensor:
    """GRACE's symmetric InfoNCE with intra- and inter-view negatives (Zhu et al., 2020).

    z1, z2: ``(N, D)``; row ``i`` of ``z1`` is the positive of row ``i`` of ``z2``. Each row's
    ``2N - 2`` negatives are the other rows of its own view and of the other view; returns the
    mean over both directions of ``-log(exp(s_ii/τ) / (Σ_j exp(s_ij/τ) + Σ_{j≠i} exp(r_ij/τ)))``
    with inter-view cosines ``s`` and intra-view cosines ``r``.

    Up to :data:`INFO_NCE_DENSE_ROWS` rows the three ``N x N`` similarity matrices are computed
    whole; above, :func:`info_nce_block_rows` rows at a time, forward and again in the
    backward, so the memory grows as ``N`` and not ``N²`` (the same loss and gradient up to
    rounding). ``block_rows`` overrides the choice: ``0`` for the whole matrices, ``k`` for
    blocks of ``k`` rows.
    """
    h1, h2 = F.normalize(z1, dim=1), F.normalize(z2, dim=1)
    block = info_nce_block_rows(h1.shape[0]) if block_rows is None else block_rows
    if block > 0:
        denom1, denom2 = _InfoNCEDenominators.apply(h1, h2, tau, block)
        pos = (h1 * h2).sum(1) / tau  # log exp(s_ii/τ)
        return 0.5 * (denom1.log() + denom2.log()).mean() - pos.mean()
    # The temperature scales the (N, D) rows before the products rather than the (N, N)
    # products, and the inter-view matrix is computed once: view 2's inter-view sums are the
    # column sums of view 1's (s is symmetric in the views). The same terms as two separate
    # one-sided passes, for three n x n products and exponentials instead of four.
    q1, q2 = h1 / tau, h2 / tau
    between = torch.exp(q1 @ h2.t())
    refl1 = torch.exp(q1 @ h1.t())
    refl2 = torch.exp(q2 @ h2.t())
    pos = between.diag()
    denom1 = refl1.sum(1) + between.sum(1) - refl1.diag()
    denom2 = refl2.sum(1) + between.sum(0) - refl2.diag()
    return 0.5 * (-torch.log(pos / denom1) - torch.log(pos / denom2)).mean()


class _InfoNCEDenominators(torch.autograd.Function):
    """The denominators of :func:`info_nce` for each view's anchors, ``(N,)`` and ``(N,)``,
    from unit rows ``h1, h2`` ``(N, D)``, ``block`` rows of the similarity matrices at a time.

    Forward keeps only ``h1`` and ``h2``; backward recomputes each block's exponentials and
    takes the gradient through both of a similarity's rows at once: with ``g`` the
    denominators' gradients and ``e_ij = exp(h_i · h'_j / τ)``, a similarity adds
    ``w_ij · h'_j / τ`` to ``h_i``'s gradient and ``w_ij · h_i / τ`` to ``h'_j``'s, where
    ``w_ij`` is ``g1_i · e_ij`` (view 1's own similarities), ``g2_i · e_ij`` (view 2's) or
    ``(g1_i + g2_j) · e_ij`` (the inter-view ones, in both views' denominators).
    """

    @staticmethod
    def forward(ctx: Any, h1: Tensor, h2: Tensor, tau: float, block: int) -> tuple[Tensor, Tensor]:
        n = h1.shape[0]
        q1, q2 = h1 / tau, h2 / tau
        denom1, denom2, columns = h1.new_empty(n), h1.new_empty(n), h1.new_zeros(n)
        for start in range(0, n, block):
            rows = slice(start, min(start + block, n))
            own = torch.arange(rows.stop - start, device=h1.device)
            between = torch.exp(q1[rows] @ h2.t())
            columns += between.sum(0)  # view 2's inter-view sums
            refl = torch.exp(q1[rows] @ h1.t())
            denom1[rows] = refl.sum(1) - refl[own, own + start] + between.sum(1)
            del between, refl
            refl = torch.exp(q2[rows] @ h2.t())
            denom2[rows] = refl.sum(1) - refl[own, own + start]
        denom2 += columns
        ctx.save_for_backward(h1, h2)
        ctx.tau, ctx.block = tau, block
        return denom1, denom2

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, g1: Tensor, g2: Tensor) -> tuple[Tensor, Tensor, None, None]:
        h1, h2 = ctx.saved_tensors
        tau, block, n = ctx.tau, ctx.block, h1.shape[0]
        q1, q2 = h1 / tau, h2 / tau
        dh1, dh2 = torch.zeros_like(h1), torch.zeros_like(h2)
        for start in range(0, n, block):
            rows = slice(start, min(start + block, n))
            own = torch.arange(rows.stop - start, device=h1.device)
            w = torch.exp(q1[rows] @ h1.t()).mul_(g1[rows, None])
            w[own, own + start] = 0  # an anchor is not its own negative
            dh1[rows] += w @ q1
            dh1 += w.t() @ q1[rows]
            w = torch.exp(q1[rows] @ h2.t()).mul_(g1[rows, None] + g2[None, :])
            dh1[rows] += w @ q2
            dh2 += w.t() @ q1[rows]
            w = torch.exp(q2[rows] @ h2.t()).mul_(g2[rows, None])
            w[own, own + start] = 0
            dh2[rows] += w @ q2
            dh2 += w.t() @ q2[rows]
        return dh1, dh2, None, None


def info_nce_terms(
    z1: Tensor,
    z2: Tensor,
    tau: float = 0.5,
    anchors: slice | None = None,
    sum_columns: Callable[[Tensor], Callable[[], Tensor]] | None = None,
) -> Tensor:
    """The terms of :func:`info_nce` of the anchor rows ``anchors`` (default: all), each the
    mean of its two directions; their mean over all rows is :func:`info_nce`.

    Every anchor is compared with all ``N`` rows of both views. Without ``sum_columns`` an
    anchor range of ``A`` rows costs four ``A x N`` products and exponentials. On several
    processes, each holding its own range of anchors, ``sum_columns`` starts the sum over
    processes of a length-``N`` vector and returns the function that collects it: the view-2
    anchors' inter-view sums are then the column sums of the view-1 anchors' inter-view
    matrix, summed over every process's rows, so each process computes three ``A x N``
    products (``3N²`` in all over the processes, as :func:`info_nce` in one) and the two
    intra-view ones while the sums travel.

    Returns:
        ``(A,)`` terms.
    """
    rows = slice(0, z1.shape[0]) if anchors is None else anchors
    h1, h2 = F.normalize(z1, dim=1), F.normalize(z2, dim=1)
    q1, q2 = h1[rows] / tau, h2[rows] / tau
    between1 = torch.exp(q1 @ h2.t())
    if sum_columns is None:
        inter2 = torch.exp(q2 @ h1.t()).sum(1)
    else:
        collect = sum_columns(between1.sum(0))
    refl1, refl2 = torch.exp(q1 @ h1.t()), torch.exp(q2 @ h2.t())
    if sum_columns is not None:
        inter2 = collect()[rows]
    own = torch.arange(refl1.shape[0], device=z1.device)
    cols = own + rows.start
    pos = between1[own, cols]
    denom1 = refl1.sum(1) + between1.sum(1) - refl1[own, cols]
    denom2 = refl2.sum(1) + inter2 - refl2[own, cols]
    return 0.5 * (-torch.log(pos / denom1) - torch.log(pos / denom2))


def bootstrap_cosine_terms(p: Tensor, z: Tensor) -> Tensor:
    """BYOL/BGRL regression term ``2 - 2 cos(p_i, sg(z_i))`` of each row; p, z: ``(N, D)``."""
    return 2 - 2 * F.cosine_similarity(p, z.detach(), dim=-1)


def bootstrap_cosine(p: Tensor, z: Tensor) -> Tensor:
    """BYOL/BGRL regression loss ``2 - 2 cos(p, sg(z))`` averaged over rows; p, z: ``(N, D)``."""
    return bootstrap_cosine_terms(p, z).mean()


def dgi_bce_terms(pos_logits: Tensor, neg_logits: Tensor) -> Tensor:
    """DGI's binary cross-entropy per node: its real term (label 1) plus its corrupted term
    (label 0); the mean over nodes is :func:`dgi_bce`. Logits ``(N,)`` → ``(N,)``."""
    return F.binary_cross_entropy_with_logits(
        pos_logits, torch.ones_like(pos_logits), reduction="none"
    ) + F.binary_cross_entropy_with_logits(
        neg_logits, torch.zeros_like(neg_logits), reduction="none"
    )


def dgi_bce(pos_logits: Tensor, neg_logits: Tensor) -> Tensor:
    """DGI's binary cross-entropy: real nodes labelled 1, corrupted nodes 0; logits ``(N,)``."""
    return F.binary_cross_entropy_with_logits(
        pos_logits, torch.ones_like(pos_logits)
    ) + F.binary_cross_entropy_with_logits(neg_logits, torch.zeros_like(neg_logits))


def simclr_nt_xent(z1: Tensor, z2: Tensor, tau: float = 0.5) -> Tensor:
    """SimCLR's ``2N`` normalized-temperature cross-entropy (Chen et al., ICML 2020).

    The ``2N`` projections are L2-normalised; each row's positive is the other view of the same
    image and its ``2N - 2`` negatives are every other row of both views. Computed as a
    cross-entropy over cosine logits ``/ tau`` (log-sum-exp, stable for small ``tau``).

    z1, z2: ``(N, D)``; row ``i`` of ``z1`` is the positive of row ``i`` of ``z2``. Returns the
    mean over the ``2N`` rows.
    """
    if z1.shape != z2.shape or z1.ndim != 2:
        raise ValueError(
            f"simclr_nt_xent needs two (N, D) tensors of the same shape, got "
            f"{tuple(z1.shape)} and {tuple(z2.shape)}"
        )
    n = z1.shape[0]
    z = F.normalize(torch.cat([z1, z2], dim=0), dim=1)
    logits = z @ z.t() / tau
    logits = logits.masked_fill(torch.eye(2 * n, dtype=torch.bool, device=z.device), -torch.inf)
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
    return F.cross_entropy(logits, targets)


def simclr_nt_xent_terms(
    z1: Tensor, z2: Tensor, tau: float = 0.5, anchors: slice | None = None
) -> Tensor:
    """The terms of :func:`simclr_nt_xent` of the pairs ``anchors`` (default: all): pair ``i``'s
    term is the mean of its two rows' cross-entropies (``z1_i`` against all ``2N`` rows, and
    ``z2_i``), so their mean over all pairs is :func:`simclr_nt_xent`. ``A`` anchors cost a
    ``2A x 2N`` product instead of ``2N x 2N``.

    Returns:
        ``(A,)`` terms.
    """
    n = z1.shape[0]
    rows = slice(0, n) if anchors is None else anchors
    z = F.normalize(torch.cat([z1, z2], dim=0), dim=1)
    own = torch.arange(rows.start, rows.stop, device=z.device)
    mine = torch.cat([own, own + n])
    logits = z[mine] @ z.t() / tau
    logits[torch.arange(mine.numel(), device=z.device), mine] = -torch.inf
    targets = torch.cat([own + n, own])
    ce = F.cross_entropy(logits, targets, reduction="none")
    return 0.5 * (ce[: own.numel()] + ce[own.numel() :])


def _check_graph_views(z1: Tensor, z2: Tensor) -> None:
    if z1.shape != z2.shape or z1.ndim != 2:
        raise ValueError(
            f"z1 and z2 must both be (G, D), got {tuple(z1.shape)} and {tuple(z2.shape)}"
        )
    if z1.size(0) < 2:
        raise ValueError(
            f"graphcl_nt_xent needs at least 2 graphs per batch (negatives come from the "
            f"other graphs), got {z1.size(0)}"
        )


def graphcl_nt_xent(z1: Tensor, z2: Tensor, tau: float = 0.2) -> Tensor:
    """GraphCL's cross-view NT-Xent, symmetrised (You et al., NeurIPS 2020).

    Unlike :func:`simclr_nt_xent`, the negatives of a row are only the other graphs of the
    *other* view, and, as in GraphCL's reference code, the positive is left out of the
    denominator: ``-log(exp(s_ii/τ) / Σ_{j≠i} exp(s_ij/τ))`` with cosine similarities
    ``s_ij = cos(z1_i, z2_j)``, averaged over rows and both directions.

    Args:
        z1: ``(G, D)`` projections of the first view; row ``i`` is graph ``i``.
        z2: ``(G, D)`` projections of the second view, in the same graph order.
        tau: temperature (default: ``0.2``).

    Returns:
        A scalar; needs ``G >= 2`` (the negatives come from the other graphs).
    """
    _check_graph_views(z1, z2)
    sim = F.normalize(z1, dim=1) @ F.normalize(z2, dim=1).t() / tau
    pos = sim.diagonal()
    eye = torch.eye(sim.size(0), dtype=torch.bool, device=sim.device)

    def one_side(s: Tensor) -> Tensor:
        return (torch.logsumexp(s.masked_fill(eye, -math.inf), dim=1) - pos).mean()

    return 0.5 * (one_side(sim) + one_side(sim.t()))


def graphcl_nt_xent_terms(
    z1: Tensor, z2: Tensor, tau: float = 0.2, anchors: slice | None = None
) -> Tensor:
    """The terms of :func:`graphcl_nt_xent` of the graphs ``anchors`` (default: all): graph
    ``i``'s term is the mean of its two directions (``z1_i`` against every ``z2_j``, and ``z2_i``
    against every ``z1_j``), so their mean over all graphs is :func:`graphcl_nt_xent`.

    Returns:
        ``(A,)`` terms; needs ``G >= 2``.
    """
    _check_graph_views(z1, z2)
    rows = slice(0, z1.shape[0]) if anchors is None else anchors
    h1, h2 = F.normalize(z1, dim=1), F.normalize(z2, dim=1)
    forward, backward = h1[rows] @ h2.t() / tau, h2[rows] @ h1.t() / tau
    own = torch.arange(forward.shape[0], device=z1.device)
    cols = own + rows.start
    pos = forward[own, cols]
    mask = torch.zeros_like(forward, dtype=torch.bool)
    mask[own, cols] = True

    def one_side(s: Tensor) -> Tensor:
        return torch.logsumexp(s.masked_fill(mask, -math.inf), dim=1) - pos

    return 0.5 * (one_side(forward) + one_side(backward))


def dino_cross_entropy(
    student_logits: Sequence[Tensor], teacher_probs: Sequence[Tensor], student_temp: float = 0.1
) -> Tensor:
    """DINO's cross-view cross-entropy ``H(P_teacher(view a), P_student(view b))``, a ≠ b
    (Caron et al., ICCV 2021), given teacher probabilities that are already centred and
    sharpened.

    Args:
        student_logits: ``V`` tensors ``(N, K)`` of student prototype scores, one per view.
        teacher_probs: ``T <= V`` tensors ``(N, K)`` of teacher probabilities, in the same view
            order as the first ``T`` student views; no gradient flows into them.
        student_temp: temperature of the student softmax (default: ``0.1``).

    Returns:
        ``-Σ_k q_k log softmax(s / student_temp)_k`` averaged over rows, then over every
        (teacher view, student view) pair of different views.
    """
    return dino_cross_entropy_terms(student_logits, teacher_probs, student_temp).mean()


def dino_cross_entropy_terms(
    student_logits: Sequence[Tensor], teacher_probs: Sequence[Tensor], student_temp: float = 0.1
) -> Tensor:
    """The per-row terms of :func:`dino_cross_entropy` (each row's cross-entropy averaged over
    the pairs of different views), whose mean is the loss: a row needs no other row, so on
    several processes each computes its own rows' terms. Returns ``(N,)``."""
    # one log-softmax per student view, shared by every teacher view it is paired with
    log_probs = [F.log_softmax(s / student_temp, dim=-1) for s in student_logits]
    total = student_logits[0].new_zeros(student_logits[0].shape[0])
    terms = 0
    for a, q in enumerate(teacher_probs):
        for b, logp in enumerate(log_probs):
            if a == b:
                continue
            total = total - (q.detach() * logp).sum(-1)
            terms += 1
    if terms == 0:
        raise ValueError(f"dino_cross_entropy needs at least two views, got {len(student_logits)}")
    return total / terms


def dino_loss(
    student: list[Tensor],
    teacher: list[Tensor],
    center: Tensor,
    student_temp: float = 0.1,
    teacher_temp: float = 0.04,
) -> Tensor:
    """DINO's loss from teacher logits (Caron et al., ICCV 2021): centre the teacher logits,
    sharpen them with ``teacher_temp``, then :func:`dino_cross_entropy` with the student.

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
    return dino_loss_terms(student, teacher, center, student_temp, teacher_temp).mean()


def dino_loss_terms(
    student: list[Tensor],
    teacher: list[Tensor],
    center: Tensor,
    student_temp: float = 0.1,
    teacher_temp: float = 0.04,
) -> Tensor:
    """The per-row terms of :func:`dino_loss`, whose mean is the loss. Returns ``(N,)``."""
    if not teacher or len(student) < 2:
        raise ValueError(
            f"dino_loss needs >= 1 teacher view and >= 2 student views, got "
            f"{len(teacher)} and {len(student)}"
        )
    targets = [F.softmax((t.detach() - center) / teacher_temp, dim=-1) for t in teacher]
    return dino_cross_entropy_terms(student, targets, student_temp)
