"""Counting the matrix-product FLOPs a piece of PyTorch code runs, and this CPU's dense rate.

:class:`MatmulFlops` is a dispatch mode that sees every ATen operation, the backward pass
included, and adds up the floating-point operations of the matrix products: ``2·m·k·n`` for a
dense ``(m, k) @ (k, n)`` (batched: times the batch), ``2·nnz·n`` when one operand is a sparse
matrix with ``nnz`` stored values (a sparse first layer, a GCN's normalised adjacency).
Element-wise work (activations, softmax, scatter-based message passing) is not counted: the
count is what a perfect dense-matmul machine would need, so ``count / rate`` is a floor.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_aten = torch.ops.aten
#: operations and the positions of their two matrix operands
_PRODUCTS = {
    _aten.mm.default: (0, 1),
    _aten.addmm.default: (1, 2),
    _aten._sparse_addmm.default: (1, 2),
    _aten.bmm.default: (0, 1),
    _aten.baddbmm.default: (1, 2),
    _aten.mv.default: (0, 1),
    _aten.addmv.default: (1, 2),
}


def _nnz(t: torch.Tensor) -> int:
    return int(t._nnz())


def product_flops(a: torch.Tensor, b: torch.Tensor) -> int:
    """FLOPs of ``a @ b`` (matrices, batches of matrices, or a matrix and a vector)."""
    if a.layout != torch.strided:
        return 2 * _nnz(a) * (b.shape[-1] if b.dim() > 1 else 1)
    if b.layout != torch.strided:
        return 2 * _nnz(b) * a.shape[-2]
    if b.dim() == 1:  # matrix-vector
        return 2 * a.shape[0] * a.shape[1]
    batch = a.shape[0] if a.dim() == 3 else 1
    return 2 * batch * a.shape[-2] * a.shape[-1] * b.shape[-1]


class MatmulFlops(TorchDispatchMode):
    """``with MatmulFlops() as count: ...`` then ``count.flops``: the matrix-product FLOPs run
    inside, forward and backward."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        positions = _PRODUCTS.get(func)
        if positions is not None:
            self.flops += product_flops(args[positions[0]], args[positions[1]])
        return func(*args, **(kwargs or {}))


def dense_gflops_per_cpu_second(size: int = 2048, repeats: int = 5) -> float:
    """This CPU's float32 rate on a ``size``-cubed dense matmul, in GFLOP per CPU-second (best
    of ``repeats``), with the torch threads currently set."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(size, size, generator=g), torch.randn(size, size, generator=g)
    a @ b  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        a @ b
        best = min(best, time.process_time() - t0)
    return 2 * size**3 / best / 1e9


def process_tree_cpu() -> float:
    """CPU seconds of this process and of its finished children (a compiler it ran)."""
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def cpu_seconds(fn: Any, *args: Any) -> float:
    """CPU seconds of this process spent in ``fn(*args)``."""
    t0 = time.process_time()
    fn(*args)
    return time.process_time() - t0
