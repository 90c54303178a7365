"""Sparse input features: per-epoch CPU time of the dense and the sparse first layer, against
the floor of the epoch's counted matrix-product FLOPs.

For each preset (``conf/experiment/<preset>.yaml``, default: GRACE CiteSeer, DGI Cora, GraphMAE
Cora), builds the method twice from the same seed, ``encoder.sparse_input=false`` (dense) and
``true`` (sparse), and times ``--epochs`` full-batch epochs of a bare loop (``zero_grad``,
``loss``, ``backward``, ``step``, the method's hook and schedule) in CPU seconds of this process
(``time.process_time``, one torch thread). The two sides warm up for one epoch, alternate
``--repeats`` times and the fastest run of each is kept. Their losses after the timed epochs are
printed too: the sparse path computes the same sums, so they agree to float32 rounding.

The floor of a path is the matrix-product FLOPs of one of its epochs, counted with
:class:`flops.MatmulFlops` (dense products ``2·m·k·n``; a sparse operand ``2·nnz·n``, so the
sparse first layer counts ``2·nnz·out``), divided by this CPU's rate on a 2048-cubed dense
matmul measured in the same run (GFLOP per CPU-second). ``time / floor`` says how far an epoch
is from a machine that only ran dense products at full speed; the rest is element-wise work
(activations, softmax, message passing) and the sparse product's lower rate.

``--crossover`` adds the sweeps behind ``encoder.sparse_input=auto``'s thresholds: a random 0/1
matrix of Cora's shape times a 512-wide weight, forward and weight gradient, dense against
sparse with and without converting the input first, over densities; and one-hot inputs (one
non-zero per row) of 37 to 300 columns, for the fewest columns worth a sparse product.

Usage::

    python benchmarks/bench_sparse.py [--epochs 5] [--repeats 3] [--crossover]
    python benchmarks/bench_sparse.py --presets grace_citeseer dgi_cora graphmae_cora
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
sys.path.insert(0, str(Path(__file__).resolve().parent))

from flops import MatmulFlops, cpu_seconds, dense_gflops_per_cpu_second  # noqa: E402

PRESETS = ["grace_citeseer", "dgi_cora", "graphmae_cora"]


def build(preset: str, mode: str, seed: int = 0) -> tuple[Any, Any]:
    """The preset's method and data, ``encoder.sparse_input=mode``."""
    from hydra import compose, initialize_config_dir

    from graphssl.tasks.components import build_datamodule, build_method, resolve_config
    from graphssl.utils import seed_everything

    overrides = [f"experiment={preset}", f"encoder.sparse_input={mode}", f"seed={seed}"]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = resolve_config(compose(config_name="train", overrides=overrides))
    seed_everything(seed)
    dm = build_datamodule(cfg)
    dm.setup()
    return build_method(cfg, dm), dm.data


class Loop:
    """The bare training loop of one method on one full graph."""

    def __init__(self, method: Any, data: Any, total_epochs: int) -> None:
        self.method, self.data = method, data
        self.opt = method.configure_optimizer()
        self.scheduler = method.configure_scheduler(self.opt, total_epochs)
        method.on_train_start(data, total_epochs)
        method.train()
        self.step, self.total, self.loss = 0, total_epochs, float("nan")

    def epochs(self, n: int) -> None:
        for _ in range(n):
            self.step += 1
            self.opt.zero_grad()
            loss = self.method.loss(self.data)["loss"]
            loss.backward()
            self.opt.step()
            self.method.on_after_optimizer_step(self.step, self.total)
            if self.scheduler is not None:
                self.scheduler.step()
            self.loss = float(loss.detach())


def measure(preset: str, epochs: int, repeats: int) -> dict[str, dict[str, float]]:
    """Best CPU seconds per epoch, FLOPs of one epoch and final loss, per mode."""
    import torch

    out: dict[str, dict[str, float]] = {}
    for mode in ("false", "true"):
        method, data = build(preset, mode)
        loop = Loop(method, data, 1 + epochs)
        loop.epochs(1)  # warm-up (and the sparse path's one conversion of the features)
        with MatmulFlops() as count:
            loop.epochs(1)
        density = float(torch.count_nonzero(data.x)) / data.x.numel()
        out[mode] = {"flops": count.flops, "seconds": float("inf"), "density": density}
    for _ in range(repeats):  # alternate, so load drift hits both sides alike
        for mode in ("false", "true"):
            method, data = build(preset, mode)
            loop = Loop(method, data, 1 + epochs)
            loop.epochs(1)
            seconds = cpu_seconds(loop.epochs, epochs) / epochs
            out[mode]["seconds"] = min(out[mode]["seconds"], seconds)
            out[mode]["loss"] = loop.loss
    return out


def crossover(repeats: int = 3) -> list[tuple[float, float, float, float]]:
    """(density, dense, sparse cached, sparse converting) CPU ms for a 2708 x 1433 0/1 input
    times a 512-wide weight, forward and weight gradient."""
    import torch

    g = torch.Generator().manual_seed(0)
    weight = torch.randn(512, 1433, generator=g, requires_grad=True)
    rows = []
    for density in (0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3):
        x = (torch.rand(2708, 1433, generator=g) < density).float()
        csr = x.to_sparse_csr()

        def dense(x: torch.Tensor = x) -> None:
            torch.nn.functional.linear(x, weight).sum().backward()

        def cached(csr: torch.Tensor = csr) -> None:
            torch.sparse.mm(csr, weight.t()).sum().backward()

        def converting(x: torch.Tensor = x) -> None:
            torch.count_nonzero(x)
            torch.sparse.mm(x.to_sparse_csr(), weight.t()).sum().backward()

        times = []
        for fn in (dense, cached, converting):
            fn()
            times.append(1e3 * min(cpu_seconds(fn) for _ in range(repeats)))
        rows.append((density, *times))
    return rows


def width_crossover(repeats: int = 5) -> list[tuple[int, int, float, float]]:
    """(rows, columns, dense, sparse converting) CPU ms for one-hot inputs (one non-zero per
    row, as atom types) times a 128-wide weight, forward and weight gradient: how narrow a
    sparse input may be before the sparse product stops paying."""
    import torch

    g = torch.Generator().manual_seed(0)
    rows = []
    for n, f in ((20000, 37), (3800, 37), (3800, 100), (3800, 300)):
        x = torch.zeros(n, f)
        x[torch.arange(n), torch.randint(0, f, (n,), generator=g)] = 1.0
        weight = torch.randn(128, f, generator=g, requires_grad=True)

        def dense(x: torch.Tensor = x, weight: torch.Tensor = weight) -> None:
            torch.nn.functional.linear(x, weight).sum().backward()

        def converting(x: torch.Tensor = x, weight: torch.Tensor = weight) -> None:
            torch.count_nonzero(x)
            torch.sparse.mm(x.to_sparse_csr(), weight.t()).sum().backward()

        times = []
        for fn in (dense, converting):
            fn()
            times.append(1e3 * min(cpu_seconds(fn) for _ in range(repeats)))
        rows.append((n, f, *times))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=PRESETS, help="conf/experiment names")
    parser.add_argument("--epochs", type=int, default=5, help="timed epochs (default: 5)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per side (default: 3)")
    parser.add_argument("--crossover", action="store_true", help="also the density sweep")
    args = parser.parse_args(argv)

    if "GRAPHSSL_DATA_DIR" not in os.environ and (REPO.parent / "shared" / "data").is_dir():
        os.environ["GRAPHSSL_DATA_DIR"] = str(REPO.parent / "shared" / "data")
    os.environ.setdefault("GRAPHSSL_OUTPUTS", str(REPO / "outputs"))
    logging.basicConfig(level=logging.WARNING)
    import torch

    torch.set_num_threads(1)
    rate = dense_gflops_per_cpu_second()
    print(f"load average {os.getloadavg()[0]:.2f}; dense matmul {rate:.1f} GFLOP per CPU-second")
    print(
        "\n| preset | density | dense s/epoch | sparse s/epoch | sparse / dense | GFLOP dense "
        "| GFLOP sparse | sparse floor s | sparse / its floor | dense / its floor | loss dense "
        "/ sparse |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for preset in args.presets:
        r = measure(preset, args.epochs, args.repeats)
        d, s = r["false"], r["true"]
        floor_d, floor_s = d["flops"] / 1e9 / rate, s["flops"] / 1e9 / rate
        print(
            f"| {preset} | {100 * s['density']:.2f} % | {d['seconds']:.3f} | {s['seconds']:.3f} "
            f"| {s['seconds'] / d['seconds']:.3f} | {d['flops'] / 1e9:.2f} "
            f"| {s['flops'] / 1e9:.2f} | {floor_s:.3f} | **{s['seconds'] / floor_s:.2f}** "
            f"| {d['seconds'] / floor_d:.2f} | {d['loss']:.6f} / {s['loss']:.6f} |",
            flush=True,
        )
    if args.crossover:
        print("\n| density | dense ms | sparse, CSR cached ms | sparse, converting ms |")
        print("|---:|---:|---:|---:|")
        for density, dense, cached, converting in crossover(args.repeats):
            print(f"| {density:.2f} | {dense:.1f} | {cached:.1f} | {converting:.1f} |")
        print("\n| one-hot rows x columns | dense ms | sparse, converting ms |")
        print("|---|---:|---:|")
        for n, f, dense, converting in width_crossover():
            print(f"| {n} x {f} | {dense:.2f} | {converting:.2f} |")
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
