"""DINO: self-distillation with no labels."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from graphssl.methods.base import OptimizerFactory, SchedulerFactory
from graphssl.methods.collective import global_mean, global_row_mean, world_size
from graphssl.methods.image import ImageSSLMethod, views_of
from graphssl.methods.losses import dino_loss, dino_loss_terms
from graphssl.methods.momentum import MomentumMethod, check_unit_interval
from graphssl.models.heads import DINOHead


class DINO(MomentumMethod, ImageSSLMethod):
    """DINO (Caron et al., ICCV 2021, https://arxiv.org/abs/2104.14294).

    A student (backbone + :class:`DINOHead`) matches the teacher's centred and sharpened
    distribution over ``out_dim`` prototypes across views; the teacher is an exponential
    moving average of the student, and the centre a moving average of the teacher's outputs
    (centering and sharpening together prevent collapse). With multi-crop
    (``dataset.num_local_crops > 0``) the student also sees the local crops while the teacher
    sees the two global views only. The teacher is built, scheduled and updated by
    :class:`~graphssl.methods.momentum.MomentumMethod`. Evaluation uses the teacher backbone;
    ``encoders()`` names ``"teacher"`` (also ``"encoder"``) and ``"student"``.

    Args:
        encoder: student backbone mapping images to ``[B, D]``; the teacher is a copy.
        optimizer: partial optimizer constructor.
        out_dim: prototypes ``K`` (default: ``4096``).
        hidden_dim: head MLP hidden size (default: ``512``).
        bottleneck_dim: head bottleneck size (default: ``128``).
        student_temp: student softmax temperature (default: ``0.1``).
        teacher_temp: teacher softmax temperature after warm-up (default: ``0.04``).
        warmup_teacher_temp: teacher temperature at the start (default: ``0.04``).
        teacher_temp_warmup: fraction of the training steps over which the teacher
            temperature rises linearly from ``warmup_teacher_temp`` (default: ``0.0``).
        center_momentum: EMA momentum of the centre (default: ``0.9``).
        momentum: base EMA momentum of the teacher, annealed to 1 (default: ``0.996``).
        norm_last_layer: freeze the norm of the head's last layer (default: ``True``).
        scheduler: partial learning-rate scheduler constructor, stepped after every optimizer
            step (default: ``None``, a constant learning rate).
    """

    roles = ("student", "teacher")
    evaluated_role = "teacher"
    supports_distributed = True  # the loss covers the global batch (gather_rows)

    center: Tensor
    teacher: nn.Module  # set by add_target
    teacher_head: nn.Module

    def __init__(
        self,
        encoder: nn.Module,
        optimizer: OptimizerFactory | None = None,
        out_dim: int = 4096,
        hidden_dim: int = 512,
        bottleneck_dim: int = 128,
        student_temp: float = 0.1,
        teacher_temp: float = 0.04,
        warmup_teacher_temp: float = 0.04,
        teacher_temp_warmup: float = 0.0,
        center_momentum: float = 0.9,
        momentum: float = 0.996,
        norm_last_layer: bool = True,
        scheduler: SchedulerFactory | None = None,
    ) -> None:
        super().__init__(optimizer, scheduler, momentum)
        for key, value in (
            ("student_temp", student_temp),
            ("teacher_temp", teacher_temp),
            ("warmup_teacher_temp", warmup_teacher_temp),
        ):
            if value <= 0:
                raise ValueError(f"{key} must be > 0, got {value}")
        check_unit_interval("center_momentum", center_momentum)
        check_unit_interval("teacher_temp_warmup", teacher_temp_warmup)
        dim = int(encoder.out_channels)  # type: ignore[arg-type]
        self.student = encoder
        self.student_head = DINOHead(
            dim,
            hidden_channels=hidden_dim,
            bottleneck=bottleneck_dim,
            num_prototypes=out_dim,
            batch_norm=False,
            last_layer="weight_norm",
            norm_last_layer=norm_last_layer,
            trunc_normal_init=True,
        )
        self.add_target("teacher", follows="student")
        self.add_target("teacher_head", follows="student_head")
        self.register_buffer("center", torch.zeros(1, out_dim))
        self.student_temp, self.teacher_temp = student_temp, teacher_temp
        self.warmup_teacher_temp = warmup_teacher_temp
        self.teacher_temp_warmup = teacher_temp_warmup
        self.center_momentum = center_momentum
        self._progress = 0.0  # fraction of the training steps done

    @property
    def backbone(self) -> nn.Module:  # type: ignore[override]
        """The evaluated backbone: the teacher (a property, so it is not registered twice)."""
        return self.evaluated_encoder

    def current_teacher_temp(self) -> float:
        if self.teacher_temp_warmup <= 0 or self._progress >= self.teacher_temp_warmup:
            return self.teacher_temp
        frac = self._progress / self.teacher_temp_warmup
        return self.warmup_teacher_temp + frac * (self.teacher_temp - self.warmup_teacher_temp)

    def loss(self, batch: Any) -> dict[str, Tensor]:
        views, _ = views_of(batch, min_views=2)
        student = [self.student_head(h) for h in self._encode_views(self.student, views)]
        with torch.no_grad():
            teacher = [self.teacher_head(h) for h in self._encode_views(self.teacher, views[:2])]
        temps = (self.student_temp, self.current_teacher_temp())
        if world_size() == 1:
            loss = dino_loss(student, teacher, self.center, *temps)
            batch_center = torch.cat(teacher).mean(dim=0, keepdim=True)
        else:
            # on several processes: a row's terms need no other row, so each rank computes its
            # own; the centre is the global batch's mean teacher score (its sums and the row
            # count summed over ranks), identical on every rank
            batch_center, rows = global_row_mean(teacher)
            terms = dino_loss_terms(student, teacher, self.center, *temps)
            loss = global_mean(terms, count=rows)
        with torch.no_grad():
            self.center.mul_(self.center_momentum).add_(
                batch_center, alpha=1 - self.center_momentum
            )
        return {"loss": loss}

    def on_after_optimizer_step(self, step: int, max_steps: int) -> None:
        """Record the training progress (for the teacher-temperature warm-up), then update the
        teacher by EMA."""
        self._progress = step / max(max_steps, 1)
        super().on_after_optimizer_step(step, max_steps)
