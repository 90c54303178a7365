"""Speed of :func:`graphssl.evaluation.diagnostics.embedding_diagnostics`.

Times, on one seeded low-rank-plus-noise float32 matrix (default 100,000 × 512):

* one float64 Gram matrix ``XᵀX`` with torch (cast included), the unit of cost;
* the whole diagnostics suite (``embedding_diagnostics``, Gram route);
* "naive": every metric from its own ``np.linalg.svd`` in float64 (8 SVDs; the coherence one
  computes ``U``), as a user calling separate metric functions would.

Prints each time, the ratios suite / XᵀX and naive / suite, the peak-RSS increase of each step,
and a Markdown table row for ``BENCHMARKS.md``. It asserts nothing.

Usage::

    python benchmarks/bench_diagnostics.py --n 100000 --d 512 --repeats 3
    python benchmarks/bench_diagnostics.py --naive extrapolate   # when 8 full SVDs take too long
"""

from __future__ import annotations

import argparse
import platform
import resource
import time
from collections.abc import Callable

import numpy as np
import torch

from graphssl.evaluation.diagnostics import embedding_diagnostics

#: metrics a user computes one by one: RankMe, RankMe*, effective rank, alpha-ReQ, NESum,
#: stable rank, condition number, coherence (SelfCluster needs no SVD).
NAIVE_SVD_METRICS = 8


def make_embeddings(n: int, d: int, rank: int, seed: int) -> torch.Tensor:
    """Seeded ``[n, d]`` float32 matrix: rank-``rank`` signal with decaying scales plus noise.

    Filled in row blocks, so that making it does not raise the peak memory of the process much
    above the matrix itself.
    """
    g = torch.Generator().manual_seed(seed)
    scales = torch.arange(1, rank + 1, dtype=torch.float32).pow(-0.5)
    w = torch.randn(rank, d, generator=g)
    x = torch.empty(n, d)
    for start in range(0, n, 8192):
        stop = min(start + 8192, n)
        z = torch.randn(stop - start, rank, generator=g) * scales
        x[start:stop] = z @ w + 0.1 * torch.randn(stop - start, d, generator=g)
    x += 0.5  # non-zero column means, so centering matters
    return x


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far (``ru_maxrss`` is KiB on Linux)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024.0 * 1024.0) if platform.system() == "Darwin" else rss / 1024.0


def timed(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Best wall time of ``repeats`` calls, and the peak-RSS increase they caused (MiB).

    Best-of-``repeats`` in the same process for every contender, because the machines these
    benchmarks run on are shared and their load drifts.
    """
    before = peak_rss_mib()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best, peak_rss_mib() - before


def gram64(x: torch.Tensor) -> torch.Tensor:
    x64 = x.to(torch.float64)
    return x64.T @ x64


def naive_per_metric(x: torch.Tensor, extrapolate: bool) -> tuple[float, str]:
    """Each metric from its own float64 NumPy SVD, as separate metric functions would do.

    Returns the time for all ``NAIVE_SVD_METRICS`` SVDs and how it was obtained: every SVD
    timed, or (``extrapolate``) one singular-values-only SVD timed and counted for the 7 metrics
    that need only singular values, plus the coherence SVD with ``U`` timed once.
    """
    a = x.numpy().astype(np.float64)
    n_values_only = NAIVE_SVD_METRICS - 1
    t0 = time.perf_counter()
    for i in range(1 if extrapolate else n_values_only):
        centered = i in (1, 2, 3)  # effective rank, alpha-ReQ, NESum
        np.linalg.svd(a - a.mean(axis=0) if centered else a, compute_uv=False)
    t_values = time.perf_counter() - t0
    if extrapolate:
        t_values *= n_values_only
    t0 = time.perf_counter()
    np.linalg.svd(a, full_matrices=False)  # coherence needs U
    t_u = time.perf_counter() - t0
    how = (
        f"1 values-only SVD timed x {n_values_only} + 1 SVD with U timed"
        if extrapolate
        else f"all {NAIVE_SVD_METRICS} SVDs timed"
    )
    return t_values + t_u, how


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--d", type=int, default=512)
    parser.add_argument("--rank", type=int, default=64, help="rank of the signal part")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--naive",
        choices=["full", "extrapolate", "skip"],
        default="full",
        help="time all per-metric SVDs, time one of the identical ones and multiply, or skip",
    )
    args = parser.parse_args()

    x = make_embeddings(args.n, args.d, args.rank, args.seed)
    print(
        f"X: {args.n} x {args.d} float32 (rank-{args.rank} signal + noise), "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    print(
        f"peak RSS after creating X: {peak_rss_mib():.0f} MiB (X itself: "
        f"{x.numel() * 4 / 2**20:.0f} MiB)"
    )

    embedding_diagnostics(x[:2048])  # warm-up (imports, BLAS threads)
    gram64(x[:2048])
    # The suite first, so that its peak-RSS increase is its own (ru_maxrss only grows).
    t_suite, m_suite = timed(lambda: embedding_diagnostics(x), args.repeats)
    t_gram, m_gram = timed(lambda: gram64(x), args.repeats)
    t_suite2, _ = timed(lambda: embedding_diagnostics(x), args.repeats)  # load drifts: twice
    t_gram2, _ = timed(lambda: gram64(x), args.repeats)
    t_suite, t_gram = min(t_suite, t_suite2), min(t_gram, t_gram2)
    print(
        f"embedding_diagnostics (all metrics): {t_suite:8.3f} s   peak RSS +{m_suite:.0f} MiB "
        f"over X"
    )
    print(
        f"float64 XᵀX (torch, cast included): {t_gram:8.3f} s   peak RSS +{m_gram:.0f} MiB "
        f"more (its float64 copy of X)"
    )
    print(f"ratio suite / XᵀX: {t_suite / t_gram:.2f}  (target <= 3)")

    t_naive = float("nan")
    if args.naive != "skip":
        before = peak_rss_mib()
        t_naive, how = naive_per_metric(x, extrapolate=args.naive == "extrapolate")
        print(
            f"naive, {NAIVE_SVD_METRICS} NumPy float64 SVDs, one per metric ({how}): "
            f"{t_naive:8.3f} s   peak RSS +{peak_rss_mib() - before:.0f} MiB"
        )
        print(f"ratio naive / suite: {t_naive / t_suite:.1f}  (target >= 10)")

    values = embedding_diagnostics(x)
    print("values: " + ", ".join(f"{k}={v:.6g}" for k, v in values.items()))
    print()
    print(
        "| N x D | float64 XᵀX (s) | embedding_diagnostics (s) | suite / XᵀX | "
        "per-metric NumPy SVD (s) | naive / suite |"
    )
    print("|---|---|---|---|---|---|")
    print(
        f"| {args.n:,} x {args.d} | {t_gram:.2f} | {t_suite:.2f} | {t_suite / t_gram:.2f} | "
        f"{t_naive:.1f} | {t_naive / t_suite:.1f} |"
    )


if __name__ == "__main__":
    main()
