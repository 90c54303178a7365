"""Wall time and peak memory of the evaluation phase at ogbn-products size.

Generates class-correlated float32 embeddings (``--rows`` × ``--dim``, ``--classes`` Gaussian
clusters of unequal sizes; default 2,449,029 × 256 with 47 classes, the size of ogbn-products
with a 256-wide encoder) split as ogbn-products is (8 % train, 1.6 % validation, the rest test),
and runs each stage of the evaluation a training run performs, with the configuration's
defaults:

- ``diagnostics``: :func:`graphssl.evaluation.runner.run_diagnostics` (every row);
- ``logreg``: :class:`~graphssl.evaluation.logreg_probe.LogRegProbe` with its default grid,
  through :func:`~graphssl.evaluation.runner.run_probes` (``--max-rows`` = ``eval.max_rows``);
- ``knn``: :class:`~graphssl.evaluation.knn_probe.KNNProbe` with ``max_rows=--knn-max-rows``
  (``eval.knn_max_rows``);
- ``figures``: the spectrum figure on ``--figure-max-rows`` rows (``eval.figure_max_rows``) and
  the projection figure.

For each stage: wall seconds and the peak resident memory (Linux ``VmHWM``, reset before each
stage), both above the input and in total. (``tracemalloc`` does not see torch's allocations,
so resident memory is what is measured.) Prints the load average: the figures scale with it on
a shared machine.

Usage::

    python benchmarks/bench_eval_scale.py                       # 2,449,029 x 256, 47 classes
    python benchmarks/bench_eval_scale.py --rows 200000         # a quick run
    python benchmarks/bench_eval_scale.py --max-rows 100000     # eval.max_rows=100000
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import resource
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from graphssl.evaluation.knn_probe import KNNProbe
from graphssl.evaluation.logreg_probe import LogRegProbe
from graphssl.evaluation.runner import run_diagnostics, run_probes

STAGES = ("diagnostics", "logreg", "knn", "figures")
_CHUNK = 65536


class Split:
    """Row indices of the products-like split."""

    def __init__(self, train: torch.Tensor, val: torch.Tensor, test: torch.Tensor) -> None:
        self.train, self.val, self.test = train, val, test


def embeddings(
    n: int, dim: int, n_classes: int, separation: float, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[n, dim]`` float32 rows around class centres (unequal class sizes, anisotropic
    noise), generated in chunks so that no float64 or second ``[n, dim]`` array is made."""
    gen = torch.Generator().manual_seed(seed)
    sizes = torch.rand(n_classes, generator=gen) + 0.1  # unequal class sizes (up to 11x)
    y = torch.multinomial(sizes, n, replacement=True, generator=gen)
    centres = separation * torch.randn(n_classes, dim, generator=gen) / dim**0.5
    scale = torch.linspace(0.2, 2.0, dim)  # a decaying spectrum, as trained embeddings have
    x = torch.empty(n, dim)
    for start in range(0, n, _CHUNK):
        stop = min(start + _CHUNK, n)
        noise = torch.randn(stop - start, dim, generator=gen) * scale
        x[start:stop] = centres[y[start:stop]] + noise
    return x, y


def _status(key: str) -> int:
    text = Path("/proc/self/status").read_text()
    match = re.search(rf"{key}:\s+(\d+)", text)
    return int(match.group(1)) * 1024 if match else 0


def measured(fn: Callable[[], Any]) -> tuple[Any, float, int]:
    """Run ``fn``: its result, wall seconds, and the peak resident bytes while it ran."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := current RSS
    start = time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - start
    return out, seconds, _status("VmHWM")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_449_029)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--classes", type=int, default=47)
    parser.add_argument(
        "--separation",
        type=float,
        default=3.0,
        help="scale of the class centres (sets how separable the classes are)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-rows", type=int, default=None, help="eval.max_rows (probes)")
    parser.add_argument("--knn-max-rows", type=int, default=50_000)
    parser.add_argument("--figure-max-rows", type=int, default=100_000)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES))
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    t0 = time.perf_counter()
    x, y = embeddings(args.rows, args.dim, args.classes, args.separation, args.seed)
    perm = torch.randperm(args.rows, generator=torch.Generator().manual_seed(args.seed + 1))
    n_train, n_val = round(0.0803 * args.rows), round(0.0161 * args.rows)
    split = Split(
        perm[:n_train].sort().values,
        perm[n_train : n_train + n_val].sort().values,
        perm[n_train + n_val :].sort().values,
    )
    input_bytes = x.numel() * x.element_size()
    base = _status("VmRSS")
    # before the first reset, VmHWM (= getrusage's ru_maxrss) includes the data generation
    before = max(_status("VmHWM"), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    print(
        f"embeddings {args.rows} x {args.dim} float32 ({input_bytes / 2**30:.2f} GiB), "
        f"{args.classes} classes; train {split.train.numel()}, val {split.val.numel()}, "
        f"test {split.test.numel()}; generated in {time.perf_counter() - t0:.0f} s"
    )
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs; "
        f"load average {' '.join(f'{v:.1f}' for v in os.getloadavg())}; "
        f"resident before evaluation {base / 2**30:.2f} GiB"
    )

    def stage(name: str) -> Callable[[], Any]:
        if name == "diagnostics":
            return lambda: run_diagnostics(x)
        if name == "logreg":
            probes = {"logreg": LogRegProbe()}
            return lambda: run_probes(x, y, [split], probes, max_rows=args.max_rows, seed=0)
        if name == "knn":
            probes = {"knn": KNNProbe(max_rows=args.knn_max_rows, seed=0)}
            return lambda: run_probes(x, y, [split], probes, max_rows=args.max_rows, seed=0)

        def figures() -> None:
            from graphssl.evaluation.plots import projection_figure, spectrum_figure

            fig_rows = args.figure_max_rows
            if args.max_rows is not None:
                fig_rows = min(fig_rows, args.max_rows)
            spectrum_figure(x, max_rows=fig_rows, seed=0)
            projection_figure(x, y, seed=0)

        return figures

    print(f"\n{'stage':<12} {'seconds':>8} {'peak GiB':>9} {'above input':>12}  result")
    total_s, peak = 0.0, base
    for name in args.stages:
        out, seconds, hwm = measured(stage(name))
        total_s += seconds
        peak = max(peak, hwm)
        if isinstance(out, dict):
            keys = [k for k in out if k.endswith(("test_acc", "rankme", "weight_decay"))]
            keys += [k for k in out if k.endswith(("alpha_req", "max_rows"))]
            shown = ", ".join(f"{k}={out[k]:.4g}" for k in keys)
        else:
            shown = ""
        print(
            f"{name:<12} {seconds:>8.1f} {hwm / 2**30:>9.2f} {(hwm - base) / 2**30:>12.2f}  "
            f"{shown}",
            flush=True,
        )
    print(
        f"{'total':<12} {total_s:>8.1f} {peak / 2**30:>9.2f} {(peak - base) / 2**30:>12.2f}"
        f"  (peak: the largest stage peak; peak RSS before evaluation {before / 2**30:.2f} GiB)"
    )
    print(f"load average after: {' '.join(f'{v:.1f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
