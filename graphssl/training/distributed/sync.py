"""What keeps every rank's model the same: rank 0's values broadcast, gradients averaged."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from graphssl.methods.collective import comm_device, rank, world_size

__all__ = [
    "GradientSync",
    "broadcast_object",
    "broadcast_parameters",
    "broadcast_state",
    "sync_gradients",
]

T = TypeVar("T")


def broadcast_object(obj: T, src: int = 0) -> T:
    """``obj`` of rank ``src`` on every rank (``obj`` itself without a group): small picklable
    values such as flags (``torch.distributed.broadcast_object_list``)."""
    if world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]  # type: ignore[no-any-return]


def broadcast_state(state: T, src: int = 0) -> T:
    """A checkpoint-like ``state`` (tensors, numbers, strings, containers, ``None``) of rank
    ``src`` on every rank: written with ``torch.save`` and read back with
    ``torch.load(weights_only=True)``, so the receiving ranks run no code from it."""
    if world_size() == 1:
        return state
    me, device = rank(), comm_device()
    if me == src:
        buffer = io.BytesIO()
        torch.save(state, buffer)
        data = torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8).to(device)
        size = torch.tensor([data.numel()], dtype=torch.long, device=device)
    else:
        size = torch.zeros(1, dtype=torch.long, device=device)
    dist.broadcast(size, src=src)
    if me != src:
        data = torch.empty(int(size.item()), dtype=torch.uint8, device=device)
    dist.broadcast(data, src=src)
    if me == src:
        return state
    raw = data.cpu().numpy().tobytes()
    return torch.load(io.BytesIO(raw), weights_only=True, map_location="cpu")  # type: ignore[no-any-return]


def broadcast_parameters(module: nn.Module, src: int = 0) -> nn.Module:
    """Give every rank ``src``'s parameters and buffers of ``module`` (in place, no gradient);
    ``module`` unchanged without a group. Returns ``module``."""
    if world_size() == 1:
        return module
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            dist.broadcast(tensor.data, src=src)
    return module


class GradientSync:
    """The average over ranks of a step's gradients and values (:func:`sync_gradients`),
    started by the constructor and finished by :meth:`wait`: what a rank does in between (such
    as sampling its next batch, which no parameter affects) runs while the ranks exchange the
    gradients and the slower one catches up."""

    def __init__(
        self, parameters: Sequence[nn.Parameter], values: Sequence[float | torch.Tensor] = ()
    ) -> None:
        self.params = list(parameters)
        self.numbers = [
            float(v.detach()) if isinstance(v, torch.Tensor) else float(v) for v in values
        ]
        self.world = world_size()
        self.work: Any = None
        if self.world == 1:
            return
        dtype = self.params[0].dtype if self.params else torch.float64
        device = self.params[0].device if self.params else comm_device()
        self.flat = torch.cat(
            [
                *(
                    (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).to(dtype)
                    for p in self.params
                ),
                torch.tensor(self.numbers, dtype=dtype, device=device),
            ]
        )
        self.work = dist.all_reduce(self.flat, op=dist.ReduceOp.SUM, async_op=True)

    def wait(self) -> list[float]:
        """Set every parameter's ``.grad`` to its mean over ranks; return the values' means."""
        if self.work is None:
            return self.numbers
        self.work.wait()
        flat = self.flat / self.world
        offset = 0
        for p in self.params:
            n = p.numel()
            p.grad = flat[offset : offset + n].view_as(p).to(p.dtype).clone()
            offset += n
        return flat[offset:].double().tolist()  # type: ignore[no-any-return]


def sync_gradients(
    parameters: Sequence[nn.Parameter], values: Sequence[float | torch.Tensor] = ()
) -> list[float]:
    """Average the gradients of ``parameters`` over ranks, in one all-reduce; a parameter that
    got no gradient on a rank counts as zero there (every rank then holds the same ``.grad``).

    ``values`` (a step's loss and metrics) travel in the same all-reduce, so the step needs no
    collective of its own to agree on them: the result is their mean over ranks, which is the
    global value both for a loss every rank computes whole (:func:`gather_rows`) and for one a
    rank holds its share of (:func:`global_mean` with a known count). Without a group, the
    gradients stay as they are and ``values`` come back as floats. :class:`GradientSync`
    starts the same exchange and lets the caller work before collecting it.
    """
    return GradientSync(parameters, values).wait()
