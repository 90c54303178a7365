"""GraphMAE on Cora: probe accuracy along training, PyG's vs DGL's GAT initialisation.

Trains ``experiment=graphmae_cora`` once with ``encoder.init=<init> model.decoder_init=<init>``
and, every ``--every`` epochs, extracts the embeddings and prints the training loss, the
validation and test accuracy of the configured probes (``logreg``, ``knn``) and of the papers'
``AdamLinearProbe``. With PyG's Glorot init the accuracy falls as training goes on; with
DGL's (the reference code's) it rises (BENCHMARKS.md, "Method quality").

Usage::

    python benchmarks/graphmae_init.py --init pyg --epochs 1500 --every 250
    python benchmarks/graphmae_init.py --init dgl --epochs 1500 --every 250
"""

from __future__ import annotations

import argparse
import sys

from probe_curve import probe_curve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--init", choices=["pyg", "dgl"], default="dgl")
    parser.add_argument("--epochs", type=int, default=1500, help="trainer.epochs (default: 1500)")
    parser.add_argument("--every", type=int, default=250, help="evaluate every N epochs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    args = parser.parse_args(argv)
    if args.epochs < 1 or args.every < 1:
        parser.error("--epochs and --every must be >= 1")
    overrides = [
        "experiment=graphmae_cora",
        f"encoder.init={args.init}",
        f"model.decoder_init={args.init}",
        f"trainer.epochs={args.epochs}",
        f"seed={args.seed}",
    ]
    probe_curve(overrides, args.every, args.threads, adam=True, label=f"init={args.init} ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
