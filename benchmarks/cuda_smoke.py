"""CUDA smoke run: the train task on ``trainer.device=cuda``, as a user's command runs it.

First the library's own path: the parameters on the GPU after ``Trainer.fit``, float32
embeddings on the CPU from ``extract_embeddings`` (full-batch and mini-batch). Then graphssl's
train task (the ``graphssl`` command's path: datamodule, method, trainer, ``trainer.devices``,
evaluation, MLflow) full-batch and mini-batch, and with ``--devices N`` also on N GPUs (NCCL,
mini-batch), each into a throw-away MLflow store. For each run it checks what the store holds:
the run FINISHED, every epoch's loss finite, the GPU's peak memory (``mem/peak_gpu_gb``) above
zero, the logistic-regression probe above chance (the most frequent label's share), and on
several GPUs the ``dist/backend`` tag and ``dist/world_size``.

Prints one table row per run for BENCHMARKS.md: the median epoch time, the peak GPU memory,
the probe's accuracy. Exits 0 with a note when CUDA is unavailable, 1 when a check fails.

Usage::

    python benchmarks/cuda_smoke.py --dataset cora --epochs 50    # one GPU
    python benchmarks/cuda_smoke.py --dataset cora --devices 2    # and two GPUs (NCCL)
    python benchmarks/cuda_smoke.py --device cpu --epochs 3       # the same checks on the CPU
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

import graphssl.cli  # noqa: F401  (the config-file checks the graphssl command has)
from graphssl.evaluation.extraction import extract_embeddings
from graphssl.tasks.components import build_datamodule, build_method, resolve_config
from graphssl.tasks.train import train
from graphssl.utils import seed_everything

CONF = Path(__file__).resolve().parents[1] / "conf"


@dataclass
class Checks:
    """What passed and what failed, printed as it goes."""

    failures: list[str] = field(default_factory=list)

    def __call__(self, ok: bool, what: str) -> bool:
        print(f"  [{'ok' if ok else 'FAIL'}] {what}")
        if not ok:
            self.failures.append(what)
        return ok


def compose_train(overrides: list[str]) -> Any:
    """``conf/train.yaml`` with ``overrides``, as the command line composes it."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


def task_run(
    name: str, overrides: list[str], store: str, devices: int, chance: float, checks: Checks
) -> dict[str, Any]:
    """Run the train task with ``overrides``, check its run in ``store`` (``chance``: the probe's
    accuracy by guessing the most frequent class); returns its table row."""
    from mlflow.tracking import MlflowClient

    print(f"train task, {name}: {' '.join(overrides)}")
    train(compose_train(overrides))
    client = MlflowClient(tracking_uri=store)
    exp = client.get_experiment_by_name("graphssl")
    runs = client.search_runs([exp.experiment_id], order_by=["attributes.start_time DESC"])
    run = runs[0]
    m = run.data.metrics
    checks(run.info.status == "FINISHED", f"run {run.info.run_id} {run.info.status}")
    losses = [p.value for p in client.get_metric_history(run.info.run_id, "train/loss")]
    checks(
        bool(losses) and all(math.isfinite(v) for v in losses),
        f"loss finite over {len(losses)} epochs"
        + (f" (first {losses[0]:.4f}, last {losses[-1]:.4f})" if losses else ""),
    )
    seconds = [p.value for p in client.get_metric_history(run.info.run_id, "train/epoch_seconds")]
    gpu = m.get("mem/peak_gpu_gb")
    on_cuda = "trainer.device=cuda" in " ".join(overrides)
    if on_cuda:
        checks(gpu is not None and gpu > 0, f"peak GPU memory {gpu} GiB")
    acc = m.get("probe/logreg/test_acc", math.nan)
    checks(acc > chance, f"logreg test accuracy {acc:.4f} above chance ({chance:.4f})")
    if devices > 1:
        backend = run.data.tags.get("dist/backend")
        world = m.get("dist/world_size")
        checks(
            world == devices and backend == ("nccl" if on_cuda else "gloo"),
            f"dist/world_size {world}, dist/backend {backend}",
        )
    return {
        "run": name,
        "epochs": len(seconds),
        "epoch_s": statistics.median(seconds) if seconds else math.nan,
        "train_s": m.get("time/train_seconds", math.nan),
        "gpu_gb": gpu,
        "acc": acc,
    }


def library_path(args: argparse.Namespace, outputs: str, checks: Checks) -> float:
    """``Trainer.fit`` and ``extract_embeddings`` called directly, as a script would; returns
    the share of the most frequent label (a probe's accuracy by guessing)."""
    device = torch.device(args.device)
    cfg = resolve_config(
        compose_train(
            [
                f"dataset={args.dataset}",
                f"model={args.model}",
                f"trainer.device={args.device}",
                "trainer.epochs=2",
                "trainer.progress=false",
                f"paths.outputs_dir={outputs}",
            ]
        )
    )
    print(f"library: Trainer.fit and extract_embeddings, {args.model} on {args.dataset}")
    seed_everything(int(cfg.seed))
    dm = build_datamodule(cfg)
    method = build_method(cfg, dm)
    trainer = instantiate(cfg.trainer, callbacks=[], checkpoint_path=None)
    trainer.fit(method, dm)
    where = sorted({p.device.type for p in method.parameters()})
    checks(where == [device.type], f"parameters on {where} after training")
    y = None
    for mini_batch in (False, True):
        z, y = extract_embeddings(
            method,
            dm,
            encoder_source=cfg.eval.extraction.encoder_source,
            device=args.device,
            mini_batch=mini_batch,
        )
        kind = "mini-batch" if mini_batch else "full-batch"
        checks(
            z.device.type == "cpu" and z.dtype == torch.float32 and bool(z.isfinite().all()),
            f"{kind} extraction: {tuple(z.shape)} {z.dtype} on {z.device}, finite",
        )
    if y is None or y.dim() != 1 or y.is_floating_point():
        return 0.0
    return float(torch.bincount(y[y >= 0]).max()) / max(int((y >= 0).sum()), 1)


def table(rows: list[dict[str, Any]], device: str) -> str:
    """The rows as BENCHMARKS.md's table."""
    lines = [
        f"| {device} | epochs | epoch (median) | training | peak GPU memory | logreg test acc |",
        "|--|--:|--:|--:|--:|--:|",
    ]
    for r in rows:
        gpu = "–" if r["gpu_gb"] is None else f"{r['gpu_gb'] * 1024:.0f} MiB"
        lines.append(
            f"| {r['run']} | {r['epochs']} | {r['epoch_s'] * 1000:.1f} ms | {r['train_s']:.2f} s "
            f"| {gpu} | {r['acc']:.4f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", help="trainer.device (default: cuda)")
    p.add_argument("--dataset", default="sbm", help="dataset option (default: sbm, generated)")
    p.add_argument("--model", default="dgi", help="model option (default: dgi)")
    p.add_argument("--epochs", type=int, default=20, help="training epochs (default: 20)")
    p.add_argument(
        "--devices", type=int, default=1, help="also train on this many GPUs (default: 1)"
    )
    args = p.parse_args(argv)

    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            print(
                f"CUDA is unavailable (torch {torch.__version__}, "
                f"built with CUDA {torch.version.cuda}); nothing to check."
            )
            return 0
        if args.devices > torch.cuda.device_count():
            p.error(f"--devices {args.devices}: this machine has {torch.cuda.device_count()} GPUs")
        name = torch.cuda.get_device_name(torch.device(args.device))
        print(
            f"device: {args.device} = {name} (torch {torch.__version__}, CUDA {torch.version.cuda})"
        )
    else:
        name = args.device
        print(f"device: {args.device} (torch {torch.__version__})")

    checks = Checks()
    rows = []
    with tempfile.TemporaryDirectory(prefix="graphssl-cuda-smoke-") as tmp:
        store = f"sqlite:///{tmp}/mlflow.db"
        common = [
            f"dataset={args.dataset}",
            f"model={args.model}",
            f"trainer.device={args.device}",
            f"trainer.epochs={args.epochs}",
            "trainer.patience=null",
            "trainer.progress=false",
            f"paths.outputs_dir={tmp}",
            f"logger.tracking_uri={store}",
        ]
        plans = [("full-batch", []), ("mini-batch", ["trainer.mini_batch=true"])]
        if args.devices > 1:
            plans.append(
                (
                    f"{args.devices} devices",
                    ["trainer.mini_batch=true", f"trainer.devices={args.devices}"],
                )
            )
        chance = library_path(args, tmp, checks)
        for run_name, extra in plans:
            devices = args.devices if "trainer.devices" in " ".join(extra) else 1
            rows.append(task_run(run_name, common + extra, store, devices, chance, checks))

    print()
    print(table(rows, f"{args.model} on {args.dataset}, {name}"))
    print()
    print(
        "cuda smoke: "
        + ("all checks passed" if not checks.failures else f"FAILED: {checks.failures}")
    )
    return 1 if checks.failures else 0


if __name__ == "__main__":
    sys.exit(main())
