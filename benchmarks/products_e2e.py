"""graphssl end to end on a generated products-size graph, next to a bare PyG loop.

Two measurements, each in its own child process (its peak resident memory is that child's
``ru_maxrss``, read with ``os.wait4``), on ``dataset=synthetic_large`` at ``--num-nodes`` nodes
(default: ogbn-products' 2,449,029; ogbn-arxiv's is 169,343), SAGE [10, 5], batch 1024, one
thread:

- ``graphssl``: without ``--max-batches``, the real command ``python -m graphssl
  dataset=synthetic_large trainer.mini_batch=true trainer.epochs=1 ...``: one epoch, the
  configured extraction (``eval.extraction.mode=auto``: layer-wise at products size, where
  full-batch exceeds the 8 GiB memory budget), diagnostics, probes, figures, MLflow logging.
  Its stage times are the run's ``time/*`` metrics, read back from the run's MLflow store. With
  ``--max-batches N`` the child builds the same datamodule, method and trainer
  (``graphssl.tasks.components``), builds the trainer's kept loader (timed apart: once per run)
  and trains on the first ``N`` batches of the epoch, extrapolated to the full epoch (the output
  says so); the extraction runs as configured: layer-wise in full (it reads each edge once per
  layer), or for mini-batch the first ``--extract-batches`` (default ``N``) batches,
  extrapolated. Diagnostics, probes and figures are not run then: they need every node's
  embedding.
- ``bare``: a plain PyG loop with the same method (model and loss) and optimizer, its batches from
  torch-sparse's compiled sampler, or else the minimal vectorised torch sampler of
  ``bench_sampler.py`` (uniform with replacement, ``torch.unique`` for the new nodes, per-hop
  counts so the encoder trims its layers as it does under graphssl), the same number of batches.

The ratio printed is graphssl's epoch over the bare epoch (target ≤ 1.10), in wall time and,
with ``--max-batches``, in each child's process CPU time (less sensitive to a loaded machine,
since the two children run one after the other). ``--torch-sparse-lib`` (or
``$TORCH_SPARSE_LIB``) names torch-sparse's compiled ``_neighbor_sample_cpu`` library of a
separate environment built against the same torch; it is loaded into the bare child only.

The graph is generated on first use and cached in ``--cache-dir`` (products size: ~2 GB,
~3 minutes).

Usage::

    python benchmarks/products_e2e.py --num-nodes 169343 --method dgi
    python benchmarks/products_e2e.py --max-batches 30 --extract-batches 3 --method dgi
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_sampler import MinimalSampler, load_torch_sparse_op  # noqa: E402

METHODS = ("dgi", "bgrl", "grace", "graphmae")
PRODUCTS, ARXIV = 2_449_029, 169_343


def overrides(args: argparse.Namespace) -> list[str]:
    """The graphssl overrides both children share."""
    return [
        f"model={args.method}",
        "encoder=sage",
        f"encoder.hidden_channels={args.hidden}",
        "dataset=synthetic_large",
        f"dataset.num_nodes={args.num_nodes}",
        f"dataset.avg_degree={args.avg_degree}",
        f"dataset.cache_dir={args.cache_dir}",
        "trainer.mini_batch=true",
        "trainer.epochs=1",
        "trainer.patience=null",
        f"trainer.batch_size={args.batch_size}",
        f"trainer.num_neighbors=[{args.fanout}]",
        f"num_threads={args.threads}",
        "eval.extraction.mode=auto",
        f"seed={args.seed}",
    ]


def compose(args: argparse.Namespace, extra: list[str] = ()) -> Any:  # type: ignore[assignment]
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from graphssl.tasks.components import resolve_config

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = hydra_compose(config_name="train", overrides=[*overrides(args), *extra])
    return resolve_config(cfg)


# ------------------------------------------------------------------------ the bare sampler
class TorchSparseSampler:
    """``torch.ops.torch_sparse.neighbor_sample`` (compiled C++, without replacement), with the
    per-hop counts recovered from its output: nodes are numbered in order of discovery and edges
    appended hop by hop, so hop ``h``'s edges are the run whose targets are hop ``h``'s nodes."""

    def __init__(self, colptr: Tensor, row: Tensor, fanouts: list[int], seed: int) -> None:
        self.colptr, self.row, self.fanouts = colptr, row, fanouts
        torch.manual_seed(seed)  # the op draws from torch's global generator

    def __call__(self, seeds: Tensor) -> tuple[Tensor, Tensor, list[int], list[int]]:
        op = torch.ops.torch_sparse.neighbor_sample
        node, row, col, _ = op(self.colptr, self.row, seeds, self.fanouts, False, True)
        nodes, edges = [seeds.numel()], []
        lo, hi, e0 = 0, seeds.numel(), 0
        for _ in self.fanouts:
            e1 = e0 + int(((col[e0:] >= lo) & (col[e0:] < hi)).sum())
            top = int(row[e0:e1].max()) + 1 if e1 > e0 else hi
            nodes.append(max(top, hi) - hi)
            edges.append(e1 - e0)
            lo, hi, e0 = hi, max(top, hi), e1
        if sum(nodes) != node.numel() or sum(edges) != col.numel():
            raise RuntimeError(
                f"per-hop counts {nodes}/{edges} do not add up to the {node.numel()} nodes and "
                f"{col.numel()} edges torch-sparse returned"
            )
        return node, torch.stack([row, col]), nodes, edges


def load_torch_sparse(lib: str | None) -> str | None:
    """Register torch-sparse's sampler op; ``None`` when it is usable, else why not."""
    try:
        if lib:
            torch.ops.load_library(lib)
        else:
            load_torch_sparse_op()
        torch.ops.torch_sparse.neighbor_sample  # noqa: B018  (raises when not registered)
    except Exception as err:  # ImportError, OSError from a mismatched build, a missing op
        return f"{type(err).__name__}: {err}"
    return None


def child_bare(args: argparse.Namespace) -> dict[str, float]:
    from torch_geometric.data import Data

    from graphssl.tasks.components import build_datamodule, build_method, set_threads
    from graphssl.utils import seed_everything

    cfg = compose(args)
    set_threads(cfg.num_threads)
    seed_everything(int(cfg.seed))
    t0 = time.perf_counter()
    dm = build_datamodule(cfg)
    dm.setup()
    data = dm.data
    dst, perm = torch.sort(data.edge_index[1])
    row = data.edge_index[0][perm]
    del perm
    colptr = torch.zeros(data.num_nodes + 1, dtype=torch.long)
    torch.cumsum(torch.bincount(dst, minlength=data.num_nodes), 0, out=colptr[1:])
    del dst
    load_s = time.perf_counter() - t0
    method = build_method(cfg, dm)
    method.on_train_start(data, 1)
    optimizer = method.configure_optimizer()
    fanouts = [int(k) for k in args.fanout.split(",")]
    why = load_torch_sparse(args.torch_sparse_lib) if args.sampler != "minimal" else "asked"
    if why is not None and args.sampler == "torch_sparse":
        raise SystemExit(f"torch-sparse's sampler cannot run here: {why}")
    sampler_cls = MinimalSampler if why is not None else TorchSparseSampler
    sampler = sampler_cls(colptr, row, fanouts, args.seed)
    print(f"bare sampler: {sampler_cls.__name__} ({why or 'torch-sparse loaded'})", flush=True)
    n = int(data.num_nodes)
    steps = math.ceil(n / args.batch_size)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(args.seed))
    todo = steps if args.max_batches is None else min(steps, args.max_batches)
    method.train()
    sample_s = 0.0
    t0, c0 = time.perf_counter(), time.process_time()
    for seeds in itertools.islice(order.split(args.batch_size), todo):
        ts = time.perf_counter()
        n_id, edge_index, nodes, edges = sampler(seeds)
        batch = Data(x=data.x[n_id], edge_index=edge_index, n_id=n_id, batch_size=seeds.numel())
        batch.num_sampled_nodes, batch.num_sampled_edges = nodes, edges
        sample_s += time.perf_counter() - ts
        optimizer.zero_grad(set_to_none=True)
        loss = method.loss(batch)["loss"]
        loss.backward()
        optimizer.step()
    epoch_s = time.perf_counter() - t0
    cpu_s = time.process_time() - c0
    return {
        "epoch_cpu_seconds": cpu_s,
        "load_seconds": load_s,
        "batches": float(todo),
        "steps_per_epoch": float(steps),
        "epoch_seconds": epoch_s,
        "sample_seconds": sample_s,
        "torch_sparse": float(why is None),
    }


# --------------------------------------------------------------------- graphssl, capped
def child_graphssl_capped(args: argparse.Namespace) -> dict[str, float]:
    from hydra.utils import instantiate

    from graphssl.evaluation.extraction import MINI_BATCH_SIZE, extraction_fanouts
    from graphssl.tasks.components import (
        build_datamodule,
        build_method,
        configured_extraction,
        configured_extraction_plan,
        set_threads,
    )
    from graphssl.training.trainer import Trainer
    from graphssl.utils import allocator, seed_everything

    cfg = compose(args, ["trainer.progress=false"])
    set_threads(cfg.num_threads)
    seed_everything(int(cfg.seed))
    t0 = time.perf_counter()
    dm = build_datamodule(cfg)
    dm.setup()
    load_s = time.perf_counter() - t0
    method = build_method(cfg, dm)
    trainer: Trainer = instantiate(cfg.trainer)
    steps = trainer.steps_per_epoch(dm)
    # build the kept loader (CSC conversion of the graph) before the timed epoch, as the bare
    # loop's CSC is built before its epoch; extrapolating must not multiply a one-off cost
    t0 = time.perf_counter()
    trainer._batches(dm, method, 0)
    loader_s = time.perf_counter() - t0
    real = trainer._batches
    trainer._batches = lambda *a: itertools.islice(real(*a), args.max_batches)  # type: ignore
    t0, c0 = time.perf_counter(), time.process_time()
    with allocator(str(cfg.cpu_allocator)):  # as the train task does
        fit = trainer.fit(method, dm)
    fit_s = time.perf_counter() - t0
    out = {
        "epoch_cpu_seconds": time.process_time() - c0,
        "load_seconds": load_s,
        "loader_seconds": loader_s,
        "batches": float(fit.num_batches),
        "steps_per_epoch": float(steps),
        "train_seconds": fit_s,
        "epoch_seconds": fit.epochs[-1].seconds,
        **{k.split("/")[-1]: v for k, v in fit.throughput().items()},
    }
    plan = configured_extraction_plan(cfg, method, dm)
    out["extract_layerwise"] = float(plan.mode == "layerwise")
    if plan.mode == "layerwise":  # all of it, as configured_extraction runs it
        t0 = time.perf_counter()
        configured_extraction(cfg, method, dm)
        out["extract_seconds"] = time.perf_counter() - t0
        out["extract_batches"] = out["extract_steps"] = 1.0
        out["extract_fanouts"] = -1.0
        return out
    # the first --max-batches batches of mini-batch extraction, as configured_extraction runs it
    method.eval()
    prepare = getattr(method, "prepare", None) or getattr(plan.encoder, "prepare", None)
    prepared = prepare(dm.data) if callable(prepare) else dm.data
    fanouts = extraction_fanouts(cfg.eval.extraction.num_neighbors, method)
    t0 = time.perf_counter()
    loader = dm.neighbor_loader(fanouts, batch_size=MINI_BATCH_SIZE, data=prepared)
    done = 0
    with torch.no_grad():
        for batch in itertools.islice(loader, args.extract_batches or args.max_batches):
            method(batch)
            done += 1
    out["extract_batches"] = float(done)
    out["extract_seconds"] = time.perf_counter() - t0
    out["extract_steps"] = float(math.ceil(dm.data.num_nodes / MINI_BATCH_SIZE))
    out["extract_fanouts"] = float(fanouts[0])
    return out


# ------------------------------------------------------------------------- the parent
def run_child(cmd: list[str], env: dict[str, str], log: Path) -> tuple[int, float, float]:
    """Run ``cmd``; ``(exit code, wall seconds, peak RSS GiB)`` of that child alone."""
    t0 = time.perf_counter()
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, time.perf_counter() - t0, usage.ru_maxrss / 2**20


def cli_metrics(outputs: Path) -> dict[str, float]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{outputs / 'mlflow.db'}")
    exp = client.get_experiment_by_name("graphssl")
    runs = client.search_runs([exp.experiment_id], order_by=["attributes.start_time DESC"])
    out = dict(runs[0].data.metrics)
    out["extract_layerwise"] = float(runs[0].data.tags.get("extract/mode") == "layerwise")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", choices=METHODS, default="dgi")
    parser.add_argument("--num-nodes", type=int, default=PRODUCTS)
    parser.add_argument(
        "--avg-degree",
        type=float,
        default=25.26,
        help="directed edges per node (ogbn-products 25.26, ogbn-arxiv 13.67)",
    )
    parser.add_argument("--max-batches", type=int, default=None)
    parser.add_argument(
        "--extract-batches",
        type=int,
        default=None,
        help="with --max-batches: extraction batches to time (default: --max-batches)",
    )
    parser.add_argument("--fanout", default="10,5")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", type=Path, default=ROOT / "outputs" / "cache")
    parser.add_argument(
        "--sampler",
        choices=("auto", "torch_sparse", "minimal"),
        default="auto",
        help="the bare loop's sampler (auto: torch-sparse's when it loads, else the minimal one)",
    )
    parser.add_argument(
        "--torch-sparse-lib",
        default=os.environ.get("TORCH_SPARSE_LIB"),
        help="path of torch-sparse's compiled _neighbor_sample_cpu library to load",
    )
    parser.add_argument("--only", choices=("graphssl", "bare"), default=None)
    parser.add_argument("--child", choices=("bare", "graphssl"), help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.max_batches is not None and args.max_batches < 1:
        parser.error(f"--max-batches must be >= 1, got {args.max_batches}")
    args.cache_dir = args.cache_dir.resolve()

    if args.child is not None:
        fn = child_bare if args.child == "bare" else child_graphssl_capped
        args.result.write_text(json.dumps(fn(args)))
        return

    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_DISABLE_TELEMETRY": "true"}
    env.setdefault("OMP_NUM_THREADS", str(args.threads))
    work = Path(tempfile.mkdtemp(prefix="products_e2e_"))
    print(
        f"{args.method}, {args.num_nodes:,} nodes, SAGE [{args.fanout}] hidden {args.hidden}, "
        f"batch {args.batch_size}, {args.threads} thread(s); load average {os.getloadavg()}",
        flush=True,
    )
    here = [sys.executable, str(Path(__file__).resolve())]
    passed = [
        *("--method", args.method, "--num-nodes", str(args.num_nodes)),
        *("--avg-degree", str(args.avg_degree)),
        *("--fanout", args.fanout, "--batch-size", str(args.batch_size)),
        *("--hidden", str(args.hidden), "--threads", str(args.threads)),
        *("--seed", str(args.seed), "--cache-dir", str(args.cache_dir)),
        *(() if args.max_batches is None else ("--max-batches", str(args.max_batches))),
        *(() if args.extract_batches is None else ("--extract-batches", str(args.extract_batches))),
        *("--sampler", args.sampler),
        *(("--torch-sparse-lib", args.torch_sparse_lib) if args.torch_sparse_lib else ()),
    ]
    res: dict[str, dict[str, float]] = {}
    for name in ("graphssl", "bare"):
        if args.only not in (None, name):
            continue
        out = work / f"{name}.json"
        if name == "graphssl" and args.max_batches is None:
            outputs = work / "outputs"
            cmd = [sys.executable, "-m", "graphssl", *overrides(args)]
            cmd += [f"hydra.run.dir={work / 'run'}", "trainer.progress=false"]
            rc, wall, rss = run_child(
                cmd, {**env, "GRAPHSSL_OUTPUTS": str(outputs)}, work / "g.log"
            )
            if rc != 0:
                sys.exit(f"graphssl failed ({rc}); see {work / 'g.log'}")
            m = cli_metrics(outputs)
            steps = math.ceil(args.num_nodes / args.batch_size)
            keep = ("time/", "mem/", "data/", "train/epoch_seconds", "extract_layerwise")
            r = {k: v for k, v in m.items() if k.startswith(keep)}
            r |= {"batches": float(steps), "steps_per_epoch": float(steps), "wall": wall}
            r["epoch_seconds"] = m["train/epoch_seconds"]
        else:
            cmd = [*here, *passed, "--child", name, "--result", str(out)]
            rc, wall, rss = run_child(cmd, env, work / f"{name}.log")
            if rc != 0:
                sys.exit(f"{name} child failed ({rc}); see {work / f'{name}.log'}")
            r = json.loads(out.read_text()) | {"wall": wall}
        r["peak_rss_gb"] = rss
        res[name] = r
        print(f"{name}: {json.dumps(r, sort_keys=True)}", flush=True)
    report(args, res)
    print(f"load average {os.getloadavg()}; logs in {work}")


def report(args: argparse.Namespace, res: dict[str, dict[str, float]]) -> None:
    def full(
        r: dict[str, float], key: str, batches: str = "batches", steps: str = "steps_per_epoch"
    ):
        return r[key] * r[steps] / max(r[batches], 1.0)

    capped = args.max_batches is not None
    note = f" (measured on {args.max_batches} batches, extrapolated to the epoch)" if capped else ""
    rows: list[tuple[str, str]] = []
    g, b = res.get("graphssl"), res.get("bare")
    if g is not None:
        if "load_seconds" in g:
            rows.append(("graphssl load + setup", f"{g['load_seconds']:.1f} s"))
        if "loader_seconds" in g:
            rows.append(("graphssl loader build (once per run)", f"{g['loader_seconds']:.1f} s"))
        rows.append(
            (
                f"graphssl epoch{note}",
                f"{full(g, 'epoch_seconds'):.1f} s ({g['batches']:.0f} batches)",
            )
        )
        if "batches_per_second" in g or "time/batches_per_second" in g:
            bps = g.get("batches_per_second", g.get("time/batches_per_second"))
            rows.append(("graphssl batches/s", f"{bps:.2f}"))
        if capped and g.get("extract_layerwise"):
            rows.append(("extraction, layer-wise (all nodes)", f"{g['extract_seconds']:.1f} s"))
        elif capped:
            rows.append(
                (
                    f"extraction, mini-batch [{'all' if g['extract_fanouts'] < 0 else 'capped'}]"
                    f" (measured on {g['extract_batches']:.0f} batches, extrapolated)",
                    f"{full(g, 'extract_seconds', 'extract_batches', 'extract_steps'):.1f} s",
                )
            )
            rows.append(("diagnostics, probes, figures", "not run (need every embedding)"))
        else:
            mode = "layer-wise" if g.get("extract_layerwise") else "not layer-wise"
            for key in ("extract", "diagnostics", "probe", "figures", "total"):
                name = f"extract ({mode})" if key == "extract" else key
                rows.append((name, f"{g.get(f'time/{key}_seconds', math.nan):.1f} s"))
            rows.append(("train (fit, with loader setup)", f"{g['time/train_seconds']:.1f} s"))
            rows.append(("graphssl process wall", f"{g['wall']:.1f} s"))
        rows.append(("graphssl peak RSS", f"{g['peak_rss_gb']:.2f} GiB"))
    if b is not None:
        which = "torch-sparse" if b.get("torch_sparse") else "minimal torch"
        rows.append((f"bare PyG epoch, {which} sampler{note}", f"{full(b, 'epoch_seconds'):.1f} s"))
        rows.append(("bare peak RSS", f"{b['peak_rss_gb']:.2f} GiB"))
    if g is not None and b is not None:
        ratio = full(g, "epoch_seconds") / full(b, "epoch_seconds")
        rows.append(("graphssl epoch / bare epoch (target <= 1.10)", f"{ratio:.3f}"))
        if "epoch_cpu_seconds" in g and "epoch_cpu_seconds" in b:
            cpu = g["epoch_cpu_seconds"] / b["epoch_cpu_seconds"]
            rows.append(
                ("the same ratio in process CPU time (less sensitive to load)", f"{cpu:.3f}")
            )
    print(f"\n| {args.method}, {args.num_nodes:,} nodes | |\n|---|---|")
    for k, v in rows:
        print(f"| {k} | {v} |")


if __name__ == "__main__":
    main()
