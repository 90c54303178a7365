"""Build time of the Fashion-MNIST ε-graph with the faiss and the torch nearest-neighbour search.

Builds :func:`~graphssl.data.knn_graph.epsilon_graph` (average degree 100, cosine, 2·k
candidates per node — the ``dataset=fashion_mnist_knn`` defaults) on the same pixel vectors with
each backend, checks that the edges are identical, and times the search alone (the part the
backend changes) besides the whole build. Then stores the edges with the DataModule's cache
format and times loading them back, which is what a second run with the same parameters pays.

Usage::

    python benchmarks/bench_knn_graph.py                       # all 70 000 images
    python benchmarks/bench_knn_graph.py --num-nodes 10000     # seeded subsample, quick
    python benchmarks/bench_knn_graph.py --no-include-test --threads 2

Reads ``$GRAPHSSL_DATA_DIR/FashionMNIST/raw`` (or ``/work/shared/data``). Prints wall times,
torch/faiss ratios and the load average before and after each step (this machine is shared).
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from graphssl.data.knn_graph import epsilon_graph, load_edge_cache, save_edge_cache
from graphssl.neighbors import NeighborIndex, faiss_available


def _data_dir() -> Path:
    repo = Path(__file__).resolve().parents[1]
    for cand in (os.environ.get("GRAPHSSL_DATA_DIR"), "/work/shared/data", repo / "../shared/data"):
        if cand and (Path(cand) / "FashionMNIST" / "raw").is_dir():
            return Path(cand)
    raise SystemExit("FashionMNIST/raw not found: set GRAPHSSL_DATA_DIR to the shared/data folder")


def _load() -> str:
    return "/".join(f"{v:.2f}" for v in os.getloadavg())


def _pixels(num_nodes: int | None, include_test: bool, seed: int) -> torch.Tensor:
    from torchvision.datasets import FashionMNIST

    root = str(_data_dir())
    parts = [FashionMNIST(root, train=True, download=False)]
    if include_test:
        parts.append(FashionMNIST(root, train=False, download=False))
    images = torch.cat([p.data for p in parts])
    if num_nodes is not None and num_nodes < images.shape[0]:
        gen = torch.Generator().manual_seed(seed)
        keep = torch.randperm(images.shape[0], generator=gen)[:num_nodes].sort().values
        images = images[keep]
    return images.reshape(images.shape[0], -1).float() / 255.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-nodes", type=int, default=None, help="seeded subsample size")
    parser.add_argument("--include-test", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--k", type=float, default=100.0, help="undirected edges per node")
    parser.add_argument("--candidates", type=float, default=2.0)
    parser.add_argument("--metric", choices=("cosine", "l2"), default="cosine")
    parser.add_argument("--chunk-size", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--backends", default="faiss,torch", help="comma-separated, of faiss and torch"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    backends = [b for b in args.backends.split(",") if b]
    if "faiss" in backends and not faiss_available():
        print("faiss is not installed (pip install faiss-cpu): timing the torch backend only")
        backends = [b for b in backends if b != "faiss"]

    x = _pixels(args.num_nodes, args.include_test, args.seed)
    n = x.shape[0]
    width = min(n - 1, math.ceil(args.candidates * args.k))
    width += min(n - 1 - width, max(16, width // 8)) + 1
    print(
        f"Fashion-MNIST ε-graph: {n} images × {x.shape[1]} pixels, k={args.k:g}, "
        f"metric={args.metric}, {width} neighbours searched per row; torch "
        f"{torch.__version__}, {args.threads} thread(s), {os.cpu_count()} CPUs; "
        f"load average {_load()}"
    )
    search: dict[str, float] = {}
    build: dict[str, float] = {}
    edges: dict[str, torch.Tensor] = {}
    unit = F.normalize(x, dim=1) if args.metric == "cosine" else x
    for backend in backends:
        start = time.perf_counter()
        NeighborIndex(
            unit, "ip" if args.metric == "cosine" else "l2", backend, args.chunk_size
        ).search(unit, width)
        search[backend] = time.perf_counter() - start
        print(f"  {backend:5s} search alone  {search[backend]:8.1f} s   (load {_load()})")
        start = time.perf_counter()
        edges[backend] = epsilon_graph(
            x, args.k, args.metric, args.candidates, args.chunk_size, backend
        )
        build[backend] = time.perf_counter() - start
        print(
            f"  {backend:5s} whole build   {build[backend]:8.1f} s   "
            f"{edges[backend].shape[1] // 2} edges   (load {_load()})"
        )
    if {"faiss", "torch"} <= edges.keys():
        same = torch.equal(edges["faiss"], edges["torch"])
        print(
            f"  torch / faiss: search {search['torch'] / search['faiss']:.2f}x, whole build "
            f"{build['torch'] / build['faiss']:.2f}x; identical edges: {same}"
        )
    first = edges[backends[0]]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "graph.pt"
        start = time.perf_counter()
        save_edge_cache(path, first, n)
        saved = time.perf_counter() - start
        start = time.perf_counter()
        loaded = load_edge_cache(path, n)
        took = time.perf_counter() - start
        assert loaded is not None and torch.equal(loaded, first)
        print(
            f"  cache: {path.stat().st_size / 2**20:.0f} MiB, written in {saved:.1f} s, "
            f"loaded and verified in {took:.2f} s   (load {_load()})"
        )


if __name__ == "__main__":
    main()
