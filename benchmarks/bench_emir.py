"""Speed benchmark of the EMIR pairwise information-sufficiency matrix.

Default workload: 10 embedders x 10,000 rows, dimensions 64..256, every
embedder a different random linear view (plus tanh and noise) of some of three shared latents;
all 90 ordered pairs with the default :class:`~graphssl.evaluation.emir.EMIRConfig` (KNIFEArgs
defaults: batch 64, 8 modes, 10 + 5 epochs; fitted on 80 % of the rows and scored in-sample and
held-out).

``--paths both`` times the two ways of fitting one target's column side by side, in this process,
one torch thread: one pair at a time (``vectorize=False``) and all sources of the target in one
stacked net (``vectorize=True``), alternating per target so that a change of machine load hits both
alike; it prints CPU and wall seconds per path, their ratio, the largest difference between the
two columns, and the load average (the machine may be shared: compare the ratio, not the times).

The full run calls :func:`~graphssl.evaluation.emir.pairwise_information_sufficiency` with
``n_jobs`` worker processes (``--n-jobs``, default ``-1``: one per core, one torch thread each),
exactly what ``graphssl-compare`` does; ``--n-jobs 1 --threads 2`` is the one-process baseline.

``--max-pairs K`` runs a seeded random sample of K pairs (each target's marginal is fitted once,
as in the full run) and *projects* the full time as
``mean(marginal fit) x n_targets + mean(pair) x n_pairs`` — the sampled pairs are an unbiased
sample of the pair costs; the output says which numbers are measured and which are projected.

Threads of the one-process path stay at PyTorch's default unless ``--threads``.
``OMP_WAIT_POLICY=PASSIVE`` is set (unless already set) before torch is imported: on a shared
machine busy-waiting OpenMP threads can slow small GEMMs by an order of magnitude; it does not
change the number of threads.

Usage::

    python benchmarks/bench_emir.py                   # all 90 pairs, one worker per core
    python benchmarks/bench_emir.py --no-vectorize    # the same, one pair at a time
    python benchmarks/bench_emir.py --n-jobs 1        # all 90 pairs in this process
    python benchmarks/bench_emir.py --max-pairs 12    # sample + projection
    python benchmarks/bench_emir.py --paths both --targets 0 5 9 --n-rows 3000 --epochs 2
    python benchmarks/bench_emir.py --allocator system  # the full run under glibc's defaults
    python benchmarks/bench_emir.py --flops           # the matrix products' floor
    python benchmarks/bench_emir.py --profile 9 --n-rows 3000 --epochs 2  # one column, by op
    python benchmarks/bench_emir.py --peer /work/peers/emir  # against the authors' code

``--peer PATH`` runs the authors' KNIFE code (the folder that contains their ``emir`` package,
imported from there at run time) on the same pairs, settings and processes as graphssl's path,
alternating per target column, and prints both times, their ratio (theirs / ours), the Pearson
and Spearman correlations of the two ``I_S / d_Z`` matrices and the load average
(``emir_peer.py``). ``--n-rows`` and ``--max-pairs`` shrink the workload of both alike.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# tqdm reads its settings from the environment when it is imported: the authors' code (--peer)
# draws a bar per epoch and per evaluation, which would bury this benchmark's own lines
os.environ.setdefault("TQDM_DISABLE", "1")

import argparse
import platform
import random
import time
from dataclasses import replace

import torch
from emir_peer import PeerError, compare_with_peer, load_peer

from graphssl.evaluation.emir import (
    EMIRConfig,
    EMIRResult,
    fit_marginal,
    information_sufficiency,
    pairwise_information_sufficiency,
)


def make_embeddings(
    n_rows: int, dims: list[int], latent_dim: int = 32, seed: int = 0
) -> dict[str, torch.Tensor]:
    """Embedder k: ``tanh(concat(latents_k) @ W_k) + noise_k`` with its own dimension.

    Three shared latents ``A, B, C`` (``[n_rows, latent_dim]`` each); embedder k sees a subset of
    them so that the pairwise matrix has structure (some pairs share more than others).
    """
    g = torch.Generator().manual_seed(seed)
    latents = [torch.randn(n_rows, latent_dim, generator=g) for _ in range(3)]
    subsets = [(0,), (0, 1), (1,), (1, 2), (2,), (0, 2), (0, 1, 2), (0,), (1,), (2,)]
    out: dict[str, torch.Tensor] = {}
    for k, d in enumerate(dims):
        src = torch.cat([latents[i] for i in subsets[k % len(subsets)]], dim=1)
        w = torch.randn(src.shape[1], d, generator=g) / src.shape[1] ** 0.5
        noise = (0.1 + 0.1 * k) * torch.randn(n_rows, d, generator=g)
        out[f"emb{k}_d{d}"] = torch.tanh(src @ w) + noise
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-rows", type=int, default=10_000)
    parser.add_argument(
        "--dims",
        type=int,
        nargs="+",
        default=[64, 88, 104, 128, 152, 168, 192, 216, 232, 256],
        help="one dimension per embedder (default: 10 embedders, 64..256)",
    )
    parser.add_argument("--max-pairs", type=int, default=None, help="run a random sample of pairs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--n-jobs",
        type=int,
        default=-1,
        help="worker processes for the full matrix (default: -1, one per core)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op threads (default: leave PyTorch's default). With 1 thread the "
        "process CPU time is the wall time of an idle core.",
    )
    parser.add_argument(
        "--paths",
        choices=["one", "both"],
        default="one",
        help="both: time the one-pair and the vectorised path side by side on --targets",
    )
    parser.add_argument("--targets", type=int, nargs="+", default=None, help="with --paths both")
    parser.add_argument("--epochs", type=int, default=None, help="override n_epochs")
    parser.add_argument(
        "--vectorize",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="full run: all sources of a target in one stacked net (the default); "
        "--no-vectorize: one pair at a time",
    )
    parser.add_argument(
        "--allocator",
        choices=["reuse", "system"],
        default="reuse",
        help="EMIRConfig.cpu_allocator of the fits (default: reuse; system: glibc's defaults)",
    )
    parser.add_argument(
        "--profile",
        type=int,
        default=None,
        metavar="TARGET",
        help="profile the stacked fit of one target column (one thread, --n-rows, --epochs): "
        "wall time, the products' effective rate and torch.profiler's top operators, then stop",
    )
    parser.add_argument(
        "--peer",
        default=None,
        metavar="PATH",
        help="also run the authors' code from PATH (a folder containing their `emir` package) "
        "on the same pairs and report the time ratio and the matrices' correlation",
    )
    parser.add_argument(
        "--flops",
        action="store_true",
        help="print the matrix's multiply-add count and the time its products alone take "
        "(one thread, the output layer's three products at the widest target), then stop",
    )
    args = parser.parse_args()
    if args.peer is not None:
        try:
            load_peer(args.peer)  # a wrong PATH fails here, before any fitting
        except PeerError as exc:
            parser.error(str(exc))
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    extra = {} if args.epochs is None else {"n_epochs": args.epochs}
    config = EMIRConfig(
        seed=args.seed,
        n_jobs=args.n_jobs,
        vectorize=args.vectorize,
        cpu_allocator=args.allocator,
        **extra,
    )
    embeddings = make_embeddings(args.n_rows, args.dims, seed=args.seed)
    if args.flops:
        product_floor(args.dims, int(args.n_rows * (1 - config.held_out_fraction)), config)
        return
    if args.profile is not None:
        profile_column(embeddings, config, args.profile)
        return
    if args.paths == "both":
        compare_paths(embeddings, config, args.targets or list(range(len(embeddings))))
        return
    names = list(embeddings)
    all_pairs = [(u, z) for z in names for u in names if u != z]
    pairs = all_pairs
    if args.max_pairs is not None and args.max_pairs < len(all_pairs):
        pairs = random.Random(args.seed).sample(all_pairs, args.max_pairs)
        order = {z: i for i, z in enumerate(names)}
        pairs.sort(key=lambda p: (order[p[1]], order[p[0]]))  # group by target: one marginal each
    targets = list(dict.fromkeys(z for _, z in pairs))

    print(
        f"EMIR benchmark: {len(names)} embedders x {args.n_rows} rows, dims {args.dims}; "
        f"{len(pairs)} of {len(all_pairs)} pairs"
    )
    print(
        f"config: batch_size={config.batch_size} modes={config.marg_modes}/{config.cond_modes} "
        f"ff_layers={config.ff_layers} hidden=d_Z epochs={config.n_epochs}/{config.n_epochs_marg} "
        f"lr={config.lr}/{config.margin_lr} device={config.device}"
    )
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(
        f"torch {torch.__version__}, threads={torch.get_num_threads()}, "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}, cpus={os.cpu_count()}, "
        f"{platform.processor() or platform.machine()}, load avg at start "
        f"{load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}"
    )

    if args.peer is not None:
        compare_with_peer(embeddings, config, pairs, args.peer, config.n_jobs, args.threads)
        return

    warm = make_embeddings(256, [8, 8], seed=args.seed)  # one-time library/kernel start-up
    information_sufficiency(warm["emb0_d8"], warm["emb1_d8"], config)
    print("warm-up on 256 rows done (not counted)")

    if len(pairs) == len(all_pairs) and config.n_jobs != 1:
        run_parallel(embeddings, config, len(all_pairs))
        return

    marginal_times: list[float] = []
    pair_times: list[float] = []
    start, cpu_start = time.perf_counter(), time.process_time()
    for z_name in targets:
        t0 = time.perf_counter()
        marginal = fit_marginal(embeddings[z_name], config)
        marginal_times.append(time.perf_counter() - t0)
        print(f"  marginal {z_name:>12}: {marginal_times[-1]:6.2f} s", flush=True)
        for u_name, target in pairs:
            if target != z_name:
                continue
            t0 = time.perf_counter()
            r = information_sufficiency(embeddings[u_name], embeddings[z_name], config, marginal)
            pair_times.append(time.perf_counter() - t0)
            print(
                f"  {u_name:>12} -> {z_name:<12} I_S/d_Z = {r.i_s_per_dim:7.4f} "
                f"(H(Z)/d={r.h_z / r.d_z:.4f})  {pair_times[-1]:6.2f} s",
                flush=True,
            )
    total, cpu_total = time.perf_counter() - start, time.process_time() - cpu_start

    mean_pair = sum(pair_times) / len(pair_times)
    mean_marg = sum(marginal_times) / len(marginal_times)
    print(
        f"measured: {len(pair_times)} pairs + {len(marginal_times)} marginals in {total:.1f} s "
        f"wall, {cpu_total:.1f} s CPU (this process, all threads); load avg at end "
        + "/".join(f"{x:.2f}" for x in (os.getloadavg() if hasattr(os, "getloadavg") else ()))
    )
    print(
        f"time per pair (conditional fit + eval): mean {mean_pair:.2f} s, "
        f"min {min(pair_times):.2f} s, max {max(pair_times):.2f} s; "
        f"marginal fit: mean {mean_marg:.2f} s"
    )
    # CPU seconds / threads = wall time if this process had the cores to itself (the machine may
    # be shared): a second, load-independent estimate, labelled as such.
    n_threads = torch.get_num_threads()
    if len(pairs) == len(all_pairs):
        print(f"total for all {len(all_pairs)} pairs (measured): {total / 60:.2f} min wall")
        print(
            f"idle-machine estimate (CPU time / {n_threads} threads, not measured): "
            f"{cpu_total / n_threads / 60:.2f} min"
        )
    else:
        scale = (mean_marg * len(names) + mean_pair * len(all_pairs)) / total
        projected = total * scale
        print(
            f"PROJECTED total for all {len(all_pairs)} pairs (not measured; "
            f"{len(names)} x mean marginal + {len(all_pairs)} x mean pair): "
            f"{projected:.0f} s = {projected / 60:.2f} min wall at this load"
        )
        print(
            f"PROJECTED idle-machine total (same scaling of CPU time / {n_threads} threads, not "
            f"measured): {cpu_total * scale / n_threads / 60:.2f} min"
        )


def run_parallel(embeddings: dict[str, torch.Tensor], config: EMIRConfig, n_pairs: int) -> None:
    """The whole matrix through ``pairwise_information_sufficiency`` with worker processes."""
    pair_times: list[float] = []

    def on_pair(u_name: str, z_name: str, r: EMIRResult, seconds: float) -> None:
        pair_times.append(seconds)
        print(
            f"  {u_name:>12} -> {z_name:<12} I_S/d_Z = {r.i_s_per_dim:7.4f} "
            f"(H(Z)/d={r.h_z / r.d_z:.4f})  {seconds:6.2f} s in its worker",
            flush=True,
        )

    jobs = (os.cpu_count() or 1) if config.n_jobs == -1 else config.n_jobs
    print(f"{jobs} worker processes (spawned; start-up counted)")
    start = time.perf_counter()
    pairwise_information_sufficiency(embeddings, config, progress=False, on_pair=on_pair)
    total = time.perf_counter() - start
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(
        f"measured: {len(pair_times)} pairs (+ marginals) in {total:.1f} s wall; "
        f"load avg at end {load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}"
    )
    mean = sum(pair_times) / len(pair_times)
    print(
        f"time per pair in a worker (marginal included for a target's first source): mean "
        f"{mean:.2f} s, min {min(pair_times):.2f} s, max {max(pair_times):.2f} s; "
        f"wall time per pair: {total / n_pairs:.2f} s"
    )
    # no wall-clock target: the training products alone take about 2.2 min on 2 cores; the
    # target is the speed-up over the authors' code on the same matrix (--peer)
    print(f"total for all {n_pairs} pairs (measured): {total / 60:.2f} min wall")


def product_floor(dims: list[int], n_fit: int, config: EMIRConfig) -> None:
    """The matrix products' share of the fit, and their time at the cores' measured speed.

    Counts the multiply-adds of every pair's training (forward, input and weight gradients; no
    input gradient for the first layer) and times the output layer's three products at the
    widest target, one thread, minibatch ``config.batch_size``.
    """
    from graphssl.evaluation.emir.pairwise import _column_cost

    torch.set_num_threads(1)
    steps = n_fit * config.n_epochs
    total = head = 0
    for j, d_z in enumerate(dims):
        width = config.ff_dim_hidden if config.ff_dim_hidden > 0 else d_z
        out = width * config.cond_modes * (2 * d_z + 1)
        first = sum(d_u * width for i, d_u in enumerate(dims) if i != j)
        total += 3 * _column_cost(j, dims, config) - first
        head += 3 * out * (len(dims) - 1)
    flop = 2.0 * total * steps
    d_z = max(dims)
    width = config.ff_dim_hidden if config.ff_dim_hidden > 0 else d_z
    out = config.cond_modes * (2 * d_z + 1)
    b = config.batch_size
    x, w, bias, g = (
        torch.randn(b, width),
        torch.randn(out, width),
        torch.randn(out),
        torch.randn(b, out),
    )
    products = {  # nn.Linear's layout, as ConditionalKernel's output layer
        "forward": lambda: torch.addmm(bias, x, w.t()),
        "input gradient": lambda: torch.mm(g, w),
        "weight gradient": lambda: torch.mm(g.t(), x),
    }
    rates = []
    for name, run in products.items():
        for _ in range(10):
            run()
        start = time.perf_counter()
        for _ in range(200):
            run()
        rate = 2.0 * b * width * out * 200 / (time.perf_counter() - start)
        rates.append(rate)
        print(f"{name} [{b}, {width}] x [{width}, {out}]: {rate / 1e9:.1f} GFLOP/s (one thread)")
    # the same forward product in bfloat16: what a lower-precision product would buy here
    xb, wb, biasb = x.bfloat16(), w.bfloat16(), bias.bfloat16()
    for _ in range(3):
        torch.addmm(biasb, xb, wb.t())
    start = time.perf_counter()
    for _ in range(20):
        torch.addmm(biasb, xb, wb.t())
    rate_bf16 = 2.0 * b * width * out * 20 / (time.perf_counter() - start)
    print(f"forward in bfloat16: {rate_bf16 / 1e9:.1f} GFLOP/s (one thread)")
    best = len(rates) / sum(1.0 / r for r in rates)  # the three products' combined rate
    cores = os.cpu_count() or 1
    print(
        f"training products of all {len(dims) * (len(dims) - 1)} pairs: {flop / 1e12:.1f} TFLOP, "
        f"output layer {head / total:.1%} of them; at {best / 1e9:.0f} GFLOP/s (the three "
        f"together) on each of "
        f"{cores} cores: {flop / (best * cores) / 60:.2f} min; load avg "
        + "/".join(f"{v:.2f}" for v in os.getloadavg())
    )


def profile_column(embeddings: dict[str, torch.Tensor], config: EMIRConfig, target: int) -> None:
    """Where one target column's stacked fit spends its time: one thread, under
    ``config.cpu_allocator``, a warm-up fit, one timed fit, then one under torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    from graphssl.evaluation.emir.knife import prepare
    from graphssl.evaluation.emir.stacked import _train_stacked
    from graphssl.utils import allocator

    torch.set_num_threads(1)
    names = list(embeddings)
    prepared = [prepare(embeddings[n], n, config)[0] for n in names]
    n_fit = int(prepared[0].shape[0] * (1 - config.held_out_fraction))
    z = prepared[target][:n_fit]
    us = [u[:n_fit] for i, u in enumerate(prepared) if i != target]
    d_z = int(z.shape[1])
    width = config.ff_dim_hidden if config.ff_dim_hidden > 0 else d_z
    head = width * config.cond_modes * (2 * d_z + 1)
    hidden = (config.ff_layers - 1) * width * width
    # forward and two gradients, no input gradient for the first layer
    macs = sum(3 * (hidden + head) + 2 * int(u.shape[1]) * width for u in us)
    flop = 2.0 * macs * n_fit * config.n_epochs
    with allocator(config.cpu_allocator):
        _train_stacked(us, z, 1.0, replace(config, n_epochs=1))  # warm-up
        start = time.perf_counter()
        _train_stacked(us, z, 1.0, config)
        wall = time.perf_counter() - start
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            _train_stacked(us, z, 1.0, config)
    print(
        f"target {names[target]} (d_Z = {d_z}), {len(us)} sources, {n_fit} rows, "
        f"{config.n_epochs} epochs: {wall:.2f} s wall; products {flop / 1e9:.1f} GFLOP, "
        f"{flop / wall / 1e9:.1f} GFLOP/s over the whole fit; load avg "
        + "/".join(f"{v:.2f}" for v in os.getloadavg())
    )
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


def compare_paths(
    embeddings: dict[str, torch.Tensor], config: EMIRConfig, targets: list[int]
) -> None:
    """Per target column: one pair at a time vs one stacked net, alternating, one thread,
    under ``config.cpu_allocator`` (as :func:`pairwise_information_sufficiency` fits)."""
    from graphssl.evaluation.emir.knife import prepare
    from graphssl.evaluation.emir.pairwise import _target_column
    from graphssl.utils import configure_allocator

    configure_allocator(config.cpu_allocator)
    print(f"allocator: {config.cpu_allocator}")

    torch.set_num_threads(1)
    names = list(embeddings)
    prepared = {k: prepare(v, k, config) for k, v in embeddings.items()}
    print(f"uptime load avg at start: {'/'.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("| target | d_Z | one-pair CPU s | stacked CPU s | CPU ratio | wall ratio | max |diff| |")
    print("|---|---|---|---|---|---|---|")
    totals = {False: [0.0, 0.0], True: [0.0, 0.0]}
    for j in targets:
        columns = {}
        spent = {}
        for vectorize in (False, True):
            cfg = replace(config, vectorize=vectorize, n_jobs=1)
            cpu, wall = time.process_time(), time.perf_counter()
            columns[vectorize] = _target_column(j, names, prepared, cfg)
            spent[vectorize] = (time.process_time() - cpu, time.perf_counter() - wall)
            totals[vectorize][0] += spent[vectorize][0]
            totals[vectorize][1] += spent[vectorize][1]
        diff = max(
            abs(a[1].i_s_per_dim - b[1].i_s_per_dim)
            for a, b in zip(columns[False], columns[True], strict=True)
        )
        print(
            f"| {names[j]} | {prepared[names[j]][0].shape[1]} | {spent[False][0]:.1f} | "
            f"{spent[True][0]:.1f} | {spent[False][0] / spent[True][0]:.2f} | "
            f"{spent[False][1] / spent[True][1]:.2f} | {diff:.1e} |",
            flush=True,
        )
    print(
        f"all targets: one-pair {totals[False][0]:.1f} CPU s / {totals[False][1]:.1f} wall s, "
        f"stacked {totals[True][0]:.1f} CPU s / {totals[True][1]:.1f} wall s; speed-up of the "
        f"stacked path {totals[False][0] / totals[True][0]:.2f}x CPU, "
        f"{totals[False][1] / totals[True][1]:.2f}x wall; load avg at end "
        + "/".join(f"{x:.2f}" for x in os.getloadavg())
    )


if __name__ == "__main__":
    main()
