"""Shared base of the image methods (SimCLR, BYOL, DINO, supervised).

Image batches come from :class:`~graphssl.data.images.ImageDataModule`: training batches are
``(view_1, ..., view_V, y)`` (global views first, then DINO's local crops, labels last) and
evaluation batches ``(x, y)``. Every image method evaluates a *backbone*: ``forward(batch)``
returns its pooled features ``[B, D]``, never projector outputs (solo-learn's convention).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from graphssl.methods.base import OptimizerFactory, SchedulerFactory, SSLMethod

__all__ = ["ImageSSLMethod", "images_of", "views_of"]


def images_of(batch: Any) -> Tensor:
    """The images of an evaluation batch: ``(x, y)``, ``[x]`` or ``x`` itself."""
    if isinstance(batch, Tensor):
        return batch
    if isinstance(batch, (tuple, list)) and batch and isinstance(batch[0], Tensor):
        return batch[0]
    raise TypeError(
        f"expected an image batch: a tensor [B, C, H, W] or a tuple (x, y), got "
        f"{type(batch).__name__}"
    )


def views_of(batch: Any, min_views: int = 1) -> tuple[list[Tensor], Tensor | None]:
    """``(views, labels)`` of a training batch ``(view_1, ..., view_V, y)``.

    A bare tensor is one view without labels.

    Raises:
        ValueError: when the batch has fewer than ``min_views`` views.
    """
    if isinstance(batch, Tensor):
        views, labels = [batch], None
    elif isinstance(batch, (tuple, list)) and len(batch) >= 2:
        views, labels = list(batch[:-1]), batch[-1]
    else:
        raise TypeError(
            f"expected a training batch (view_1, ..., view_V, y), got {type(batch).__name__}"
        )
    if len(views) < min_views:
        raise ValueError(
            f"this method needs >= {min_views} views per image, the batch has "
            f"{len(views)}; set dataset.num_views={min_views}"
        )
    return views, labels


class ImageSSLMethod(SSLMethod):
    """Base of image methods: trains on image batches, evaluates :attr:`backbone`.

    Subclasses set :attr:`backbone` (the module ``forward`` evaluates) and implement ``loss``.

    Args:
        optimizer: partial optimizer constructor.
        scheduler: partial learning-rate scheduler constructor, stepped after every optimizer
            step (default: ``None``, a constant learning rate).
    """

    supports_mini_batch = False  # NeighborLoader mini-batches are a graph notion
    #: image methods embed images, not graphs (one row per image all the same)
    graph_level = False
    backbone: nn.Module

    def __init__(
        self,
        optimizer: OptimizerFactory | None = None,
        scheduler: SchedulerFactory | None = None,
    ) -> None:
        super().__init__(optimizer, scheduler)

    def forward(self, batch: Any) -> Tensor:
        """Backbone features ``[B, D]`` of an evaluation batch ``(x, y)`` or images ``x``."""
        out: Tensor = self.backbone(images_of(batch))
        return out

    @staticmethod
    def _encode_views(encoder: nn.Module, views: Sequence[Tensor]) -> list[Tensor]:
        """Encode views, same-size views in one forward (as the reference implementations)."""
        out: list[Tensor] = []
        i = 0
        while i < len(views):
            j = i
            while j < len(views) and views[j].shape == views[i].shape:
                j += 1
            if j - i == 1:
                out.append(encoder(views[i]))
            else:
                out.extend(encoder(torch.cat(list(views[i:j]))).chunk(j - i))
            i = j
        return out
