"""What ``cpu_allocator`` changes: elementwise ops on activation-sized tensors.

A neighbour-sampled batch of a products-size graph makes activation tensors of 30–60 MB. glibc
serves every block above its largest mmap threshold (32 MB on 64-bit) with its own ``mmap`` and
unmaps it when freed, so each new tensor of that size page-faults kernel-zeroed memory back in.
``cpu_allocator=reuse`` (:func:`graphssl.utils.allocator`, the training default) keeps freed
memory in the process instead.

Each mode runs in a fresh process (a ``mallopt`` setting outlives its restore: glibc stops
adapting its thresholds), the two alternating ``--repeats`` times so that a change of machine load
hits both alike. Each process times ``--iters`` rounds of three ops that each allocate a new
``[rows, dim]`` float32 tensor (``x * w``, ``x + g``, ``relu(x)``), one torch thread, and counts
its minor page faults. The output is the median milliseconds per op, the faults per op, the ratio
``system / reuse`` and the load average (compare the ratio, not the times).

Usage::

    python benchmarks/bench_allocator.py
    python benchmarks/bench_allocator.py --rows 36000 --dim 256 --iters 30 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def measure(mode: str, rows: int, dim: int, iters: int) -> dict[str, float]:
    """Milliseconds and minor page faults per op under ``cpu_allocator=mode``, in this process."""
    import resource
    import time

    import torch

    from graphssl.utils import allocator

    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(rows, dim, generator=gen)
    g = torch.randn(rows, dim, generator=gen)
    w = torch.tensor([0.25])
    ops = (lambda: x * w, lambda: x + g, lambda: torch.relu(x))
    with allocator(mode):
        for op in ops:  # warm up: the first allocations fill the heap in either mode
            op()
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        for _ in range(iters):
            for op in ops:
                op()  # the result is freed at once, as a batch's activations are
        seconds = time.perf_counter() - start
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    n_ops = iters * len(ops)
    return {"ms_per_op": 1e3 * seconds / n_ops, "faults_per_op": faults / n_ops}


def run_child(mode: str, args: argparse.Namespace) -> dict[str, float]:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        mode,
        *("--rows", str(args.rows), "--dim", str(args.dim), "--iters", str(args.iters)),
    ]
    env = dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"the {mode!r} process failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=36_000, help="tensor rows (default: 36000)")
    parser.add_argument("--dim", type=int, default=256, help="tensor columns (default: 256)")
    parser.add_argument("--iters", type=int, default=30, help="rounds per process (default: 30)")
    parser.add_argument("--repeats", type=int, default=3, help="processes per mode (default: 3)")
    parser.add_argument("--child", choices=("reuse", "system"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child, args.rows, args.dim, args.iters)))
        return 0

    results: dict[str, list[dict[str, float]]] = {"system": [], "reuse": []}
    for _ in range(args.repeats):
        for mode in results:
            results[mode].append(run_child(mode, args))
    mb = args.rows * args.dim * 4 / 2**20
    print(f"# elementwise ops on new [{args.rows}, {args.dim}] float32 tensors ({mb:.1f} MiB)")
    print(f"# {args.iters} rounds x 3 ops per process, {args.repeats} processes per mode")
    print("| cpu_allocator | ms / op (median) | minor page faults / op |")
    print("|---|---:|---:|")
    med = {}
    for mode, runs in results.items():
        med[mode] = statistics.median(r["ms_per_op"] for r in runs)
        faults = statistics.median(r["faults_per_op"] for r in runs)
        print(f"| {mode} | {med[mode]:.2f} | {faults:,.0f} |")
    print(f"ratio system / reuse: {med['system'] / med['reuse']:.2f}")
    print(f"load average: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
