"""DINO: self-distillation with no labels."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.parametrizations import weight_norm

from graphssl.methods.base import OptimizerFactory
from graphssl.methods.bgrl import cosine_ema_momentum, ema_update
from graphssl.methods.image import ImageSSLMethod, views_of
from graphssl.methods.losses import dino_loss


class DINOHead(nn.Module):
    """DINO's projection head: 3-layer MLP (GELU) → L2-normalised bottleneck → weight-normalised
    linear layer to ``out_dim`` prototypes (its norm fixed to 1 when ``norm_last_layer``).

    Args:
        in_dim: backbone feature size.
        out_dim: number of prototypes ``K`` (default: ``4096``).
        hidden_dim: MLP hidden size (default: ``512``).
        bottleneck_dim: MLP output size (default: ``128``).
        norm_last_layer: freeze the norm of the last layer's weight to 1 (default: ``True``).
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: int = 4096,
        hidden_dim: int = 512,
        bottleneck_dim: int = 128,
        norm_last_layer: bool = True,
    ) -> None:
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(in_dim, hidden_dim),
            nn.GELU(),
            nn.Linear(hidden_dim, hidden_dim),
            nn.GELU(),
            nn.Linear(hidden_dim, bottleneck_dim),
        )
        for m in self.mlp:
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)
        self.last = weight_norm(nn.Linear(bottleneck_dim, out_dim, bias=False))
        g = self.last.parametrizations.weight.original0
        with torch.no_grad():
            g.fill_(1.0)
        g.requires_grad_(not norm_last_layer)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.last(F.normalize(self.mlp(x), dim=-1))
        return out


class DINO(ImageSSLMethod):
    """DINO (Caron et al., ICCV 2021, https://arxiv.org/abs/2104.14294).

    A student (backbone + :class:`DINOHead`) matches the teacher's centred and sharpened
    distribution over ``out_dim`` prototypes across views; the teacher is an exponential
    moving average of the student, and the centre a moving average of the teacher's outputs
    (centering and sharpening together prevent collapse). With multi-crop
    (``dataset.num_local_crops > 0``) the student also sees the local crops while the teacher
    sees the two global views only. Evaluation uses the teacher backbone.

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
    """

    center: Tensor

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
    ) -> None:
        super().__init__(optimizer)
        for key, value in (
            ("student_temp", student_temp),
            ("teacher_temp", teacher_temp),
            ("warmup_teacher_temp", warmup_teacher_temp),
        ):
            if value <= 0:
                raise ValueError(f"{key} must be > 0, got {value}")
        for key, value in (
            ("center_momentum", center_momentum),
            ("momentum", momentum),
            ("teacher_temp_warmup", teacher_temp_warmup),
        ):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{key} must be in [0, 1], got {value}")
        dim = int(encoder.out_channels)  # type: ignore[arg-type]
        self.student = encoder
        self.student_head = DINOHead(dim, out_dim, hidden_dim, bottleneck_dim, norm_last_layer)
        self.teacher = copy.deepcopy(encoder).requires_grad_(False)
        self.teacher_head = copy.deepcopy(self.student_head).requires_grad_(False)
        self.register_buffer("center", torch.zeros(1, out_dim))
        self.student_temp, self.teacher_temp = student_temp, teacher_temp
        self.warmup_teacher_temp = warmup_teacher_temp
        self.teacher_temp_warmup = teacher_temp_warmup
        self.center_momentum, self.momentum = center_momentum, momentum
        self._progress = 0.0  # fraction of the training steps done

    @property
    def backbone(self) -> nn.Module:  # type: ignore[override]
        """The evaluated backbone: the teacher (a property, so it is not registered twice)."""
        return self.teacher

    def encoders(self) -> dict[str, nn.Module]:
        return {"teacher": self.teacher, "student": self.student, "encoder": self.teacher}

    def trainable_parameters(self) -> Iterator[nn.Parameter]:
        yield from (p for p in self.student.parameters() if p.requires_grad)
        yield from (p for p in self.student_head.parameters() if p.requires_grad)

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
        loss = dino_loss(
            student, teacher, self.center, self.student_temp, self.current_teacher_temp()
        )
        with torch.no_grad():
            batch_center = torch.cat(teacher).mean(dim=0, keepdim=True)
            self.center.mul_(self.center_momentum).add_(
                batch_center, alpha=1 - self.center_momentum
            )
        return {"loss": loss}

    def on_after_optimizer_step(self, step: int, max_steps: int) -> None:
        self._progress = step / max(max_steps, 1)
        m = cosine_ema_momentum(step, max_steps, self.momentum)
        ema_update(self.teacher, self.student, m)
        ema_update(self.teacher_head, self.student_head, m)
