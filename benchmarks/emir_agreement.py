"""From how many rows per target dimension do EMIR's in-sample and held-out rankings agree?

Synthetic families from :func:`bench_emir.make_embeddings` (embedders that are noisy random views
of subsets of three shared latents, so the informativeness ranking has a known structure), at
several row counts. For every (dimension family, row count) the pairwise matrix is estimated twice,
with two seeds (each seed draws its own held-out split, initialisation and minibatch order); every
run gives both figures from one fit (``EMIRConfig.held_out_estimate``). Reported per row count:

* ``rho_in_out``: Spearman between in-sample and held-out informativeness (mean of the 2 seeds);
* ``rho_seeds_in`` / ``rho_seeds_out``: Spearman between the two seeds, in-sample / held-out;
* ``rows/dim``: rows fitted per mean target dimension (what the caveat threshold is set on).

Usage::

    python benchmarks/emir_agreement.py --dims 32 40 48 56 64 72 --rows 500 1000 2000 5000
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import sys
import time
from pathlib import Path

import torch
from scipy.stats import spearmanr

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_emir import make_embeddings

from graphssl.evaluation.emir import EMIRConfig, pairwise_information_sufficiency


def _rho(a: dict[str, float], b: dict[str, float]) -> float:
    names = sorted(a)
    return float(spearmanr([a[n] for n in names], [b[n] for n in names]).statistic)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs="+", default=[32, 40, 48, 56, 64, 72])
    parser.add_argument("--rows", type=int, nargs="+", default=[500, 1000, 2000, 5000])
    parser.add_argument("--seeds", type=int, nargs=2, default=[0, 1])
    parser.add_argument("--data-seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    mean_dim = sum(args.dims) / len(args.dims)
    print(
        f"dims {args.dims} (mean {mean_dim:.0f}), seeds {args.seeds}, "
        f"load avg {'/'.join(f'{x:.2f}' for x in os.getloadavg())}",
        flush=True,
    )
    print("| rows | rows/dim (fit) | rho_in_out | rho_seeds_in | rho_seeds_out | seconds |")
    print("|---|---|---|---|---|---|", flush=True)
    for n_rows in args.rows:
        embeddings = make_embeddings(n_rows, args.dims, seed=args.data_seed)
        start = time.perf_counter()
        runs = [
            pairwise_information_sufficiency(embeddings, EMIRConfig(seed=s), progress=False)
            for s in args.seeds
        ]
        seconds = time.perf_counter() - start
        ins = [r.informativeness for r in runs]
        outs = [r.informativeness_held_out for r in runs]
        rho_in_out = sum(_rho(i, o) for i, o in zip(ins, outs, strict=True)) / len(runs)
        print(
            f"| {n_rows} | {runs[0].n_fit / mean_dim:.0f} | {rho_in_out:.3f} | "
            f"{_rho(*ins):.3f} | {_rho(*outs):.3f} | {seconds:.0f} |",
            flush=True,
        )
    print(f"load avg at end {'/'.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)


if __name__ == "__main__":
    main()
