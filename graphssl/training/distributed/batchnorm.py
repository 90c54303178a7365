"""BatchNorm over the global batch: a model's BatchNorm layers swapped for ones whose statistics
cover all ranks (:func:`prepare_method`), and swapped back (:func:`revert_sync_batchnorm`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from graphssl.methods.collective import PendingSum, rank, world_size
from graphssl.training.distributed.sync import broadcast_parameters

__all__ = ["GatheredBatchNorm", "prepare_method", "revert_sync_batchnorm", "swap_batchnorm"]


class GatheredBatchNorm(_BatchNorm):
    """BatchNorm whose training statistics cover every rank's rows, so each rank normalises
    its own rows exactly as one process normalises the global batch.

    Each rank computes its rows' per-channel mean and sum of squared deviations in one pass
    (``torch.var_mean``) and puts them, with its row count, in its row of a ``(ranks, 2C + 1)``
    table that one all-reduce with gradient (:class:`~graphssl.methods.collective.PendingSum`)
    fills in on every rank: one collective forward and one backward (for all the views of a
    batch at once with :meth:`start_views`). The global mean and variance are combined from
    the table's rows (Chan, Golub and LeVeque's pairwise update, as ``SyncBatchNorm`` combines
    its ranks' statistics), with no cancellation between a large mean and a small variance.
    The running statistics, updated from the same global mean and (unbiased) variance, stay
    identical on every rank. Works on any device and backend (gloo included, which
    :class:`torch.nn.SyncBatchNorm` does not support; on CUDA :func:`prepare_method` uses
    ``SyncBatchNorm``). Outside a process group, or in evaluation mode, it is the BatchNorm it
    replaced."""

    #: the BatchNorm class this layer replaced (:func:`revert_sync_batchnorm` restores it)
    replaced: type[_BatchNorm] = nn.BatchNorm1d

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected an input of 2 or more dimensions, got {input.dim()}D")

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if not (self.training and world_size() > 1):
            return super().forward(input)
        return self.start_views([input])()[0]

    def start_views(self, inputs: Sequence[torch.Tensor]) -> Callable[[], list[torch.Tensor]]:
        """Start normalising several inputs, each with its own statistics over every rank (the
        views of one batch), as separate calls would, in one exchange; returns the function
        that collects the exchange and gives the outputs.

        The work done before calling it runs while the ranks exchange the statistics (BGRL's
        target encoder, through :meth:`~graphssl.models.heads.MLPHead.views`), and the
        backward exchanges every input's gradient statistics at once too: two collectives for
        all the views instead of two each. The running statistics are updated once per input,
        in order, as the separate calls update them. Outside a process group, or in evaluation
        mode, the outputs are the BatchNorm's of each input, computed when collected.
        """
        if not (self.training and world_size() > 1):
            return lambda: [super(GatheredBatchNorm, self).forward(x) for x in inputs]
        tables = PendingSum(torch.stack([self._own_row(x) for x in inputs]))

        def collect() -> list[torch.Tensor]:
            summed = tables.wait()
            return [self._normalise(x, table) for x, table in zip(inputs, summed, strict=True)]

        return collect

    def _own_row(self, input: torch.Tensor) -> torch.Tensor:
        """This rank's row of ``input``'s ``(ranks, 2C + 1)`` table (zeros elsewhere): its
        per-channel mean, sum of squared deviations and row count."""
        self._check_input_dim(input)
        dims = [0, *range(2, input.dim())]  # every dimension but the channels
        channels = input.shape[1]
        rows = input.numel() // max(channels, 1)
        if rows:
            var_mine, mean_mine = torch.var_mean(input, dims, correction=0)
        else:  # a rank without rows adds nothing to the sums
            var_mine = mean_mine = input.new_zeros(channels)
        mine = torch.cat([mean_mine, var_mine * rows, input.new_full((1,), float(rows))])
        blank = mine.new_zeros(mine.shape)
        return torch.stack([mine if r == rank() else blank for r in range(world_size())])

    def _normalise(self, input: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        """``input`` normalised with the global statistics of its summed ``table``; updates
        the running statistics."""
        shape = [1, -1] + [1] * (input.dim() - 2)
        channels = input.shape[1]
        means, squares, counts = table.split([channels, channels, 1], dim=1)
        count = counts.sum()
        if float(count) < 2:
            raise ValueError(
                f"expected more than 1 value per channel over all ranks when training, got "
                f"input size {list(input.shape)} and {int(count)} value(s) in all"
            )
        mean = (counts * means).sum(0) / count
        var = (squares.sum(0) + (counts * (means - mean).square()).sum(0)) / count
        # (x - mean) / std * weight + bias as one multiply-add: x * scale + shift
        scale = torch.rsqrt(var + self.eps)
        if self.affine:
            scale = scale * self.weight
            shift = self.bias - mean * scale
        else:
            shift = -mean * scale
        out = torch.addcmul(shift.view(shape), input, scale.view(shape))
        if self.track_running_stats and self.running_mean is not None:
            self._update_running_stats(mean.detach(), var.detach() * count / (count - 1))
        return out

    @torch.no_grad()
    def _update_running_stats(self, mean: torch.Tensor, unbiased_var: torch.Tensor) -> None:
        """As ``_BatchNorm`` updates them: an exponential average with ``momentum``, or the
        cumulative average when ``momentum`` is ``None``."""
        assert self.num_batches_tracked is not None and self.running_var is not None
        assert self.running_mean is not None
        self.num_batches_tracked.add_(1)
        factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        self.running_mean.mul_(1 - factor).add_(mean.to(self.running_mean.dtype), alpha=factor)
        self.running_var.mul_(1 - factor).add_(
            unbiased_var.to(self.running_var.dtype), alpha=factor
        )


def swap_batchnorm(module: nn.Module, to: type[_BatchNorm] | None) -> nn.Module:
    """``module`` with its BatchNorm layers replaced by ``to`` (``None``: by the class each
    :class:`GatheredBatchNorm` or ``SyncBatchNorm`` replaced), sharing their parameters and
    buffers; a module that is not a BatchNorm is changed in place and returned."""
    out = module
    if isinstance(module, _BatchNorm):
        if to is None:  # only the layers a swap made know what they replaced
            target = module.__dict__.get("replaced") or (
                module.replaced if isinstance(module, GatheredBatchNorm) else None
            )
        elif isinstance(module, to):
            target = None
        else:
            target = to
        if target is not None and type(module) is not target:
            out = target(
                module.num_features,
                module.eps,
                module.momentum,  # type: ignore[arg-type]
                module.affine,
                module.track_running_stats,
            )
            if to is not None:
                out.replaced = type(module)  # type: ignore[assignment]
            if module.affine:
                out.weight, out.bias = module.weight, module.bias
            out.running_mean, out.running_var = module.running_mean, module.running_var
            out.num_batches_tracked = module.num_batches_tracked
            out.train(module.training)
    for name, child in module.named_children():
        swapped = swap_batchnorm(child, to)
        if swapped is not child:
            setattr(out, name, swapped)
    return out


def prepare_method(method: nn.Module, device: torch.device | str = "cpu") -> nn.Module:
    """Make every rank hold the same model: BatchNorm layers normalise over the global batch
    (:class:`GatheredBatchNorm`; :class:`torch.nn.SyncBatchNorm` on CUDA; same parameters and
    state-dict keys), then rank 0's parameters and buffers are broadcast. Returns ``method``."""
    if isinstance(method, _BatchNorm):
        raise TypeError(
            f"{type(method).__name__} is itself a BatchNorm layer; expected a model holding them"
        )
    cuda = torch.device(device).type == "cuda"
    swap_batchnorm(method, nn.SyncBatchNorm if cuda else GatheredBatchNorm)
    return broadcast_parameters(method)


def revert_sync_batchnorm(module: nn.Module) -> nn.Module:
    """Undo :func:`prepare_method`'s BatchNorm replacement (same parameters and buffers), so
    the model runs on one process again; returns ``module``."""
    return swap_batchnorm(module, None)
