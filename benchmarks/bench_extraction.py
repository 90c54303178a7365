"""Throughput of node-level embedding extraction: mini-batch (NeighborLoader) vs full-batch.

Measures ``extract_embeddings`` in nodes per second on Actor and Cora_ML for 2-layer GCN and
GraphSAGE encoders (hidden 64, random weights: speed does not depend on training), with
``num_neighbors`` ``[-1, -1]`` and ``[10, 10]``, plus the sampling step alone (iterating the
loader, no model) and the full-batch forward as the reference.

Usage::

    python benchmarks/bench_extraction.py [--data-dir /work/shared/data] [--repeats 3] [--threads 1]

The raw dataset folders are copied to a temporary directory first (PyG writes ``processed/``
beside ``raw/``, and the shared copy is read-only).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path

import torch
import torch_geometric
import torch_geometric.typing
from torch import Tensor, nn
from torch_geometric.data import Data

from graphssl.data.base import DataModule, Split
from graphssl.data.sampler import make_neighbor_loader
from graphssl.evaluation import extraction
from graphssl.evaluation.extraction import extract_embeddings
from graphssl.methods.base import SSLMethod
from graphssl.models.encode import encode
from graphssl.models.encoders import GCNEncoder, SAGEEncoder

ENCODERS: dict[str, type[nn.Module]] = {"GCN": GCNEncoder, "SAGE": SAGEEncoder}
FANOUTS: list[list[int]] = [[-1, -1], [10, 10]]


class _InMemoryNodeDataModule(DataModule):
    """Node-level DataModule around one already loaded graph."""

    def __init__(self, name: str, graph: Data) -> None:
        super().__init__(name)
        self._graph = graph

    def _setup(self) -> None:
        pass

    @property
    def data(self) -> Data:
        return self._graph

    @property
    def num_classes(self) -> int:
        return int(self._graph.y.max()) + 1

    def splits(self) -> Sequence[Split]:
        idx = torch.arange(self._graph.num_nodes)
        return [Split(idx[::3], idx[1::3], idx[2::3])]

    def train_dataloader(self) -> Iterable[Data]:
        return [self._graph]


class _EncoderOnly(SSLMethod):
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
    print(f"{name:<8} {n:>6} {e:>6} {encoder:<7} {mode:<22} {sec:>8.3f} {n / sec:>10,.0f} {extra}")


def _extract(model: nn.Module, dm: DataModule, fanout: list[int] | None) -> Tensor:
    if fanout is None:
        return extract_embeddings(model, dm, encoder_source="encoder")[0]
    return extract_embeddings(
        model, dm, encoder_source="encoder", mini_batch=True, num_neighbors=fanout
    )[0]


def _bench_dataset(name: str, graph: Data, repeats: int) -> None:
    dm = _InMemoryNodeDataModule(name, graph)
    n = graph.num_nodes
    for fanout in FANOUTS:
        loader = make_neighbor_loader(graph, fanout, extraction.MINI_BATCH_SIZE)
        sampled = _iterate(loader)
        sec = _time(partial(_iterate, loader), repeats)
        _row(name, graph, "-", f"sampler only {fanout}", sec, f"{sampled / n:>12.1f}")
    for enc_name, enc_cls in ENCODERS.items():
        model = _EncoderOnly(enc_cls(graph.num_features, 64, num_layers=2))
        full = _extract(model, dm, None)
        _row(
            name, graph, enc_name, "full-batch", _time(partial(_extract, model, dm, None), repeats)
        )
        for fanout in FANOUTS:
            diff = (_extract(model, dm, fanout) - full).abs().max().item()
            sec = _time(partial(_extract, model, dm, fanout), repeats)
            _row(name, graph, enc_name, f"mini-batch {fanout}", sec, f"{'':>12} {diff:>10.1e}")


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
    header = (
        f"{'dataset':<8} {'nodes':>6} {'edges':>6} {'encoder':<7} {'mode':<22} "
        f"{'seconds':>8} {'nodes/s':>10} {'sampled/seed':>12} {'max|diff|':>10}"
    )
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory() as tmp:
        for name, graph in _load(args.data_dir, Path(tmp)).items():
            _bench_dataset(name, graph, args.repeats)


if __name__ == "__main__":
    main()
