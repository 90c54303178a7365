"""GRACE's InfoNCE on ``N`` rows: the whole ``N x N`` matrices against blocks of rows.

Times forward and backward of :func:`graphssl.methods.losses.info_nce` on random ``(N, D)``
float32 rows, once on the dense path and once in blocks (``block_rows`` as the automatic choice
above ``INFO_NCE_DENSE_ROWS`` takes them), in CPU time of this process (best of ``--repeat``),
and prints the blocks' time over the dense path's with both paths' peak similarity bytes
(:func:`~graphssl.methods.losses.info_nce_bytes`). Both losses are printed, to show they agree.

Usage::

    python benchmarks/bench_info_nce.py                   # N = 1024, 2708, 5000, 8192; D = 128
    python benchmarks/bench_info_nce.py --rows 2708 --dim 256 --threads 2
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from collections.abc import Callable

import torch

from graphssl.methods import losses


def best_cpu_seconds(run: Callable[[], torch.Tensor], repeat: int) -> tuple[float, float]:
    """The least CPU time of ``repeat`` calls of ``run()`` (a loss to backpropagate), and the
    loss's value."""
    best, value = float("inf"), float("nan")
    for _ in range(repeat):
        t0 = time.process_time()
        loss = run()
        loss.backward()
        best = min(best, time.process_time() - t0)
        value = float(loss.detach())
    return best, value


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, nargs="+", default=[1024, 2708, 5000, 8192])
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--tau", type=float, default=0.5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(
        f"D={args.dim}, tau={args.tau}, {args.threads} thread(s), load "
        f"{os.getloadavg()[0]:.1f}, CPU seconds (best of {args.repeat})"
    )
    print("| N | dense | blocks (rows) | blocks / dense | dense MiB | blocks MiB | difference |")
    print("|--:|--:|--:|--:|--:|--:|--:|")
    for n in args.rows:
        z1 = torch.randn(n, args.dim, requires_grad=True)
        z2 = torch.randn(n, args.dim, requires_grad=True)
        block = min(n, max(1, losses.INFO_NCE_BLOCK_ELEMENTS // n))
        loss = functools.partial(losses.info_nce, z1, z2, args.tau)
        dense, a = best_cpu_seconds(functools.partial(loss, block_rows=0), args.repeat)
        blocked, b = best_cpu_seconds(functools.partial(loss, block_rows=block), args.repeat)
        dense_mib = 8 * n * n * 4 / 2**20
        block_mib = 4 * block * n * 4 / 2**20
        print(
            f"| {n} | {dense * 1000:.0f} ms | {blocked * 1000:.0f} ms ({block}) "
            f"| {blocked / dense:.2f}× | {dense_mib:.0f} | {block_mib:.0f} | {abs(a - b):.1e} |"
        )


if __name__ == "__main__":
    main()
