"""Projection and prediction heads."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.parametrizations import weight_norm

__all__ = ["DINOHead", "MLPHead", "layers_on_views"]

T = TypeVar("T")


def layers_on_views(
    layers: Iterable[nn.Module], xs: Sequence[Tensor], meanwhile: Callable[[], T] | None = None
) -> tuple[list[Tensor], T | None]:
    """Each of ``layers`` in turn on every view in ``xs`` (views of one batch), and what
    ``meanwhile()`` returns: the outputs, BatchNorm running statistics included, of running
    ``layers`` on each view in turn, so every view is normalised with its own statistics.

    A BatchNorm whose statistics cover several processes and that can start them for several
    inputs at once (``start_views``, as the trainer's
    :class:`~graphssl.training.distributed.GatheredBatchNorm`) exchanges every view's
    statistics in one collective instead of one per view, and ``meanwhile`` runs during the
    first such exchange (after the layers, without one).
    """
    outs = list(xs)
    pending, extra = meanwhile, None
    for layer in layers:
        start = getattr(layer, "start_views", None)
        if start is None:
            outs = [layer(x) for x in outs]
            continue
        collect = start(outs)
        if pending is not None:
            extra, pending = pending(), None
        outs = collect()
    if pending is not None:
        extra = pending()
    return outs, extra


class MLPHead(nn.Module):
    """``Linear → [BatchNorm] → PReLU/ReLU → Linear``, the projector/predictor of GRACE and BGRL.

    Args:
        in_channels: input size.
        hidden_channels: hidden size.
        out_channels: output size.
        batch_norm: add a BatchNorm1d after the first layer (default: ``False``).
        act: ``"prelu"``, ``"relu"`` or ``"elu"`` (default: ``"prelu"``).
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        out_channels: int,
        batch_norm: bool = False,
        act: str = "prelu",
    ) -> None:
        super().__init__()
        acts = {"prelu": nn.PReLU, "relu": nn.ReLU, "elu": nn.ELU}
        if act not in acts:
            raise ValueError(f"act must be one of {sorted(acts)}, got {act!r}")
        layers: list[nn.Module] = [nn.Linear(in_channels, hidden_channels)]
        if batch_norm:
            layers.append(nn.BatchNorm1d(hidden_channels))
        layers += [acts[act](), nn.Linear(hidden_channels, out_channels)]
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)

    def views(
        self, xs: Sequence[Tensor], meanwhile: Callable[[], T] | None = None
    ) -> tuple[list[Tensor], T | None]:
        """The head on each of ``xs`` (views of one batch), as one call per view gives them,
        and what ``meanwhile()`` returns (see :func:`layers_on_views`)."""
        return layers_on_views(self.net, xs, meanwhile)


class DINOHead(nn.Module):
    """DINO's projection head (Caron et al., ICCV 2021): an MLP to a bottleneck,
    l2-normalisation, then scores against ``num_prototypes`` prototypes.
    ``(N, in_channels)`` → ``(N, num_prototypes)``.

    Two variants of the last layer:

    * ``"cosine"``: cosine scores against l2-normalised prototypes (a ``(K, bottleneck)``
      parameter, truncated-normal initialisation), every score in ``[-1, 1]`` (GraphDINO).
    * ``"weight_norm"``: DINO's reference weight-normalised linear layer, its gain fixed to one
      when ``norm_last_layer`` (image DINO).

    Args:
        in_channels: input size.
        hidden_channels: hidden size of the MLP (default: ``512``).
        bottleneck: size of the normalised bottleneck (default: ``128``).
        num_prototypes: output size ``K`` (default: ``1024``).
        num_layers: linear layers before the bottleneck output, GELU between (default: ``3``).
        batch_norm: BatchNorm1d after every hidden linear layer, as DINO's head for convnets
            (default: ``True``; nodes of one graph are similar, and batch statistics keep the
            scores of different nodes apart, against collapse to the uniform distribution).
        last_layer: ``"cosine"`` or ``"weight_norm"`` (default: ``"cosine"``).
        norm_last_layer: with ``"weight_norm"``, freeze the norm of the last layer's weight to 1
            (default: ``True``).
        trunc_normal_init: initialise the MLP's linear layers as DINO's reference code (weights
            truncated normal with std 0.02, biases 0) instead of PyTorch's default
            (default: ``False``).
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int = 512,
        bottleneck: int = 128,
        num_prototypes: int = 1024,
        num_layers: int = 3,
        batch_norm: bool = True,
        last_layer: str = "cosine",
        norm_last_layer: bool = True,
        trunc_normal_init: bool = False,
    ) -> None:
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        if last_layer not in ("cosine", "weight_norm"):
            raise ValueError(f"last_layer must be 'cosine' or 'weight_norm', got {last_layer!r}")
        if last_layer == "cosine" and not norm_last_layer:
            raise ValueError(
                "norm_last_layer=False frees the gain of a weight-normalised last layer; the "
                "'cosine' last layer has none, use last_layer='weight_norm'"
            )
        self.last_layer = last_layer
        sizes = [in_channels] + [hidden_channels] * (num_layers - 1) + [bottleneck]
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(itertools.pairwise(sizes)):
            layers.append(nn.Linear(a, b))
            if i < num_layers - 1:
                if batch_norm:
                    layers.append(nn.BatchNorm1d(b))
                layers.append(nn.GELU())
        self.mlp = nn.Sequential(*layers)
        if trunc_normal_init:
            for m in self.mlp:
                if isinstance(m, nn.Linear):
                    nn.init.trunc_normal_(m.weight, std=0.02)
                    nn.init.zeros_(m.bias)
        if last_layer == "weight_norm":
            self.last = weight_norm(nn.Linear(bottleneck, num_prototypes, bias=False))
            g = self.last.parametrizations.weight.original0
            with torch.no_grad():
                g.fill_(1.0)
            g.requires_grad_(not norm_last_layer)
        else:
            self.prototypes = nn.Parameter(torch.empty(num_prototypes, bottleneck))
            nn.init.trunc_normal_(self.prototypes, std=0.02)

    def forward(self, x: Tensor) -> Tensor:
        return self._scores(self.mlp(x))

    def views(
        self, xs: Sequence[Tensor], meanwhile: Callable[[], T] | None = None
    ) -> tuple[list[Tensor], T | None]:
        """The head on each of ``xs`` (views of one batch), as one call per view gives them,
        and what ``meanwhile()`` returns (see :func:`layers_on_views`)."""
        hidden, extra = layers_on_views(self.mlp, xs, meanwhile)
        return [self._scores(h) for h in hidden], extra

    def _scores(self, hidden: Tensor) -> Tensor:
        z = F.normalize(hidden, dim=-1)
        if self.last_layer == "weight_norm":
            out: Tensor = self.last(z)
            return out
        return F.linear(z, F.normalize(self.prototypes, dim=-1))
