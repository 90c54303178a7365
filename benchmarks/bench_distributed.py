"""One model on several processes: seconds per epoch with ``trainer.devices`` = 1, 2, ...

Trains a node method (default GRACE with a GraphSAGE encoder) on neighbour-sampled mini-batches
of one graph (default Cora) for ``--epochs`` epochs at a fixed **global** batch (``--batch``
seed nodes per step): ``devices=1`` is the ordinary single-process loop, ``devices=N`` runs
``N`` processes of ``--batch / N`` seeds each (:func:`graphssl.training.distributed.launch`,
gloo), so both take the same number of optimizer steps on batches of the same size. Each
process gets ``cores // N`` torch threads (``--threads`` sets it for every row). The first
epoch (warm-up, CSC conversion) is left out; the figure is the median of the other epochs'
seconds, measured on rank 0 (every rank waits for the others at each step). Start-up
(spawning, importing, building) is reported separately.

Usage::

    python benchmarks/bench_distributed.py [--method grace] [--dataset cora] [--devices 1 2]
        [--epochs 4] [--batch 512] [--fanout 10 10] [--threads 1]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"


def build(
    method: str, dataset: str, devices: int, batch: int, epochs: int, fanout: list[int]
) -> Any:
    """The datamodule, method and trainer of ``model=<method> dataset=<dataset>``."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from graphssl.tasks.components import build_datamodule, build_method, resolve_config
    from graphssl.utils import seed_everything

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = resolve_config(
            compose(
                config_name="train",
                overrides=[f"model={method}", "encoder=sage", f"dataset={dataset}"],
            )
        )
    seed_everything(0)
    dm = build_datamodule(cfg)
    model = build_method(cfg, dm)
    trainer = instantiate(
        cfg.trainer,
        epochs=epochs,
        mini_batch=True,
        batch_size=batch // devices,
        num_neighbors=fanout,
        devices=devices,
        patience=None,
        progress=False,
        log_every=None,
        callbacks=[],
        checkpoint_every=None,
    )
    return dm, model, trainer


def _worker(rank: int, args: tuple[Any, ...]) -> Callable[[], Any]:
    dm, model, trainer = build(*args)
    return functools.partial(trainer.fit, model, dm)


def run(devices: int, args: argparse.Namespace) -> dict[str, float]:
    import torch

    from graphssl.training import distributed

    spec = (args.method, args.dataset, devices, args.batch, args.epochs, args.fanout)
    t0 = time.perf_counter()
    dm, model, trainer = build(*spec)
    threads = args.threads or distributed.threads_per_rank(devices)
    if devices == 1:
        torch.set_num_threads(threads)
        started = time.perf_counter() - t0
        fit = trainer.fit(model, dm)
    else:
        marks: dict[str, float] = {}

        def main() -> Any:
            marks["start"] = time.perf_counter() - t0
            return trainer.fit(model, dm)

        fit = distributed.launch(main, _worker, (spec,), devices, threads=threads)
        started = marks["start"]
    seconds = [e.seconds for e in fit.epochs[1:]]
    return {
        "devices": devices,
        "threads": threads,
        "steps": fit.num_batches / max(len(fit.epochs), 1),
        "epoch_s": statistics.median(seconds),
        "start_s": started,
        "loss": fit.losses[-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", default="grace")
    parser.add_argument("--dataset", default="cora")
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch", type=int, default=512, help="global seed nodes per step")
    parser.add_argument("--fanout", type=int, nargs="+", default=[10, 10])
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads per process (default: cores // N)"
    )
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    os.environ.setdefault("GRAPHSSL_DOWNLOAD", "false")
    load = os.getloadavg()[0]
    rows = [run(d, args) for d in args.devices]
    base = rows[0]["epoch_s"]
    print(
        f"{args.method} on {args.dataset}, global batch {args.batch}, fanout {args.fanout}, "
        f"{args.epochs} epochs, load average {load:.1f}"
    )
    print("| devices | threads each | steps/epoch | s/epoch | speed-up | start-up s | last loss |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['devices']} | {r['threads']} | {r['steps']:.0f} | {r['epoch_s']:.2f} | "
            f"{base / r['epoch_s']:.2f}× | {r['start_s']:.1f} | {r['loss']:.4f} |"
        )


if __name__ == "__main__":
    main()
