"""Collectives the losses use when one model trains on several processes.

Under ``trainer.devices > 1`` every process (rank) holds a slice of the global batch. A loss that
compares rows with each other (contrastive negatives, cross-correlation matrices, batch means)
must see the whole global batch, and its gradient must reach the rank that computed each row.
:func:`gather_rows` does both: it concatenates every rank's rows in rank order, and its backward
sums the gradient of the global loss from every rank and returns each rank its own rows'.

Every rank then computes the same global loss ``L``; the gradient that reaches rank ``r``'s
parameters through its rows is ``W · ∂L/∂z_r`` (``W`` ranks, each backward adds one ``∂L/∂z_r``),
and the trainer averages the parameter gradients over ranks, which gives
``Σ_r ∂L/∂z_r · ∂z_r/∂θ = ∂L/∂θ``: exactly the gradient of one process holding the whole batch.

A loss that is a mean of per-row terms over the global batch needs no rows from other ranks:
:func:`global_mean` gives each rank its share of the mean (one all-reduce of two numbers, or
none when the global count is known), and
:func:`all_reduce_sum` sums a statistic over ranks with gradient (DGI's summary vector), so such
losses move a few numbers per step instead of every rank's rows. A loss computed from such sums
alone (CCA-SSG's correlation matrices) uses :func:`shared_sum`, whose backward needs no
collective.

Without a process group (or with one rank) every function here returns its input unchanged (the
mean of ``values`` for :func:`global_mean`), so the methods call them unconditionally. They live
in the methods layer because the losses call them; :mod:`graphssl.training.distributed`
re-exports them with the process-group machinery.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, overload

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = [
    "PendingCount",
    "PendingSum",
    "all_reduce_mean",
    "all_reduce_sum",
    "comm_device",
    "gather_rows",
    "gather_rows_and_own",
    "global_mean",
    "global_row_mean",
    "is_distributed",
    "rank",
    "shared_sum",
    "world_size",
]


def is_distributed() -> bool:
    """Whether a ``torch.distributed`` process group is initialised in this process."""
    return dist.is_available() and dist.is_initialized()


def world_size() -> int:
    """Ranks of the current process group (``1`` without one)."""
    return dist.get_world_size() if is_distributed() else 1


def rank() -> int:
    """This process's rank in the current process group (``0`` without one)."""
    return dist.get_rank() if is_distributed() else 0


def comm_device() -> torch.device:
    """Where this group's collectives take their tensors: the current GPU under NCCL (which
    communicates CUDA tensors only), the CPU otherwise."""
    if is_distributed() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _row_counts(rows: int, device: torch.device) -> list[int]:
    """Every rank's number of rows, in rank order (one all-gather)."""
    count = torch.tensor([rows], dtype=torch.long, device=device)
    counts = [torch.zeros_like(count) for _ in range(dist.get_world_size())]
    dist.all_gather(counts, count)
    return [int(c.item()) for c in counts]


class _GatherRows(torch.autograd.Function):
    """All-gather along dim 0 with gradient; ranks may hold different numbers of rows
    (``sizes``, every rank's, in rank order)."""

    @staticmethod
    def forward(ctx: Any, local: Tensor, sizes: list[int]) -> Tensor:
        world = dist.get_world_size()
        most = max(sizes)
        padded = local.new_zeros((most, *local.shape[1:]))
        padded[: local.shape[0]] = local
        parts = [torch.empty_like(padded) for _ in range(world)]
        dist.all_gather(parts, padded.contiguous())
        me = dist.get_rank()
        ctx.start, ctx.rows = sum(sizes[:me]), sizes[me]
        return torch.cat([p[:n] for p, n in zip(parts, sizes, strict=True)])

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        # every rank computed its part of the global loss from the gathered rows: the gradient
        # of this rank's rows is the sum of what each rank's backward sends them
        return _summed_over_ranks(grad)[ctx.start : ctx.start + ctx.rows], None


@overload
def gather_rows(local: Tensor, /) -> Tensor: ...


@overload
def gather_rows(local: Tensor, second: Tensor, /) -> tuple[Tensor, Tensor]: ...


@overload
def gather_rows(
    local: Tensor, second: Tensor, third: Tensor, /, *more: Tensor
) -> tuple[Tensor, ...]: ...


@overload
def gather_rows(*tensors: Tensor) -> Tensor | tuple[Tensor, ...]: ...


def gather_rows(*tensors: Tensor) -> Tensor | tuple[Tensor, ...]:
    """Every rank's rows of each tensor, concatenated in rank order, with gradient.

    Several tensors with the same rows (two views' projections, a student's crops) travel in
    one gather, so a step waits for the other ranks once for all of them instead of once each.

    Args:
        tensors: ``(n_r, ...)`` rows of this rank, the same ``n_r`` and dtype for every tensor
            (``n_r`` may differ between ranks).

    Returns:
        ``(Σ_r n_r, ...)`` for one tensor, a tuple of them for several; the inputs themselves
        without a process group or with one rank. A tensor that needs no gradient (e.g. a
        momentum target's output) gives a result that needs none either.

    Raises:
        ValueError: when the tensors' row counts, dtypes or devices differ.
    """
    if not tensors:
        raise TypeError("gather_rows() takes at least one tensor")
    _check_same_rows(tensors)
    if world_size() == 1:
        return tensors[0] if len(tensors) == 1 else tensors
    gathered, _ = _gather_all(tensors)
    return gathered[0] if len(tensors) == 1 else gathered


def gather_rows_and_own(*tensors: Tensor) -> tuple[tuple[Tensor, ...], slice]:
    """:func:`gather_rows` of ``tensors`` (always a tuple), and where this rank's own rows are
    in the results: a loss can then compute the terms of its own rows only, against every
    rank's rows, instead of every rank computing the whole global loss.

    Without a group the tensors themselves and ``slice(0, n)``.
    """
    if not tensors:
        raise TypeError("gather_rows_and_own() takes at least one tensor")
    _check_same_rows(tensors)
    if world_size() == 1:
        return tensors, slice(0, tensors[0].shape[0])
    gathered, sizes = _gather_all(tensors)
    start = sum(sizes[: rank()])
    return gathered, slice(start, start + sizes[rank()])


def _check_same_rows(tensors: tuple[Tensor, ...]) -> None:
    first = tensors[0]
    for t in tensors[1:]:
        if t.shape[0] != first.shape[0] or t.dtype != first.dtype or t.device != first.device:
            raise ValueError(
                f"gather_rows() gathers tensors with the same rows, dtype and device in one "
                f"collective; got {tuple(first.shape)} {first.dtype} on {first.device} and "
                f"{tuple(t.shape)} {t.dtype} on {t.device}"
            )


def _gather_all(tensors: tuple[Tensor, ...]) -> tuple[tuple[Tensor, ...], list[int]]:
    """Every rank's rows of ``tensors`` (same rows, dtype and device) in one gather, with
    gradient where a tensor has one, and every rank's row count."""
    first = tensors[0]
    rows = first.shape[0]
    sizes = _row_counts(rows, first.device)
    flat = [t.reshape(rows, math.prod(t.shape[1:])) for t in tensors]
    local = flat[0] if len(flat) == 1 else torch.cat(flat, dim=1)
    if local.requires_grad:
        out = _GatherRows.apply(local, sizes)
    else:
        with torch.no_grad():
            out = _GatherRows.apply(local, sizes)
    parts = out.split([f.shape[1] for f in flat], dim=1)
    return tuple(
        g.reshape(-1, *t.shape[1:]) if t.requires_grad else g.detach().reshape(-1, *t.shape[1:])
        for g, t in zip(parts, tensors, strict=True)
    ), sizes


def _summed_over_ranks(tensor: Tensor) -> Tensor:
    """A new tensor: ``tensor`` summed over ranks (one blocking all-reduce)."""
    total = tensor.contiguous().clone()
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return total


def all_reduce_sum(local: Tensor) -> Tensor:
    """The sum of ``local`` over ranks, with gradient; ``local`` itself without a group.

    Every rank gets the same sum. A rank's gradient of ``local`` collects every rank's gradient
    of the sum, so the trainer's average of the parameter gradients is the gradient of one
    process holding the whole batch (as for :func:`gather_rows`). :class:`PendingSum` starts
    the same sum and collects it later.
    """
    return PendingSum(local).wait()


class _SharedSum(torch.autograd.Function):
    """The sum of ``local`` over ranks; backward: ``W`` times this rank's gradient of the sum,
    which is every rank's (see :func:`shared_sum`)."""

    @staticmethod
    def forward(ctx: Any, local: Tensor) -> Tensor:
        total = local.detach().to(comm_device(), copy=True).contiguous()
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        return total.to(local.device)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        return grad * dist.get_world_size()


def shared_sum(local: Tensor) -> Tensor:
    """The sum of ``local`` over ranks, with gradient, for a loss that every rank computes
    from the sum alone, so that its value is the same on every rank (CCA-SSG's correlation
    matrices); ``local`` itself without a group.

    Every rank's gradient of the sum is then the same, and the sum over ranks that
    :func:`all_reduce_sum`'s backward exchanges is ``W`` times this rank's: the backward
    multiplies instead, and a step waits for the other ranks once (in the forward) instead of
    twice. A loss that also adds terms of this rank's own rows to the sum's must use
    :func:`all_reduce_sum`.
    """
    if world_size() == 1:
        return local
    return _SharedSum.apply(local)  # type: ignore[no-any-return]


class _GradientSum:
    """The sum over ranks of a :class:`PendingSum`'s gradient, between the autograd node that
    starts it (:class:`_SummedElsewhere`) and the one that collects it (:class:`_AwaitSum`)."""

    def __init__(self) -> None:
        self.work: Any = None
        self.total: Tensor | None = None

    def start(self, grad: Tensor) -> Tensor:
        self.total = grad.contiguous().clone()
        self.work = dist.all_reduce(self.total, op=dist.ReduceOp.SUM, async_op=True)
        return self.total

    def wait(self) -> Tensor:
        assert self.work is not None and self.total is not None
        self.work.wait()
        total, self.work, self.total = self.total, None, None
        return total


class _AwaitSum(torch.autograd.Function):
    """``local`` unchanged; backward: collects the sum over ranks that :class:`_SummedElsewhere`
    started for it. Created before the work a :class:`PendingSum` overlaps, this node runs
    after that work's backward (autograd runs the later-created of two ready nodes first), so
    the gradient's sum travels meanwhile."""

    @staticmethod
    def forward(ctx: Any, local: Tensor, pending: _GradientSum) -> Tensor:
        ctx.pending = pending
        return local.view_as(local)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        # `grad` is the buffer being summed (this node's output has one consumer): read the
        # buffer only once the sum has arrived
        return ctx.pending.wait(), None


class _SummedElsewhere(torch.autograd.Function):
    """``total`` (``local`` already summed over ranks), with the gradient of a sum over ranks:
    every rank uses the same sum, so the gradient of each rank's ``local`` is the sum of every
    rank's gradient of ``total``, started here and collected by :class:`_AwaitSum`."""

    @staticmethod
    def forward(ctx: Any, local: Tensor, total: Tensor, pending: _GradientSum) -> Tensor:
        ctx.pending = pending
        return total

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        return ctx.pending.start(grad), None, None


class PendingSum:
    """:func:`all_reduce_sum` of ``local`` started now and collected by :meth:`wait`, so the
    work in between (another encoder pass) runs while the ranks exchange the numbers and the
    slower rank catches up. The backward overlaps the same way: the gradient's sum over ranks
    starts when the sum's gradient is known and is collected when ``local``'s is needed, after
    the backward of the work in between. Without a group :meth:`wait` returns ``local`` itself."""

    def __init__(self, local: Tensor) -> None:
        self.local = local
        self.work: Any = None
        if world_size() > 1:
            self.pending = _GradientSum()
            self.local = _AwaitSum.apply(local, self.pending)
            self.total = local.detach().contiguous().clone()
            self.work = dist.all_reduce(self.total, op=dist.ReduceOp.SUM, async_op=True)

    def wait(self) -> Tensor:
        """The sum over ranks, with gradient (as :func:`all_reduce_sum`)."""
        if self.work is None:
            return self.local
        self.work.wait()
        return _SummedElsewhere.apply(self.local, self.total, self.pending)  # type: ignore[no-any-return]


class PendingCount(PendingSum):
    """A number of rows summed over ranks, started now and collected by :meth:`wait` as a 0-d
    tensor: the ``count`` of :func:`global_mean` for a loss that knows its rows before the work
    that computes their terms, so the ranks exchange it meanwhile. Without a group :meth:`wait`
    is ``rows`` itself."""

    def __init__(self, rows: int, device: torch.device | str | None = None) -> None:
        super().__init__(torch.tensor([float(rows)], dtype=torch.float64, device=device))

    def wait(self) -> Tensor:
        return super().wait()[0]


def global_mean(values: Tensor, count: Tensor | float | None = None) -> Tensor:
    """The mean of ``values`` over every rank's values, as a loss each rank backpropagates.

    Its gradient is that of this rank's share ``W · Σ_local / N`` (``W`` ranks, ``N`` values
    over all ranks), so the trainer's average of the parameter gradients over ranks is the
    gradient of the global mean, whatever number of values each rank holds. Without ``count``,
    one all-reduce of two numbers finds ``N`` and the global sum, and the value is the global
    mean ``Σ_all / N`` on every rank. With ``count`` (``N``, already known on every rank, e.g.
    summed with a statistic the loss reduces anyway) there is no collective, and the value is
    the share itself, whose mean over ranks is the global mean: the trainer averages a step's
    values over ranks with its gradients (``sync_gradients``). Without a group
    ``values.mean()``.
    """
    if world_size() == 1:
        return values.mean()
    local = values.sum()
    if count is not None:
        count = count.to(local.dtype) if isinstance(count, Tensor) else count
        return local * (world_size() / count)
    totals = torch.stack([local.detach(), local.new_tensor(float(values.numel()))])
    totals = totals.to(comm_device())
    dist.all_reduce(totals, op=dist.ReduceOp.SUM)
    total, count = totals.to(local.device).unbind()
    share = local * (world_size() / count)
    return share + (total / count - share).detach()


@torch.no_grad()
def global_row_mean(views: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
    """The mean row of ``views`` (tensors ``(n, K)`` with the same rows) over every rank's rows,
    ``(1, K)``, and the rows of one view over all ranks (a 0-d tensor): one all-reduce of
    ``K + 1`` numbers, without gradient (a DINO centre); the local mean without a group."""
    rows = views[0].shape[0]
    local = torch.cat(list(views)).sum(dim=0)
    stats = torch.cat([local, local.new_full((1,), float(rows))])
    if world_size() > 1:
        stats = stats.to(comm_device())
        dist.all_reduce(stats, op=dist.ReduceOp.SUM)
        stats = stats.to(local.device)
    count = stats[-1]
    return (stats[:-1] / (count * len(views))).unsqueeze(0), count


@torch.no_grad()
def all_reduce_mean(value: Tensor) -> Tensor:
    """The mean of ``value`` over ranks (a new tensor, no gradient); ``value`` without a group."""
    if world_size() == 1:
        return value
    out = value.detach().to(comm_device(), copy=True)
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return (out / world_size()).to(value.device)
