"""CUDA smoke test: a short DGI training, extraction and probes with ``trainer.device=cuda``.

Checks that the configured device reaches every stage (nothing in graphssl picks a device
itself): the method's parameters live on the GPU after training, every epoch's
loss is finite, ``extract_embeddings`` returns float32 embeddings on the CPU, and the probes
(run on the CPU embeddings) give a sensible accuracy. Prints what it checked; exits 0 with a
note when CUDA is unavailable, 1 when a check fails.

Usage::

    python benchmarks/cuda_smoke.py                          # DGI on the generated SBM graph
    python benchmarks/cuda_smoke.py --dataset cora --epochs 50
    python benchmarks/cuda_smoke.py --device cpu             # the same checks on the CPU
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from graphssl.evaluation.extraction import extract_embeddings
from graphssl.tasks.components import (
    build_datamodule,
    build_method,
    configured_probes,
    resolve_config,
)
from graphssl.utils import seed_everything

CONF = Path(__file__).resolve().parents[1] / "conf"


def check(ok: bool, what: str, failures: list[str]) -> None:
    print(f"  [{'ok' if ok else 'FAIL'}] {what}")
    if not ok:
        failures.append(what)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", help="trainer.device (default: cuda)")
    p.add_argument("--dataset", default="sbm", help="dataset option (default: sbm, generated)")
    p.add_argument("--model", default="dgi", help="model option (default: dgi)")
    p.add_argument("--epochs", type=int, default=20, help="training epochs (default: 20)")
    p.add_argument("--mini-batch", action="store_true", help="mini-batch extraction too")
    args = p.parse_args(argv)

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(
            f"CUDA is unavailable (torch {torch.__version__}, "
            f"built with CUDA {torch.version.cuda}); nothing to check."
        )
        return 0

    failures: list[str] = []
    device = torch.device(args.device)
    if device.type == "cuda":
        print(
            f"device: {device} = {torch.cuda.get_device_name(device)} "
            f"(torch {torch.__version__}, CUDA {torch.version.cuda})"
        )
        torch.cuda.reset_peak_memory_stats(device)
    else:
        print(f"device: {device} (torch {torch.__version__})")

    with tempfile.TemporaryDirectory(prefix="graphssl-cuda-smoke-") as tmp:
        overrides = [
            f"dataset={args.dataset}",
            f"model={args.model}",
            f"trainer.device={args.device}",
            f"trainer.epochs={args.epochs}",
            "trainer.patience=null",
            "trainer.progress=false",
            f"paths.outputs_dir={tmp}",
        ]
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = resolve_config(compose(config_name="train", overrides=overrides))
        seed_everything(int(cfg.seed))
        dm = build_datamodule(cfg)
        method = build_method(cfg, dm)
        trainer = instantiate(cfg.trainer, callbacks=[], checkpoint_path=None)
        print(f"training {type(method).__name__} on {dm} for {args.epochs} epochs")
        t0 = time.perf_counter()
        fit = trainer.fit(method, dm)
        train_s = time.perf_counter() - t0
        losses = fit.losses
        params_dev = {p.device.type for p in method.parameters()}
        check(
            params_dev == {device.type},
            f"parameters on {device.type} after training: {sorted(params_dev)}",
            failures,
        )
        check(
            bool(losses) and all(math.isfinite(v) for v in losses),
            f"loss finite over {len(losses)} epochs (first {losses[0]:.4f}, "
            f"last {losses[-1]:.4f}; {train_s:.2f} s)"
            if losses
            else "no epochs ran",
            failures,
        )

        for mini_batch in [False, True] if args.mini_batch else [False]:
            t0 = time.perf_counter()
            z, y = extract_embeddings(
                method,
                dm,
                encoder_source=cfg.eval.extraction.encoder_source,
                device=args.device,
                mini_batch=mini_batch,
            )
            kind = "mini-batch" if mini_batch else "full-batch"
            check(
                z.device.type == "cpu" and z.dtype == torch.float32,
                f"{kind} embeddings {tuple(z.shape)} {z.dtype} on {z.device} after "
                f"extraction ({time.perf_counter() - t0:.2f} s)",
                failures,
            )
            check(bool(torch.isfinite(z).all()), f"{kind} embeddings finite", failures)

        metrics = configured_probes(cfg.eval, dm, z, y, int(cfg.seed))
        for key in sorted(k for k in metrics if k.endswith("test_acc")):
            print(f"  probe {key} = {metrics[key]:.4f}")
        acc = metrics.get("probe/logreg/test_acc", float("nan"))
        num_classes = int(y.max()) + 1 if y is not None else 1
        check(
            acc > 1.0 / num_classes,
            f"logreg test accuracy {acc:.4f} above chance ({1.0 / num_classes:.4f})",
            failures,
        )
        if device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(device) / 2**20
            print(f"  peak GPU memory: {peak:.1f} MiB")

    print("cuda smoke: " + ("all checks passed" if not failures else f"FAILED: {failures}"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
