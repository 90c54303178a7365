"""Quality of self-supervised image training: linear-probe test accuracy on Fashion-MNIST.

Trains SimCLR (or BYOL) with a small timm backbone on the Fashion-MNIST training pool through
graphssl's own pieces (config tree, DataModule, method, trainer, ``extract_embeddings``), then
fits the L-BFGS logistic-regression probe on the frozen backbone features of the training rows
(weight decay selected on the validation rows) and reports the official-test-set accuracy and
the wall time of each stage. Target: >= 84 % test accuracy in < 30 min on 2 CPU cores.

Reference points: logistic regression on raw pixels reaches about 84 % on Fashion-MNIST
(Xiao et al., 2017, benchmark table), so the target is "at least as linearly separable as the
pixels"; ``--random-init`` measures the untrained backbone for comparison.

Usage::

    python benchmarks/vision_quality.py [--method simclr] [--encoder resnet10t] [--epochs 8]
        [--subset 60000] [--batch-size 256] [--lr 2e-3] [--threads 1] [--random-init]

Fashion-MNIST is read from ``$GRAPHSSL_DATA_DIR`` (default ``../shared/data``).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from graphssl.evaluation.extraction import extract_embeddings
from graphssl.evaluation.logreg_probe import LogRegProbe
from graphssl.tasks.components import build_datamodule, build_method, resolve_config
from graphssl.utils import seed_everything

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--method", default="simclr", choices=["simclr", "byol"])
    parser.add_argument("--encoder", default="resnet10t", help="timm architecture")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument(
        "--subset", type=int, default=None, help="training-pool size (default: all 60000)"
    )
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument(
        "--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)"
    )
    parser.add_argument(
        "--random-init",
        action="store_true",
        help="skip training: probe the randomly initialised backbone",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    data_dir = os.environ.get("GRAPHSSL_DATA_DIR", str(REPO.parent / "shared" / "data"))
    overrides = [
        f"model={args.method}",
        "dataset=fashion_mnist",
        "encoder=timm_small",
        f"encoder.name={args.encoder}",
        f"paths.data_dir={data_dir}",
        f"dataset.subset={'null' if args.subset is None else args.subset}",
        f"dataset.batch_size={args.batch_size}",
        f"trainer.epochs={args.epochs}",
        "trainer.patience=null",
        "trainer.progress=false",
        f"seed={args.seed}",
        f"model.optimizer.lr={args.lr}",
    ]
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = resolve_config(compose(config_name="train", overrides=overrides))

    t_start, cpu_start = time.perf_counter(), time.process_time()
    seed_everything(args.seed)
    dm = build_datamodule(cfg)
    method = build_method(cfg, dm)
    split = dm.splits()[0]
    print(
        f"FashionMNIST rows={len(dm)} train={split.train.numel()} val={split.val.numel()} "
        f"test={split.test.numel()}; {args.method} + {args.encoder} "
        f"(D={method.backbone.out_channels}); threads={torch.get_num_threads()}",
        flush=True,
    )

    t0 = time.perf_counter()
    if not args.random_init:
        trainer = instantiate(cfg.trainer)
        fit = trainer.fit(method, dm)
        for e in fit.epochs:
            print(
                f"  epoch {e.epoch:2d}  loss {e.metrics['loss']:.4f}  {e.seconds:6.1f} s",
                flush=True,
            )
    cpu_train = time.process_time() - cpu_start
    t_train = time.perf_counter() - t0

    t0 = time.perf_counter()
    z, y = extract_embeddings(method, dm)
    t_extract = time.perf_counter() - t0
    assert y is not None

    t0 = time.perf_counter()
    probe = LogRegProbe(weight_decay=[1e-2, 1e-3, 1e-4], max_iter=1000)
    res = probe.evaluate(z, y, split.train, split.val, split.test)
    t_probe = time.perf_counter() - t0
    total = time.perf_counter() - t_start
    cpu = time.process_time() - cpu_start

    label = "random-init" if args.random_init else f"{args.epochs} epochs"
    pool = split.train.numel() + split.val.numel()
    print(f"\n{args.method} / {args.encoder} / {label} / pool {pool}")
    print(
        f"  linear probe: val_acc {res['val_acc']:.4f}  test_acc {res['test_acc']:.4f}  "
        f"(weight_decay {res['weight_decay']:g}, converged {res['converged']})"
    )
    print(f"  CPU time of setup + training: {cpu_train:.0f} s")
    print(
        f"  wall time: train {t_train:.0f} s, extract {t_extract:.0f} s, probe {t_probe:.0f} s,"
        f" total {total:.0f} s ({total / 60:.1f} min); CPU time {cpu:.0f} s "
        f"({cpu / 60:.1f} min, all threads)"
    )
    target = res["test_acc"] >= 0.84 and total < 30 * 60
    print(f"  target (>= 0.84 test accuracy in < 30 min): {'met' if target else 'NOT met'}")


if __name__ == "__main__":
    main()
