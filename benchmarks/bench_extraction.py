"""Throughput of node-level embedding extraction: full-batch, layer-wise and mini-batch.

Measures ``extract_embeddings`` in nodes per second on Actor and Cora_ML for 2-layer GCN and
GraphSAGE encoders (hidden ``--hidden``, default 64; random weights: speed does not depend on
training): full-batch (the reference), layer-wise (one layer at a time over all nodes, in
chunks of target nodes) and mini-batch with ``num_neighbors`` ``[-1, -1]`` and ``[10, 10]``,
plus the sampling step alone (iterating the loader, no model). ``max|diff|`` is the largest
difference to the full-batch rows.

``--synthetic-nodes N`` adds a generated ``synthetic_large`` graph of ``N`` nodes
(``--avg-degree``, default ogbn-products' 25.26; 100 features), timed once per mode; there
mini-batch extraction is timed on its first ``--mini-batch-batches`` batches (default 3) and
extrapolated to all of them (marked ``*``), as all neighbours over two hops make each batch
reach most of such a graph. ``--skip-datasets`` leaves out Actor and Cora_ML.

Usage::

    python benchmarks/bench_extraction.py [--data-dir /work/shared/data] [--repeats 3] [--threads 1]
    OMP_NUM_THREADS=1 python benchmarks/bench_extraction.py --threads 1 --skip-datasets \
        --synthetic-nodes 200000 --hidden 256

The raw dataset folders are copied to a temporary directory first (PyG writes ``processed/``
beside ``raw/``, and the shared copy is read-only).
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path

import torch
import torch_geometric
import torch_geometric.typing
from torch import Tensor, nn
from torch_geometric.data import Data

from graphssl.data.base import DataModule
from graphssl.data.node import InMemoryNodeDataModule
from graphssl.data.sampler import make_neighbor_loader
from graphssl.evaluation import extraction
from graphssl.evaluation.extraction import extract_embeddings
from graphssl.methods.base import SSLMethod
from graphssl.models.encode import encode
from graphssl.models.encoders import GCNEncoder, SAGEEncoder

ENCODERS: dict[str, type[nn.Module]] = {"GCN": GCNEncoder, "SAGE": SAGEEncoder}
FANOUTS: list[list[int]] = [[-1, -1], [10, 10]]


class _EncoderOnly(SSLMethod):
    forward_encoder = "encoder"

    def __init__(self, encoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def encoders(self) -> dict[str, nn.Module]:
        return {"encoder": self.encoder}

    def forward(self, batch: Data) -> Tensor:
        return encode(self.encoder, batch)


def _load(data_dir: Path, tmp: Path) -> dict[str, Data]:
    from torch_geometric.datasets import Actor, CitationFull

    out: dict[str, Data] = {}
    for folder, name, load in (
        ("Actor", "Actor", lambda root: Actor(root)),
        ("CitationFull", "Cora_ML", lambda root: CitationFull(root, "Cora_ML")),
    ):
        source = data_dir / folder
        if not source.is_dir():
            raise FileNotFoundError(f"{name}: raw folder not found at {source}")
        root = tmp / folder
        shutil.copytree(source, root)
        out[name] = load(str(root))[0]
    return out


def _time(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``repeats`` runs after one warm-up run."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _iterate(loader: Iterable[Data]) -> int:
    return sum(int(b.num_nodes) for b in loader)


def _row(name: str, graph: Data, encoder: str, mode: str, sec: float, extra: str = "") -> None:
    n, e = graph.num_nodes, graph.num_edges
    print(
        f"{name:<8} {n:>7} {e:>8} {encoder:<7} {mode:<24} {sec:>9.3f} {n / sec:>10,.0f} {extra}",
        flush=True,
    )


def _extract(model: nn.Module, dm: DataModule, fanout: list[int] | str | None) -> Tensor:
    if fanout is None:
        return extract_embeddings(model, dm, encoder_source="encoder", mode="full")[0]
    if isinstance(fanout, str):  # "layerwise"
        return extract_embeddings(model, dm, encoder_source="encoder", mode="layerwise")[0]
    return extract_embeddings(
        model, dm, encoder_source="encoder", mini_batch=True, num_neighbors=fanout
    )[0]


def _bench_dataset(name: str, graph: Data, repeats: int, hidden: int) -> None:
    dm = InMemoryNodeDataModule(graph, name=name)
    n = graph.num_nodes
    for fanout in FANOUTS:
        loader = make_neighbor_loader(graph, fanout, extraction.MINI_BATCH_SIZE)
        sampled = _iterate(loader)
        sec = _time(partial(_iterate, loader), repeats)
        _row(name, graph, "-", f"sampler only {fanout}", sec, f"{sampled / n:>12.1f}")
    for enc_name, enc_cls in ENCODERS.items():
        model = _EncoderOnly(enc_cls(graph.num_features, hidden, num_layers=2))
        full = _extract(model, dm, None)
        _row(
            name, graph, enc_name, "full-batch", _time(partial(_extract, model, dm, None), repeats)
        )
        diff = (_extract(model, dm, "layerwise") - full).abs().max().item()
        sec = _time(partial(_extract, model, dm, "layerwise"), repeats)
        _row(name, graph, enc_name, "layer-wise", sec, f"{'':>12} {diff:>10.1e}")
        for fanout in FANOUTS:
            diff = (_extract(model, dm, fanout) - full).abs().max().item()
            sec = _time(partial(_extract, model, dm, fanout), repeats)
            _row(name, graph, enc_name, f"mini-batch {fanout}", sec, f"{'':>12} {diff:>10.1e}")


def _once(fn: Callable[[], Tensor]) -> tuple[Tensor, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def _mini_batch_extrapolated(
    model: _EncoderOnly, graph: Data, fanout: list[int], batches: int
) -> tuple[float, float]:
    """Seconds of the first ``batches`` batches of mini-batch extraction (sampling and the
    encoder, as ``extract_embeddings`` runs them) extrapolated to all batches, and the nodes
    sampled per seed in those batches."""
    loader = make_neighbor_loader(graph, fanout, extraction.MINI_BATCH_SIZE)
    total = math.ceil(graph.num_nodes / extraction.MINI_BATCH_SIZE)
    model.eval()
    sampled = 0
    start = time.perf_counter()
    with torch.no_grad():
        for batch in itertools.islice(loader, batches):
            encode(model.encoder, batch, seeds_only=True)
            sampled += int(batch.num_nodes)
    sec = time.perf_counter() - start
    done = min(batches, total)
    return sec * total / done, sampled / (done * extraction.MINI_BATCH_SIZE)


def _bench_synthetic(graph: Data, hidden: int, batches: int) -> None:
    name = "synth"
    dm = InMemoryNodeDataModule(graph, name=name)
    for enc_name, enc_cls in ENCODERS.items():
        model = _EncoderOnly(enc_cls(graph.num_features, hidden, num_layers=2))
        full, sec = _once(partial(_extract, model, dm, None))
        _row(name, graph, enc_name, "full-batch", sec)
        lw, sec = _once(partial(_extract, model, dm, "layerwise"))
        diff = (lw - full).abs().max().item()
        _row(name, graph, enc_name, "layer-wise", sec, f"{'':>12} {diff:>10.1e}")
        del full, lw
        for fanout in FANOUTS:
            sec, per_seed = _mini_batch_extrapolated(model, graph, fanout, batches)
            _row(name, graph, enc_name, f"mini-batch {fanout} *", sec, f"{per_seed:>12.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path(os.environ.get("GRAPHSSL_SHARED_DATA", "/work/shared/data")),
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch.set_num_threads (default: torch's choice); 1 is steadier on a shared machine",
    )
    parser.add_argument("--hidden", type=int, default=64, help="encoder width (default: 64)")
    parser.add_argument(
        "--synthetic-nodes",
        type=int,
        default=None,
        help="also time a generated synthetic_large graph of this many nodes",
    )
    parser.add_argument("--avg-degree", type=float, default=25.26)
    parser.add_argument(
        "--mini-batch-batches",
        type=int,
        default=3,
        help="on the synthetic graph: mini-batch batches timed, then extrapolated",
    )
    parser.add_argument("--skip-datasets", action="store_true", help="no Actor / Cora_ML")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    torch.manual_seed(0)
    backend = (
        "pyg-lib"
        if torch_geometric.typing.WITH_PYG_LIB
        else "torch-sparse"
        if torch_geometric.typing.WITH_TORCH_SPARSE
        else "graphssl TorchNeighborSampler"
    )
    print(
        f"torch {torch.__version__}, torch_geometric {torch_geometric.__version__}, "
        f"threads {torch.get_num_threads()}, sampler: {backend}, "
        f"batch size {extraction.MINI_BATCH_SIZE}, median of {args.repeats} runs\n"
    )
    print(f"load average {os.getloadavg()}, hidden {args.hidden}")
    header = (
        f"{'dataset':<8} {'nodes':>7} {'edges':>8} {'encoder':<7} {'mode':<24} "
        f"{'seconds':>9} {'nodes/s':>10} {'sampled/seed':>12} {'max|diff|':>10}"
    )
    print(header)
    print("-" * len(header))
    if not args.skip_datasets:
        with tempfile.TemporaryDirectory() as tmp:
            for name, graph in _load(args.data_dir, Path(tmp)).items():
                _bench_dataset(name, graph, args.repeats, args.hidden)
    if args.synthetic_nodes is not None:
        from graphssl.data.synthetic_large import generate_large_graph

        start = time.perf_counter()
        graph, _ = generate_large_graph(
            args.synthetic_nodes, args.avg_degree, num_classes=47, num_features=100
        )
        print(f"(synthetic graph generated in {time.perf_counter() - start:.1f} s)", flush=True)
        _bench_synthetic(graph, args.hidden, args.mini_batch_batches)
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
