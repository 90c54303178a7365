"""CCA-SSG: canonical-correlation-analysis-inspired self-supervision on graphs."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.data import Data

from graphssl.methods.base import OptimizerFactory, SchedulerFactory, SSLMethod
from graphssl.methods.collective import rank, shared_sum, world_size
from graphssl.models.augment import GraphAugment, edge_and_feature
from graphssl.models.encode import encode


def standardize(h: Tensor, eps: float = 1e-8) -> Tensor:
    """Zero mean, unit (unbiased) standard deviation per column; h: ``(N, D)`` → ``(N, D)``."""
    return (h - h.mean(dim=0)) / (h.std(dim=0) + eps)


def cca_ssg_loss(z1: Tensor, z2: Tensor, lambd: float = 1e-3) -> tuple[Tensor, Tensor, Tensor]:
    """CCA-SSG's objective on standardized embeddings z1, z2: ``(N, D)``.

    ``invariance = -tr(z1ᵀ z2) / N`` pulls the two views of every node together;
    ``decorrelation = ‖I - z1ᵀz1 / N‖²_F + ‖I - z2ᵀz2 / N‖²_F`` whitens each view so the
    dimensions carry different information. Returns ``(invariance + λ·decorrelation,
    invariance, decorrelation)``.
    """
    n, d = z1.shape
    c = z1.t() @ z2 / n
    c1 = z1.t() @ z1 / n
    c2 = z2.t() @ z2 / n
    eye = torch.eye(d, device=z1.device, dtype=z1.dtype)
    invariance = -torch.diagonal(c).sum()
    decorrelation = (eye - c1).pow(2).sum() + (eye - c2).pow(2).sum()
    return invariance + lambd * decorrelation, invariance, decorrelation


def cca_ssg_statistics(h1: Tensor, h2: Tensor, rank: int = 0, world: int = 1) -> Tensor:
    """This process's part of the sums from which :func:`cca_ssg_loss_from_sums` computes
    :func:`cca_ssg_loss` of the standardized views over every process's rows.

    h1, h2: this process's rows of the two views, ``(n_r, D)``. Returns one flat tensor, with
    gradient: a ``(world, 2D + 1)`` block that is zero except for row ``rank``, which holds
    ``n_r`` and the two views' column means, then the views' centred cross-products
    ``(h1 - μ1)ᵀ(h1 - μ1)`` and ``(h2 - μ2)ᵀ(h2 - μ2)`` (``D × D`` each) and the column sums
    of ``(h1 - μ1) ⊙ (h2 - μ2)`` (``D``; the invariance needs only the diagonal of the views'
    cross-correlation), each centred on this process's own means. Summed over processes, the
    block carries every process's means, from which the global means and the correction of
    the centred sums follow (Chan et al.'s pairwise combination): no raw second moments, so no
    cancellation when a column's mean is large against its spread.
    """
    n, d = h1.shape
    mu1 = h1.sum(dim=0) / max(n, 1)
    mu2 = h2.sum(dim=0) / max(n, 1)
    c1, c2 = h1 - mu1, h2 - mu2
    own = torch.cat([h1.new_tensor([float(n)]), mu1, mu2])
    width = 2 * d + 1
    means = torch.cat([own.new_zeros(rank * width), own, own.new_zeros((world - rank - 1) * width)])
    return torch.cat(
        [means, (c1.t() @ c1).flatten(), (c2.t() @ c2).flatten(), (c1 * c2).sum(dim=0)]
    )


def cca_ssg_loss_from_sums(
    sums: Tensor, dim: int, world: int, lambd: float = 1e-3, eps: float = 1e-8
) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`cca_ssg_loss` of :func:`standardize`'d views over every process's rows, from the
    sum over processes of each one's :func:`cca_ssg_statistics` (``world`` processes, ``dim``
    columns); equal to it up to float rounding."""
    d, width = dim, 2 * dim + 1
    means = sums[: world * width].view(world, width)
    counts, mu1_r, mu2_r = means[:, :1], means[:, 1 : d + 1], means[:, d + 1 :]
    n = counts.sum()
    dev1 = mu1_r - (counts * mu1_r).sum(dim=0) / n
    dev2 = mu2_r - (counts * mu2_r).sum(dim=0) / n
    s11, s22, s12 = sums[world * width :].split([d * d, d * d, d])
    s11 = s11.view(d, d) + dev1.t() @ (counts * dev1)
    s22 = s22.view(d, d) + dev2.t() @ (counts * dev2)
    s12 = s12 + (counts * dev1 * dev2).sum(dim=0)
    sd1 = (torch.diagonal(s11) / (n - 1)).sqrt() + eps
    sd2 = (torch.diagonal(s22) / (n - 1)).sqrt() + eps
    c1 = s11 / (n * torch.outer(sd1, sd1))
    c2 = s22 / (n * torch.outer(sd2, sd2))
    eye = torch.eye(d, device=sums.device, dtype=sums.dtype)
    invariance = -(s12 / (n * sd1 * sd2)).sum()
    decorrelation = (eye - c1).pow(2).sum() + (eye - c2).pow(2).sum()
    return invariance + lambd * decorrelation, invariance, decorrelation


class CCASSG(SSLMethod):
    """CCA-SSG (Zhang et al., NeurIPS 2021, https://arxiv.org/abs/2106.12484).

    Two views from the same augmentation distribution go through one shared encoder; the
    embeddings are standardized per dimension and trained with an invariance term plus ``λ``
    times a feature-decorrelation term (:func:`cca_ssg_loss`). No projector, no negatives;
    evaluation uses the encoder's (unstandardized) output.

    Args:
        encoder: GNN mapping ``(x, edge_index)`` to ``(N, D)``.
        optimizer: partial optimizer constructor.
        augment: the view distribution, sampled twice per step (default: drop edges 0.4, mask
            feature columns 0.1, the paper's Cora setting).
        lambd: weight ``λ`` of the decorrelation term (default: ``1e-3``).
        scheduler: partial learning-rate scheduler constructor, stepped after every optimizer
            step (default: ``None``, a constant learning rate).
    """

    def __init__(
        self,
        encoder: nn.Module,
        optimizer: OptimizerFactory | None = None,
        augment: GraphAugment | None = None,
        lambd: float = 1e-3,
        scheduler: SchedulerFactory | None = None,
    ) -> None:
        super().__init__(optimizer, scheduler)
        if lambd < 0:
            raise ValueError(f"lambd must be >= 0, got {lambd}")
        self.encoder = encoder
        self.augment = augment or edge_and_feature(0.4, 0.1)
        self.lambd = lambd

    #: one encoder pass per view
    encoder_passes = 2

    def head_width(self) -> int:
        return int(self.encoder.out_channels)  # type: ignore[arg-type]  # the standardized copy

    forward_encoder = "encoder"  # forward() is encode(self.encoder, batch)
    supports_distributed = True  # statistics over the global batch (cca_ssg_statistics)

    def encoders(self) -> dict[str, nn.Module]:
        return {"encoder": self.encoder}

    def forward(self, batch: Data) -> Tensor:
        return encode(self.encoder, batch, seeds_only=True)

    def loss(self, batch: Data) -> dict[str, Tensor]:
        n = int(getattr(batch, "batch_size", batch.num_nodes))  # seeds only in mini-batches
        h1 = encode(self.encoder, self.augment(batch), seeds_only=True)[:n]
        h2 = encode(self.encoder, self.augment(batch), seeds_only=True)[:n]
        if world_size() == 1:
            loss, inv, dec = cca_ssg_loss(standardize(h1), standardize(h2), self.lambd)
        else:
            # standardisation and correlations over the global batch, from each process's
            # sums: every process computes the same loss, from D × D numbers instead of rows
            world = world_size()
            sums = shared_sum(cca_ssg_statistics(h1, h2, rank(), world))
            loss, inv, dec = cca_ssg_loss_from_sums(sums, h1.shape[1], world, self.lambd)
        return {"loss": loss, "invariance": inv.detach(), "decorrelation": dec.detach()}
