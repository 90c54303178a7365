"""Training-loop overhead: graphssl's Trainer against a bare PyTorch loop, per node method.

For every node-level method of ``conf/model`` that trains with gradients, builds the method twice
from the same seed on one dataset and times ``E`` full-batch epochs:

- **Trainer**: :meth:`graphssl.training.trainer.Trainer.fit` (no callbacks, no progress bar, no
  early stopping);
- **bare loop**: ``for _ in range(E): opt.zero_grad(); method.loss(data)["loss"].backward();
  opt.step(); method.on_after_optimizer_step(step, E); scheduler.step()``. The hook and the
  model config's learning-rate schedule are part of the method's own work (BGRL/AFGRL/GraphDINO
  update their EMA teacher in the hook, GraphMAE's config anneals its learning rate), so both
  sides run them and the ratio measures what the loop itself adds.

Both sides warm up for one epoch first; their timed runs alternate ``--repeats`` times and the
fastest run of each side is compared (the least disturbed by other load on the machine).
Prints a Markdown table with the ratio Trainer / bare (target <= 1.10).

Usage::

    python benchmarks/train_speed.py [--dataset cora] [--epochs 5] [--repeats 3] [--hidden 128]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"


def node_methods() -> list[str]:
    """Models of ``conf/model`` that are not graph-level and train with gradients (image
    methods are among them; :func:`main` skips what cannot train on the graph)."""
    from hydra.utils import get_class
    from omegaconf import DictConfig, OmegaConf

    from graphssl.methods.base import SSLMethod

    out = []
    for path in sorted((CONF / "model").glob("*.yaml")):
        node = OmegaConf.load(path)
        cls = get_class(str(node.get("_target_") if isinstance(node, DictConfig) else node))
        if getattr(cls, "graph_level", False):
            continue
        if getattr(cls, "fit_without_gradients", None) is not SSLMethod.fit_without_gradients:
            continue  # gradient-free (DeepWalk/node2vec): no loop to compare
        out.append(path.stem)
    return out


def build(method: str, dataset: str, hidden: int | None, seed: int = 0):  # type: ignore[no-untyped-def]
    from hydra import compose, initialize_config_dir

    from graphssl.tasks.components import build_datamodule, build_method, resolve_config
    from graphssl.utils import seed_everything

    overrides = [f"model={method}", f"dataset={dataset}", f"seed={seed}"]
    if hidden is not None:
        overrides.append(f"encoder.hidden_channels={hidden}")
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = resolve_config(compose(config_name="train", overrides=overrides))
    seed_everything(seed)
    dm = build_datamodule(cfg)
    return build_method(cfg, dm), dm


def time_trainer(method: str, dataset: str, hidden: int | None, epochs: int) -> float:
    from graphssl.training.trainer import Trainer

    m, dm = build(method, dataset, hidden)
    Trainer(epochs=1, progress=False).fit(m, dm)  # warm-up on a throwaway copy
    m, dm = build(method, dataset, hidden)
    trainer = Trainer(epochs=epochs, progress=False, patience=None)
    t0 = time.perf_counter()
    trainer.fit(m, dm)
    return time.perf_counter() - t0


def time_bare(method: str, dataset: str, hidden: int | None, epochs: int) -> float:
    def loop(m, data, n: int) -> None:  # type: ignore[no-untyped-def]
        opt = m.configure_optimizer()
        scheduler = m.configure_scheduler(opt, n)
        m.on_train_start(data, n)
        m.train()
        for step in range(1, n + 1):
            opt.zero_grad()
            m.loss(data)["loss"].backward()
            opt.step()
            m.on_after_optimizer_step(step, n)
            if scheduler is not None:
                scheduler.step()

    m, dm = build(method, dataset, hidden)
    loop(m, dm.data, 1)  # warm-up
    m, dm = build(method, dataset, hidden)
    t0 = time.perf_counter()
    loop(m, dm.data, epochs)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--methods",
        nargs="+",
        default=None,
        help="models of conf/model (default: every node method with gradients)",
    )
    parser.add_argument("--dataset", default="cora", help="conf/dataset name (default: cora)")
    parser.add_argument("--epochs", type=int, default=5, help="timed epochs (default: 5)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per side (default: 3)")
    parser.add_argument(
        "--hidden",
        type=int,
        default=128,
        help="encoder.hidden_channels; 0 keeps the config's (default: 128)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    args = parser.parse_args(argv)

    if "GRAPHSSL_DATA_DIR" not in os.environ and (REPO.parent / "shared" / "data").is_dir():
        os.environ["GRAPHSSL_DATA_DIR"] = str(REPO.parent / "shared" / "data")
    os.environ.setdefault("GRAPHSSL_OUTPUTS", str(REPO / "outputs"))
    logging.basicConfig(level=logging.WARNING)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    hidden = args.hidden or None
    methods = args.methods or node_methods()

    print(
        f"| method | Trainer s/epoch | bare s/epoch | ratio |  "
        f"({args.dataset}, {args.epochs} epochs, best of {args.repeats}, "
        f"{torch.get_num_threads()} threads)"
    )
    print("|---|---:|---:|---:|")
    worst = 0.0
    for method in methods:
        try:  # image methods (SimCLR, BYOL, DINO) cannot train on a graph: skip them
            time_bare(method, args.dataset, hidden, 1)
        except Exception as err:  # any failure means "not a node method"
            print(f"| {method} | skipped: {type(err).__name__}: {str(err)[:80]} | | |")
            continue
        trainer_s, bare_s = [], []
        for _ in range(args.repeats):  # alternate, so load drift hits both sides alike
            trainer_s.append(time_trainer(method, args.dataset, hidden, args.epochs))
            bare_s.append(time_bare(method, args.dataset, hidden, args.epochs))
        t, b = min(trainer_s), min(bare_s)
        worst = max(worst, t / b)
        print(
            f"| {method} | {t / args.epochs:.4f} | {b / args.epochs:.4f} | {t / b:.3f} |",
            flush=True,
        )
    print(f"\nworst ratio {worst:.3f} (target <= 1.10)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
