"""Throughput of image embedding extraction: ``extract_embeddings`` vs a bare timm loop.

Both iterate the same ``ImageDataModule.eval_dataloader()`` (Fashion-MNIST rows, normalised
batches, fixed order) with the same randomly initialised timm backbone in eval mode under
``torch.no_grad()``; the bare loop only runs ``encoder(x)`` and concatenates the outputs, so the
difference is what ``extract_embeddings`` adds (setup, device moves, mode bookkeeping, label
checks). Runs alternate between the two and the median of ``--repeats`` is reported, in images
per second. Target: overhead <= 5 %.

Usage::

    python benchmarks/vision_extraction_speed.py [--encoder resnet10t] [--subset 10000]
        [--test-subset 2000] [--batch-size 1024] [--repeats 5] [--threads 1]

Fashion-MNIST is read from ``$GRAPHSSL_DATA_DIR`` (default ``../shared/data``); ``--digits``
uses scikit-learn's bundled digits instead (upsampled to 28x28).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch

from graphssl.data.images import DigitsDataModule, FashionMNISTDataModule, ImageDataModule
from graphssl.evaluation.extraction import extract_embeddings
from graphssl.methods.simclr import SimCLR
from graphssl.models.vision import TimmEncoder

REPO = Path(__file__).resolve().parents[1]


def bare_loop(encoder: torch.nn.Module, dm: ImageDataModule) -> torch.Tensor:
    encoder.eval()
    rows = []
    with torch.no_grad():
        for x, _ in dm.eval_dataloader():
            rows.append(encoder(x))
    return torch.cat(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--encoder", default="resnet10t", help="timm architecture")
    parser.add_argument("--subset", type=int, default=10000, help="training-pool images")
    parser.add_argument("--test-subset", type=int, default=2000, help="test images")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--digits", action="store_true", help="use sklearn digits")
    args = parser.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    dm: ImageDataModule
    if args.digits:
        dm = DigitsDataModule(image_size=28, eval_batch_size=args.batch_size)
    else:
        data_dir = os.environ.get("GRAPHSSL_DATA_DIR", str(REPO.parent / "shared" / "data"))
        dm = FashionMNISTDataModule(
            data_dir=data_dir,
            subset=args.subset,
            test_subset=args.test_subset,
            eval_batch_size=args.batch_size,
        )
    dm.setup()
    torch.manual_seed(0)
    method = SimCLR(TimmEncoder(args.encoder, in_chans=dm.in_chans))
    n = len(dm)
    print(
        f"{dm.name}: {n} images {tuple(dm.images[0].shape)}, batch {args.batch_size}; "
        f"{args.encoder} (D={method.backbone.out_channels}); threads={torch.get_num_threads()}"
    )

    # warm-up (allocator, oneDNN primitives) and a correctness check
    z, y = extract_embeddings(method, dm)
    ref = bare_loop(method.backbone, dm)
    assert z.shape == (n, method.backbone.out_channels) and y is not None
    max_diff = float((z - ref).abs().max())

    bare, extract = [], []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        bare_loop(method.backbone, dm)
        bare.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        extract_embeddings(method, dm)
        extract.append(time.perf_counter() - t0)
    t_bare, t_extract = statistics.median(bare), statistics.median(extract)
    overhead = t_extract / t_bare - 1
    print(f"  bare no_grad loop     {n / t_bare:9.0f} images/s  (median {t_bare:.2f} s)")
    print(f"  extract_embeddings    {n / t_extract:9.0f} images/s  (median {t_extract:.2f} s)")
    verdict = "met" if overhead <= 0.05 else "NOT met"
    print(f"  overhead {100 * overhead:+.1f} %  (target <= 5 %: {verdict})")
    print(f"  all runs bare    {[round(t, 2) for t in bare]}")
    print(f"  all runs extract {[round(t, 2) for t in extract]}")
    print(f"  max |extract - bare| = {max_diff:.2e}")


if __name__ == "__main__":
    main()
