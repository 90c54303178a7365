"""Neighbour-sampling throughput: graphssl's sampler, a minimal torch sampler and torch-sparse.

Measures batches per second of the sampling step alone (seeds in, ``n_id`` and the sampled edges
out; no features, no model), one thread, side by side in one run on a seeded random graph of
ogbn-products size (2,449,029 nodes, 61,859,140 directed edges) or ogbn-arxiv size (169,343 nodes,
2,315,598 directed edges):

- ``graphssl``: :class:`graphssl.data.sampler.TorchNeighborSampler` (its ``_sample``, what
  ``NeighborLoader`` calls per batch), without replacement;
- ``minimal``: the ~40-line vectorised torch sampler below (``MinimalSampler``: with
  replacement, ``torch.unique`` to find the new nodes), the floor graphssl must not fall under;
- ``torch_sparse``: ``torch.ops.torch_sparse.neighbor_sample`` (compiled C++, without
  replacement), when ``torch_sparse`` is importable. graphssl never depends on it: run this script
  with the interpreter of a separate environment that has it, with ``PYTHONPATH`` at the
  repository root (torch-geometric installed there with ``--no-deps``; torch-scatter is not
  needed, see :func:`load_torch_sparse_op`).

The graph is symmetric with power-law-skewed degrees (each endpoint drawn as ``N * u**1.5`` then
relabelled by a random permutation) and is cached as a ``.pt`` file in ``--cache-dir`` (building
the products-size one takes about a minute and 2-3 GB of memory). Seeds are a seeded random
permutation of all nodes cut into batches of ``--batch-size``, identical for every sampler. The
samplers run interleaved for ``--rounds`` rounds of ``--batches`` batches each; the median round is
reported.

Usage::

    python benchmarks/bench_sampler.py [--size products|arxiv] [--batches 20] [--rounds 3]
    PYTHONPATH=$PWD /work/tsparse-venv/bin/python benchmarks/bench_sampler.py --batches 10
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor
from torch_geometric.data import Data

from graphssl.data.sampler import TorchNeighborSampler

SIZES: dict[str, tuple[int, int]] = {
    # (nodes, directed edges) of the OGB graph the size is named after
    "products": (2_449_029, 61_859_140),
    "arxiv": (169_343, 2_315_598),
}
FANOUTS: list[list[int]] = [[10, 5], [15, 10, 5]]

SampleFn = Callable[[Tensor], tuple[Tensor, int]]  # seeds -> (n_id, number of sampled edges)


# ---------------------------------------------------------------------------------- the graph
def build_graph(num_nodes: int, num_edges: int, seed: int) -> tuple[Tensor, Tensor]:
    """A seeded symmetric random graph in CSC form: ``(colptr [N + 1], row [E])``, int64."""
    g = torch.Generator().manual_seed(seed)
    pairs = num_edges // 2
    relabel = torch.randperm(num_nodes, generator=g).to(torch.int32)

    def endpoints() -> Tensor:
        u = torch.rand(pairs, generator=g, dtype=torch.float64)
        index = (u.pow_(1.5).mul_(num_nodes)).long().clamp_(max=num_nodes - 1)
        return relabel[index]

    a, b = endpoints(), endpoints()
    dst = torch.cat([a, b])
    src = torch.cat([b, a])
    del a, b
    dst, perm = torch.sort(dst, stable=True)
    row = src[perm].long()
    del src, perm
    deg = torch.bincount(dst.long(), minlength=num_nodes)
    colptr = torch.zeros(num_nodes + 1, dtype=torch.long)
    torch.cumsum(deg, 0, out=colptr[1:])
    return colptr, row


def load_graph(size: str, seed: int, cache_dir: Path) -> tuple[Tensor, Tensor]:
    """The graph of ``size``, from ``cache_dir`` when it was built before."""
    num_nodes, num_edges = SIZES[size]
    path = cache_dir / f"sampler_graph_{size}_seed{seed}.pt"
    if path.exists():
        state = torch.load(path, weights_only=True)
        return state["colptr"].long(), state["row"].long()
    t0 = time.perf_counter()
    colptr, row = build_graph(num_nodes, num_edges, seed)
    print(f"built the {size}-size graph in {time.perf_counter() - t0:.1f} s", flush=True)
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save({"colptr": colptr, "row": row.to(torch.int32)}, tmp)
    tmp.replace(path)
    return colptr, row


# ------------------------------------------------------------------------------ the samplers
class MinimalSampler:
    """A minimal vectorised torch neighbour sampler (with replacement), for reference.

    Per hop, every frontier node draws ``k`` in-neighbours uniformly with replacement
    (``floor(U * deg)``); the nodes not seen before are found with ``torch.unique`` and numbered
    after the current ones, so the seeds come first. Returns PyG-style parts of a batch:
    ``n_id``, ``edge_index`` (local, hop by hop) and the per-hop ``num_sampled_nodes`` /
    ``num_sampled_edges`` (so an encoder can trim its layers, as under graphssl).
    """

    def __init__(self, colptr: Tensor, row: Tensor, fanouts: list[int], seed: int = 0) -> None:
        self.colptr, self.row, self.fanouts = colptr, row, fanouts
        self.generator = torch.Generator().manual_seed(seed)
        self.local = torch.full((colptr.numel() - 1,), -1, dtype=torch.long)

    def __call__(self, seeds: Tensor) -> tuple[Tensor, Tensor, list[int], list[int]]:
        local = self.local
        local[seeds] = torch.arange(seeds.numel())
        n_id, frontier, frontier_local = [seeds], seeds, torch.arange(seeds.numel())
        num_total, rows, cols = seeds.numel(), [], []
        nodes_per_hop, edges_per_hop = [seeds.numel()], []
        for k in self.fanouts:
            start = self.colptr[frontier]
            deg = self.colptr[frontier + 1] - start
            draw = torch.rand(frontier.numel(), k, generator=self.generator)
            mask = (deg > 0).unsqueeze(1).expand(-1, k)
            eid = (start.unsqueeze(1) + (draw * deg.unsqueeze(1)).long())[mask]
            src = self.row[eid]
            new = torch.unique(src[local[src] < 0])
            local[new] = torch.arange(num_total, num_total + new.numel())
            rows.append(local[src])
            cols.append(frontier_local.unsqueeze(1).expand(-1, k)[mask])
            n_id.append(new)
            nodes_per_hop.append(new.numel())
            edges_per_hop.append(src.numel())
            frontier, frontier_local = new, local[new]
            num_total += new.numel()
        nodes = torch.cat(n_id)
        local[nodes] = -1
        edge_index = torch.stack([torch.cat(rows), torch.cat(cols)])
        return nodes, edge_index, nodes_per_hop, edges_per_hop


def graphssl_sampler(colptr: Tensor, row: Tensor, fanouts: list[int], seed: int) -> SampleFn:
    num_nodes = colptr.numel() - 1
    col = torch.repeat_interleave(torch.arange(num_nodes), colptr.diff())
    data = Data(edge_index=torch.stack([row, col]), num_nodes=num_nodes)
    del col
    sampler = TorchNeighborSampler(data, fanouts, seed=seed, is_sorted=True)
    # The sampler keeps a view of edge_index's first row; give it the row tensor itself so the
    # stacked copy is freed.
    sampler.row = row
    del data

    def sample(seeds: Tensor) -> tuple[Tensor, int]:
        out = sampler._sample(seeds)
        return out.node, int(out.row.numel())

    return sample


def load_torch_sparse_op() -> Callable[..., tuple[Tensor, Tensor, Tensor, Tensor]]:
    """``torch.ops.torch_sparse.neighbor_sample``, from an installed torch-sparse.

    ``import torch_sparse`` registers the op; when the package's Python side cannot import
    (it needs torch-scatter, a second long build), its compiled ``_neighbor_sample_cpu``
    library is loaded directly: the same op.

    Raises:
        ImportError: when torch-sparse is not installed or has no such library.
    """
    try:
        import torch_sparse  # noqa: F401  (registers torch.ops.torch_sparse)
    except ImportError as err:
        spec = importlib.util.find_spec("torch_sparse")
        if spec is None or not spec.submodule_search_locations:
            raise
        folder = next(iter(spec.submodule_search_locations))
        lib = importlib.machinery.PathFinder().find_spec("_neighbor_sample_cpu", [folder])
        if lib is None or lib.origin is None:
            raise ImportError(f"torch_sparse in {folder} has no _neighbor_sample_cpu") from err
        torch.ops.load_library(lib.origin)
    return torch.ops.torch_sparse.neighbor_sample  # type: ignore[no-any-return]


def torch_sparse_sampler(colptr: Tensor, row: Tensor, fanouts: list[int], seed: int) -> SampleFn:
    op = load_torch_sparse_op()
    torch.manual_seed(seed)  # the op draws from torch's global generator

    def sample(seeds: Tensor) -> tuple[Tensor, int]:
        node, _, col, _ = op(colptr, row, seeds, fanouts, False, True)
        return node, int(col.numel())

    return sample


def minimal_sampler(colptr: Tensor, row: Tensor, fanouts: list[int], seed: int) -> SampleFn:
    sampler = MinimalSampler(colptr, row, fanouts, seed)

    def sample(seeds: Tensor) -> tuple[Tensor, int]:
        nodes, edge_index, _, _ = sampler(seeds)
        return nodes, int(edge_index.size(1))

    return sample


def torch_sparse_available() -> str | None:
    """``None`` when torch-sparse's sampler can run here, else why not."""
    try:
        load_torch_sparse_op()
    except Exception as err:  # ImportError, an OSError from a mismatched build, a missing op
        return f"{type(err).__name__}: {err}"
    return None


# ---------------------------------------------------------------------------------- measuring
def time_round(sample: SampleFn, batches: list[Tensor]) -> tuple[float, float, float, float]:
    """``(batches/s wall, batches/s of CPU time, mean nodes, mean edges per batch)``."""
    nodes = edges = 0
    t0, c0 = time.perf_counter(), time.process_time()
    for seeds in batches:
        n_id, num_edges = sample(seeds)
        nodes += n_id.numel()
        edges += num_edges
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    n = len(batches)
    return n / wall, n / max(cpu, 1e-9), nodes / n, edges / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="products")
    parser.add_argument("--batches", type=int, default=20, help="timed batches per round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per sampler")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--fanouts",
        default=";".join(",".join(map(str, f)) for f in FANOUTS),
        help="fanout lists separated by ';', e.g. '10,5;15,10,5'",
    )
    parser.add_argument(
        "--samplers",
        default="graphssl,minimal,torch_sparse",
        help="comma-separated subset of graphssl, minimal, torch_sparse",
    )
    parser.add_argument(
        "--cache-dir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "graphssl-bench"
    )
    args = parser.parse_args()
    if args.batches < 1 or args.rounds < 1:
        parser.error(f"--batches and --rounds must be >= 1, got {args.batches}, {args.rounds}")
    torch.set_num_threads(args.threads)

    fanout_lists = [[int(k) for k in f.split(",")] for f in args.fanouts.split(";") if f]
    names = [s.strip() for s in args.samplers.split(",") if s.strip()]
    factories = {
        "graphssl": graphssl_sampler,
        "minimal": minimal_sampler,
        "torch_sparse": torch_sparse_sampler,
    }
    unknown = sorted(set(names) - set(factories))
    if unknown:
        parser.error(f"unknown samplers {unknown}; expected a subset of {sorted(factories)}")
    if "torch_sparse" in names and (why := torch_sparse_available()) is not None:
        print(f"torch_sparse: not measured ({why})")
        names.remove("torch_sparse")

    print(
        f"machine: nproc={os.cpu_count()}, torch threads={torch.get_num_threads()}, "
        f"torch {torch.__version__}, load average {os.getloadavg()}"
    )
    colptr, row = load_graph(args.size, args.seed, args.cache_dir)
    num_nodes = colptr.numel() - 1
    deg = colptr.diff()
    print(
        f"graph: {args.size} size, {num_nodes:,} nodes, {row.numel():,} directed edges, "
        f"mean in-degree {row.numel() / num_nodes:.1f}, max {int(deg.max()):,}"
    )
    order = torch.randperm(num_nodes, generator=torch.Generator().manual_seed(args.seed + 1))
    needed = args.batches + 2  # two warm-up batches
    batches = list(order[: needed * args.batch_size].split(args.batch_size))
    warmup, timed = batches[:2], batches[2:needed]

    results: dict[tuple[str, str], float] = {}
    for fanouts in fanout_lists:
        key = str(fanouts)
        samplers = {name: factories[name](colptr, row, fanouts, args.seed) for name in names}
        for sample in samplers.values():
            time_round(sample, warmup)
        per_round: dict[str, list[tuple[float, float, float, float]]] = {n: [] for n in samplers}
        for _ in range(args.rounds):
            for name, sample in samplers.items():
                per_round[name].append(time_round(sample, timed))
        print(
            f"\nfanouts {key}, batch {args.batch_size}, {args.batches} batches x {args.rounds} "
            f"rounds (median round; 'cpu': batches per second of this process's CPU time)"
        )
        for name, rounds in per_round.items():
            wall = statistics.median(r[0] for r in rounds)
            cpu = statistics.median(r[1] for r in rounds)
            results[(key, name)] = wall
            results[(key, name + ":cpu")] = cpu
            print(
                f"  {name:<13} {wall:8.2f} batches/s wall, {cpu:8.2f} cpu  (wall rounds: "
                f"{', '.join(f'{r[0]:.2f}' for r in rounds)}; {rounds[0][2]:,.0f} nodes, "
                f"{rounds[0][3]:,.0f} edges per batch)"
            )
        for other in ("minimal", "torch_sparse"):
            if (key, "graphssl") in results and (key, other) in results:
                wall_ratio = results[(key, "graphssl")] / results[(key, other)]
                cpu_ratio = results[(key, "graphssl:cpu")] / results[(key, other + ":cpu")]
                print(f"  graphssl / {other}: {wall_ratio:.2f}x wall, {cpu_ratio:.2f}x cpu")
        del samplers
    print(f"\nload average {os.getloadavg()}")


if __name__ == "__main__":
    main()
