"""GraphDINO: DINO-style self-distillation of node embeddings."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data

from graphssl.methods.base import OptimizerFactory, SchedulerFactory, linear_widths
from graphssl.methods.collective import global_mean, global_row_mean, world_size
from graphssl.methods.losses import dino_cross_entropy_terms
from graphssl.methods.momentum import MomentumMethod, check_unit_interval
from graphssl.models.augment import GraphAugment, edge_and_feature
from graphssl.models.encode import encode
from graphssl.models.heads import DINOHead


class GraphDINO(MomentumMethod):
    """GraphDINO: DINO (Caron et al., ICCV 2021, https://arxiv.org/abs/2104.14294) on graphs.

    The student (encoder + :class:`DINOHead` with many prototypes) sees two augmented views;
    the teacher, an exponential moving average of the student, sees the same views. The
    teacher's scores are centered (an EMA of their batch mean, against collapse to one
    prototype) and sharpened (``teacher_temp < student_temp``, against a uniform output); the
    loss is the cross-entropy between teacher and student distributions of different views
    (:func:`~graphssl.methods.losses.dino_cross_entropy`). The teacher is built, scheduled and
    updated by :class:`~graphssl.methods.momentum.MomentumMethod`, the center here. Evaluation
    uses the teacher encoder; ``encoders()`` names ``"teacher"`` and ``"student"``.

    Args:
        encoder: student GNN mapping ``(x, edge_index)`` to ``(N, D)``; the teacher is a copy.
        optimizer: partial optimizer constructor.
        augment1: first view (default: drop edges 0.2, mask features 0.3).
        augment2: second view (default: drop edges 0.4, mask features 0.4).
        num_prototypes: output size of the head (default: ``1024``).
        head_hidden: hidden size of the head (default: ``512``).
        bottleneck: bottleneck size of the head (default: ``128``).
        student_temp: student softmax temperature (default: ``0.1``).
        teacher_temp: teacher softmax temperature, below ``student_temp`` (default: ``0.04``).
        center_momentum: EMA momentum of the center (default: ``0.9``).
        momentum: base EMA momentum of the teacher, annealed to 1 (default: ``0.99``).
        scheduler: partial learning-rate scheduler constructor, stepped after every optimizer
            step (default: ``None``, a constant learning rate).
    """

    roles = ("student", "teacher")
    evaluated_role = "teacher"
    #: ``encoders()`` names the teacher and the student only
    names_encoder = False
    teacher: nn.Module  # set by add_target
    teacher_head: DINOHead  # set by add_target: a copy of student_head
    supports_distributed = True  # a mean over the global batch; the centre from its sums

    def __init__(
        self,
        encoder: nn.Module,
        optimizer: OptimizerFactory | None = None,
        augment1: GraphAugment | None = None,
        augment2: GraphAugment | None = None,
        num_prototypes: int = 1024,
        head_hidden: int = 512,
        bottleneck: int = 128,
        student_temp: float = 0.1,
        teacher_temp: float = 0.04,
        center_momentum: float = 0.9,
        momentum: float = 0.99,
        scheduler: SchedulerFactory | None = None,
    ) -> None:
        super().__init__(optimizer, scheduler, momentum)
        if not 0 < teacher_temp <= student_temp:
            raise ValueError(
                f"temperatures must satisfy 0 < teacher_temp <= student_temp (the teacher is "
                f"sharpened), got teacher_temp={teacher_temp}, student_temp={student_temp}"
            )
        check_unit_interval("center_momentum", center_momentum)
        self.student = encoder
        dim = int(encoder.out_channels)  # type: ignore[arg-type]
        self.student_head = DINOHead(dim, head_hidden, bottleneck, num_prototypes)
        self.add_target("teacher", follows="student")
        self.add_target("teacher_head", follows="student_head")
        self.register_buffer("center", torch.zeros(1, num_prototypes))
        self.augment1 = augment1 or edge_and_feature(0.2, 0.3)
        self.augment2 = augment2 or edge_and_feature(0.4, 0.4)
        self.student_temp = student_temp
        self.teacher_temp = teacher_temp
        self.center_momentum = center_momentum
        self._batch_center: Tensor | None = None

    #: one student pass per view
    encoder_passes = 2

    def head_width(self) -> int:
        # the head's hidden layers and bottleneck, its prototype scores and their log-softmax
        prototypes = int(self.center.size(1))  # type: ignore[operator]
        return sum(linear_widths(self.student_head)) + 2 * prototypes

    forward_encoder = "teacher"  # forward() is encode(self.teacher, batch)

    def forward(self, batch: Data) -> Tensor:
        return encode(self.teacher, batch, seeds_only=True)

    def loss(self, batch: Data) -> dict[str, Tensor]:
        n = int(getattr(batch, "batch_size", batch.num_nodes))  # seeds only in mini-batches
        views = [self.augment1(batch), self.augment2(batch)]
        hidden = [encode(self.student, v, seeds_only=True)[:n] for v in views]

        @torch.no_grad()
        def teacher_codes() -> list[Tensor]:
            return [encode(self.teacher, v, seeds_only=True)[:n] for v in views]

        # both views through each head at once: on several processes each BatchNorm layer
        # exchanges both views' statistics together, the first while the teacher encodes
        student, codes = self.student_head.views(hidden, teacher_codes)
        assert codes is not None
        with torch.no_grad():
            teacher, _ = self.teacher_head.views(codes)
            center: Tensor = self.center  # type: ignore[assignment]
            probs = [F.softmax((t - center) / self.teacher_temp, dim=-1) for t in teacher]
            entropy = torch.stack([-(q * q.clamp_min(1e-12).log()).sum(-1) for q in probs])
        terms = dino_cross_entropy_terms(student, probs, self.student_temp)
        if world_size() == 1:
            self._batch_center = torch.cat(teacher).mean(dim=0, keepdim=True)
            return {"loss": terms.mean(), "teacher_entropy": entropy.mean()}
        # on several processes: a row's terms need no other row, so each rank computes its own;
        # the centre is the global batch's mean teacher score, identical on every rank
        self._batch_center, rows = global_row_mean(teacher)
        return {
            "loss": global_mean(terms, count=rows),
            "teacher_entropy": global_mean(entropy.mean(0), count=rows),
        }

    def on_after_optimizer_step(self, step: int, max_steps: int) -> None:
        """EMA update of the teacher, then of the center towards the last batch's mean score."""
        super().on_after_optimizer_step(step, max_steps)
        if self._batch_center is not None:
            center: Tensor = self.center  # type: ignore[assignment]
            center.mul_(self.center_momentum).add_(
                self._batch_center, alpha=1 - self.center_momentum
            )
            self._batch_center = None
