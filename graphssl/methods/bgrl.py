"""BGRL: bootstrapped graph latents."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.nn.inits import reset

from graphssl.methods.base import OptimizerFactory, SchedulerFactory, linear_widths
from graphssl.methods.collective import PendingCount, global_mean, world_size
from graphssl.methods.losses import bootstrap_cosine, bootstrap_cosine_terms
from graphssl.methods.momentum import MomentumMethod
from graphssl.models.augment import GraphAugment, edge_and_feature
from graphssl.models.encode import encode
from graphssl.models.heads import MLPHead


class BGRL(MomentumMethod):
    """Bootstrapped Graph Latents (Thakoor et al., ICLR 2022, https://arxiv.org/abs/2102.06514).

    An online encoder + predictor regresses the target encoder's embedding of another view; the
    target is an exponential moving average of the online encoder
    (:class:`~graphssl.methods.momentum.MomentumMethod`: built, scheduled and updated there).
    Evaluation uses the online encoder; ``encoders()`` names ``"online"`` (also
    ``"encoder"``) and ``"target"``.

    Args:
        encoder: online GNN mapping ``(x, edge_index)`` to ``(N, D)``; the target is a copy.
        optimizer: partial optimizer constructor.
        augment1: first view (default: drop edges 0.3, mask features 0.3).
        augment2: second view (default: drop edges 0.2, mask features 0.4).
        predictor_hidden: hidden size of the predictor MLP (default: ``512``).
        momentum: base EMA momentum of the target, annealed to 1 (default: ``0.99``).
        scheduler: partial learning-rate scheduler constructor; the reference code anneals
            along a cosine to 0 after a linear warm-up over 1000 of 10000 epochs
            (:class:`~graphssl.training.schedules.CosineLR` with ``warmup=0.1``)
            (default: ``None``, a constant learning rate).
        predictor_batch_norm: a BatchNorm in the predictor's hidden layer, as BYOL's; the BGRL
            reference predictor is ``Linear → PReLU → Linear`` without one (default: ``True``).
        reinit_target: draw the target encoder's initial weights afresh instead of copying the
            online encoder's, as the reference code does (default: ``False``).
    """

    target: nn.Module  # set by add_target

    def __init__(
        self,
        encoder: nn.Module,
        optimizer: OptimizerFactory | None = None,
        augment1: GraphAugment | None = None,
        augment2: GraphAugment | None = None,
        predictor_hidden: int = 512,
        momentum: float = 0.99,
        scheduler: SchedulerFactory | None = None,
        predictor_batch_norm: bool = True,
        reinit_target: bool = False,
    ) -> None:
        super().__init__(optimizer, scheduler, momentum)
        self.online = encoder
        self.add_target("target", follows="online")
        if reinit_target:
            with torch.no_grad():  # each subtree that can reset itself draws once
                reset(self.target)
        dim = int(encoder.out_channels)  # type: ignore[arg-type]
        self.predictor = MLPHead(dim, predictor_hidden, dim, batch_norm=predictor_batch_norm)
        self.augment1 = augment1 or edge_and_feature(0.3, 0.3)
        self.augment2 = augment2 or edge_and_feature(0.2, 0.4)

    #: one online pass per view (the target's passes keep no graph for backward)
    encoder_passes = 2

    def head_width(self) -> int:
        widths = linear_widths(self.predictor)
        return sum(widths) + widths[0]  # the BatchNorm of the hidden layer

    forward_encoder = "online"  # forward() is encode(self.online, batch)
    #: the mean over the global batch; the predictor's BatchNorm is synchronised by the
    #: trainer and the target follows identical online weights on every rank
    supports_distributed = True

    def forward(self, batch: Data) -> Tensor:
        return encode(self.online, batch, seeds_only=True)

    def loss(self, batch: Data) -> dict[str, Tensor]:
        v1, v2 = self.augment1(batch), self.augment2(batch)
        n = int(getattr(batch, "batch_size", batch.num_nodes))
        rows = PendingCount(n, batch.x.device)  # over every rank, summed while this one encodes
        h1 = encode(self.online, v1, seeds_only=True)[:n]  # seeds only
        h2 = encode(self.online, v2, seeds_only=True)[:n]
        # on several processes the predictor's BatchNorm statistics of both views are exchanged
        # while the target encodes them
        (p1, p2), targets = self.predictor.views([h1, h2], lambda: self._targets(v1, v2, n))
        assert targets is not None
        t1, t2 = targets
        if world_size() == 1:
            return {"loss": bootstrap_cosine(p1, t2) + bootstrap_cosine(p2, t1)}
        # on several processes: each row's terms need only its own prediction and target, so
        # the loss is their mean over the global batch (the rows counted above) without
        # gathering any rows
        terms = bootstrap_cosine_terms(p1, t2) + bootstrap_cosine_terms(p2, t1)
        return {"loss": global_mean(terms, count=rows.wait())}

    @torch.no_grad()
    def _targets(self, v1: Data, v2: Data, n: int) -> tuple[Tensor, Tensor]:
        """The target encoder's seed embeddings of both views, without a graph for backward."""
        return (
            encode(self.target, v1, seeds_only=True)[:n],
            encode(self.target, v2, seeds_only=True)[:n],
        )
