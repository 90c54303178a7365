"""BatchNorm over the global batch: a model's BatchNorm layers swapped for ones whose statistics
cover all ranks (:func:`prepare_method`), and swapped back (:func:`revert_sync_batchnorm`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from graphssl.methods.collective import comm_device, rank, world_size
from graphssl.training.distributed.sync import broadcast_parameters

__all__ = ["GatheredBatchNorm", "prepare_method", "revert_sync_batchnorm", "swap_batchnorm"]


class GatheredBatchNorm(_BatchNorm):
    """BatchNorm whose training statistics cover every rank's rows, so each rank normalises
    its own rows exactly as one process normalises the global batch.

    Forward: each rank sums its rows' per-channel deviations from one of its rows and their
    squares, which give its mean and sum of squared deviations, and puts them, with its row
    count, in its row of a ``(ranks, 2C + 1)`` table that one all-reduce fills in on every
    rank. The global mean and variance are combined from the table's rows (Chan, Golub and
    LeVeque's pairwise update, as ``SyncBatchNorm`` combines its ranks' statistics), so a
    large mean does not cancel a small variance. Backward (:class:`_NormaliseOverRanks`, as
    ``SyncBatchNorm``'s): each rank sums its rows' output gradient and its product with the
    normalised input per channel, one all-reduce adds them up over the ranks, and each rank
    computes its own rows' input gradient from the sums. So one collective forward and one
    backward, for all the views of a batch at once with :meth:`start_views`, and a few
    passes over the input, as the fused BatchNorm kernel makes.

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
        for x in inputs:
            self._check_input_dim(x)
        with torch.no_grad():
            tables = torch.stack([self._own_row(x) for x in inputs]).to(comm_device())
        work = dist.all_reduce(tables, op=dist.ReduceOp.SUM, async_op=True)

        def collect() -> list[torch.Tensor]:
            work.wait()
            mean, invstd, count = self._global_statistics(tables.to(inputs[0].device), inputs)
            outs = _NormaliseOverRanks.apply(mean, invstd, count, self.weight, self.bias, *inputs)
            return list(outs)

        return collect

    def _own_row(self, input: torch.Tensor) -> torch.Tensor:
        """This rank's row of ``input``'s ``(ranks, 2C + 1)`` table (zeros elsewhere): its
        per-channel mean, sum of squared deviations and row count. Deviations are summed from
        the input's first row, whose distance to the mean is of the order of the spread, so
        the sums lose no precision to a large mean."""
        dims = _reduced_dims(input)
        channels = input.shape[1]
        rows = input.numel() // max(channels, 1)
        mine = input.new_zeros(2 * channels + 1)
        if rows:
            shift = input[0].reshape(channels, -1)[:, 0]
            deviation = input - shift.view(_channel_shape(input))
            sums = deviation.sum(dims)
            mine[:channels] = shift + sums / rows
            mine[channels:-1] = (deviation.square().sum(dims) - sums * sums / rows).clamp_min(0)
            mine[-1] = rows
        table = mine.new_zeros(world_size(), mine.numel())
        table[rank()] = mine
        return table

    def _global_statistics(
        self, tables: torch.Tensor, inputs: Sequence[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Each input's global mean, inverse standard deviation and row count (``(V, C)``,
        ``(V, C)``, ``(V,)``) from its summed table; updates the running statistics, input by
        input."""
        channels = inputs[0].shape[1]
        means, squares, counts = tables.split([channels, channels, 1], dim=2)
        count = counts.sum(dim=1)  # (V, 1)
        for x, c in zip(inputs, count.flatten().tolist(), strict=True):
            if c < 2:
                raise ValueError(
                    f"expected more than 1 value per channel over all ranks when training, got "
                    f"input size {list(x.shape)} and {int(c)} value(s) in all"
                )
        mean = (counts * means).sum(dim=1) / count
        spread = squares.sum(dim=1) + (counts * (means - mean.unsqueeze(1)).square()).sum(dim=1)
        var = spread / count
        if self.track_running_stats and self.running_mean is not None:
            for m, v, c in zip(mean, var, count, strict=True):
                self._update_running_stats(m, v * c / (c - 1))
        return mean, torch.rsqrt(var + self.eps), count.flatten()

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


def _reduced_dims(input: torch.Tensor) -> list[int]:
    """Every dimension of a BatchNorm input but the channels (dimension 1)."""
    return [0, *range(2, input.dim())]


def _channel_shape(input: torch.Tensor) -> list[int]:
    """The shape that broadcasts a per-channel vector over ``input``."""
    return [1, -1] + [1] * (input.dim() - 2)


class _NormaliseOverRanks(torch.autograd.Function):
    """Inputs normalised with their global statistics (``(x - mean) · invstd · weight +
    bias``); the backward of BatchNorm over every rank's rows, one all-reduce for all inputs.

    Each rank's loss reaches the statistics through its own rows' outputs, so the input
    gradient of a row needs, per channel, the sums over every rank's rows of the output
    gradient and of its product with the normalised input: with ``g = w · invstd``,
    ``dx = g · (dy - Σdy / N - x̂ · Σ(dy · x̂) / N)``. The weight's and bias's gradients are
    this rank's sums (the trainer averages them over ranks, as every parameter's).
    """

    @staticmethod
    def forward(
        ctx: Any,
        mean: torch.Tensor,
        invstd: torch.Tensor,
        count: torch.Tensor,
        weight: torch.Tensor | None,
        bias: torch.Tensor | None,
        *inputs: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        ctx.save_for_backward(mean, invstd, count, weight, *inputs)
        outs = []
        for x, m, s in zip(inputs, mean, invstd, strict=True):
            scale = s if weight is None else s * weight
            shift = -m * scale if bias is None else bias - m * scale
            shape = _channel_shape(x)
            outs.append(torch.addcmul(shift.view(shape), x, scale.view(shape)))
        return tuple(outs)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        mean, invstd, count, weight, *inputs = ctx.saved_tensors
        normalised, local = [], []
        for x, dy, m, s in zip(inputs, grads, mean, invstd, strict=True):
            shape, dims = _channel_shape(x), _reduced_dims(x)
            xhat = (x - m.view(shape)) * s.view(shape)
            normalised.append(xhat)
            local.append(torch.stack([dy.sum(dims), (dy * xhat).sum(dims)]))
        mine = torch.stack(local)  # (V, 2, C)
        total = mine.to(comm_device(), copy=True)
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        total = total.to(mine.device) / count.view(-1, 1, 1)
        dxs: list[torch.Tensor | None] = []
        parts = zip(inputs, grads, normalised, invstd, total, ctx.needs_input_grad[5:], strict=True)
        for x, dy, xhat, s, t, needed in parts:
            if not needed:
                dxs.append(None)
                continue
            shape = _channel_shape(x)
            scale = s if weight is None else s * weight
            inner = dy - t[0].view(shape) - xhat * t[1].view(shape)
            dxs.append(inner * scale.view(shape))
        dweight = mine[:, 1].sum(0) if weight is not None and ctx.needs_input_grad[3] else None
        dbias = mine[:, 0].sum(0) if ctx.needs_input_grad[4] else None
        return (None, None, None, dweight, dbias, *dxs)


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
