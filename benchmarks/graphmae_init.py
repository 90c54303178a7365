"""GraphMAE on Cora: probe accuracy along training, PyG's vs DGL's GAT initialisation.

Trains ``experiment=graphmae_cora`` once with ``encoder.init=<init> model.decoder_init=<init>``
and, every ``--every`` epochs, extracts the embeddings and prints the training loss, the test
accuracy of the default ``LogRegEvaluator`` and of the papers' ``AdamLinearEvaluator``. With
PyG's Glorot init the accuracy falls as training goes on; with DGL's (the reference code's) it
rises (BENCHMARKS.md, "Method quality").

Usage::

    python benchmarks/graphmae_init.py --init pyg --epochs 1500 --every 250
    python benchmarks/graphmae_init.py --init dgl --epochs 1500 --every 250
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


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
    if "GRAPHSSL_DATA_DIR" not in os.environ and (REPO.parent / "shared" / "data").is_dir():
        os.environ["GRAPHSSL_DATA_DIR"] = str(REPO.parent / "shared" / "data")

    import torch
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from graphssl.evaluation.adam_probe import AdamLinearEvaluator
    from graphssl.evaluation.extraction import extract_embeddings
    from graphssl.evaluation.linear_probe import LogRegEvaluator
    from graphssl.pipeline import build_datamodule, build_method, resolve_config
    from graphssl.training.trainer import Callback

    torch.set_num_threads(args.threads)
    overrides = [
        "experiment=graphmae_cora",
        f"encoder.init={args.init}",
        f"model.decoder_init={args.init}",
        f"trainer.epochs={args.epochs}",
        f"seed={args.seed}",
        "trainer.progress=false",
    ]
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = resolve_config(compose(config_name="config", overrides=overrides))
    torch.manual_seed(args.seed)
    dm = build_datamodule(cfg)
    method = build_method(cfg, dm)
    split = dm.splits()[0]
    probes = {"logreg": LogRegEvaluator(), "adam": AdamLinearEvaluator(seed=args.seed)}

    class Every(Callback):
        def on_epoch_end(self, trainer: Any, m: Any, result: Any) -> None:
            if (result.epoch + 1) % args.every:
                return
            m.eval()
            z, y = extract_embeddings(m, dm)
            accs = {
                name: 100 * p.evaluate(z, y, split.train, split.val, split.test)["test_acc"]
                for name, p in probes.items()
            }
            m.train()
            print(
                f"init={args.init} epoch {result.epoch + 1:5d}  loss {result.metrics['loss']:.4f}"
                f"  LogRegEvaluator {accs['logreg']:.1f}  Adam probe {accs['adam']:.1f}",
                flush=True,
            )

    t0 = time.perf_counter()
    instantiate(cfg.trainer, callbacks=[Every()], checkpoint_path=None).fit(method, dm)
    print(f"{args.epochs} epochs in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
