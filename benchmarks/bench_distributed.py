"""One model on several processes: an epoch with ``trainer.devices`` = N against one process.

Trains a node method (default DGI, GraphSAGE encoder) on neighbour-sampled mini-batches of one
graph at a fixed **global** batch (``--batch`` seed nodes per step) under each configuration
``DxT`` of ``--configs`` (``D`` ranks of ``T`` torch threads each; default ``1x1 1x2 2x1``).
``D = 1`` is the ordinary single-process loop; ``D > 1`` is the spawned multi-process fit of
the train task (:func:`graphssl.training.distributed.launch`, gloo): rank 0 hands its graph and
the sampler's CSC index of it (built once, :func:`graphssl.tasks.devices.share_with_ranks`)
to the other ranks through shared memory and each rank builds its method and trainer with
:func:`graphssl.tasks.devices._rank_worker`, as ``trainer.devices=D`` does, taking ``--batch /
D`` seeds per step, so every configuration takes the same optimizer steps on batches of the
same size. Only training runs (no extraction or evaluation).

Each configuration runs in a child process of its own, one after the other, so that no peak
mixes with another's. The figures:

- **epoch**: the first epoch is a warm-up (the CSC conversion of the graph for one process,
  first-touch allocations) and is left out; the figure is the median over the other epochs, on rank
  0 (every rank waits for the others at each step). With ``--max-batches N`` every epoch of every
  configuration trains on its first ``N`` batches only and the epoch is extrapolated from
  steps/epoch (``seconds × steps / N``; the output says so). Wall seconds, and CPU seconds of the
  whole job (every rank's process CPU time, threads included, summed).
- **peak memory**: for one process, its peak resident set (``ru_maxrss`` from ``os.wait4``).
  For several ranks, the sum of the ranks' peak RSS (each rank's own ``ru_maxrss``), which
  counts the graph in shared memory once per rank that touched it, and the peak over time of the
  job's summed proportional set size (``Pss`` of ``/proc/<pid>/smaps_rollup`` of every process
  of the job, read by this process at each new high of the job's summed RSS and at least every
  ``--pss-interval`` s; it reports the CPU time the sampling took), which charges a page shared
  by ``k`` processes ``1/k`` to each, so that shared memory counts once. The memory target (the
  job at most 1.3× one process) is judged on the PSS figure against one process's peak PSS,
  sampled the same way: the RSS sum would charge the one shared graph to every rank. PSS is
  sampled (status every ``--status-interval`` s), so it can miss a peak shorter than that; the
  per-rank ``RssShmem`` (the shared pages: the graph and the sampler's CSC index) and ``RssAnon``
  (private memory: model, batches, sampler buffers) peaks are printed beside it.

``start-up`` is the time from the child's start to the first epoch (loading the graph; for
several ranks also building the sampler index, spawning them, importing, handing over the graph
and the index, building).

``--ceiling`` adds what data parallelism could reach on this machine without any collective:
``D`` independent one-process trainings (``1xT``) at ``--batch / D`` seeds per step, first one
alone, then ``D`` at the same time. With them an epoch's ratio ``1x1 / DxT`` splits into three
factors: the half batches' extra work (one process alone over the whole epoch at ``B / D``,
against ``1x1`` at ``B``: fewer shared neighbours per batch), the slowdown of running ``D`` at
once (memory bandwidth and caches the cores share: the processes at once, against alone) and
what the ranks' synchronisation adds on top (``DxT`` against the processes at once). The last
splits by CPU time: the ranks' extra CPU over their share of the processes' at once (the
collectives' own work, reading the graph from shared memory) and the time a rank spends off the
CPU, blocked in a collective until the slower rank arrives.

GraphMAE's batches sample one hop more than its encoder has layers (its decoder's; default
fanout ``10 5 5`` on ``synthetic_large``) in every configuration, as several processes need
(docs/distributed.md, "Methods across processes"), so that all of them train the same steps.

Usage::

    python benchmarks/bench_distributed.py [--method dgi] [--dataset cora] [--configs 1x1 1x2 2x1]
        [--epochs 4] [--batch 512] [--fanout 10 10]
    python benchmarks/bench_distributed.py --dataset synthetic_large --max-batches 150 --epochs 4 \\
        --configs 1x1 1x2 2x1            # ogbn-products size (2,449,029 nodes), cached graph
    python benchmarks/bench_distributed.py --configs 1x1 2x1 --ceiling
    python benchmarks/bench_distributed.py --collectives 248000   # gloo's cost per all-reduce

``--collectives N`` trains nothing: two gloo ranks on this machine all-reduce tensors of 2, 257
and ``N`` float32 values (a DGI step's loss mean, its summary's sums and its gradients: 248,000
for SAGE [100 → 256 → 256] and its 256 × 256 discriminator), 300 times each, both ranks ready
at once, and print each rank's CPU and wall milliseconds per call: what the collectives cost
without any wait for a slower rank.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
PRODUCTS = 2_449_029
GiB = 2**30


# ------------------------------------------------------------------------- configurations
@dataclass(frozen=True)
class Config:
    """``devices`` ranks of ``threads`` torch threads each."""

    devices: int
    threads: int

    @property
    def name(self) -> str:
        return f"{self.devices}x{self.threads}"


def parse_config(text: str) -> Config:
    """``"2x1"`` (or ``"2×1"``) as :class:`Config` ``(devices=2, threads=1)``.

    Raises:
        ValueError: not of the form ``DxT`` with positive integers.
    """
    m = re.fullmatch(r"\s*(\d+)\s*[x×X]\s*(\d+)\s*", text)
    if m is None or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise ValueError(
            f"configuration {text!r} is not DEVICESxTHREADS with positive integers "
            f"(e.g. 1x1, 1x2, 2x1)"
        )
    return Config(int(m.group(1)), int(m.group(2)))


def steps_per_epoch(num_nodes: int, global_batch: int, devices: int) -> int:
    """Optimizer steps of an epoch: every node once, ``global_batch // devices`` seeds per rank
    and step (the trainer's count)."""
    per_rank = max(1, global_batch // devices)
    return max(1, math.ceil(num_nodes / (per_rank * devices)))


def extrapolate(seconds: float, batches: int, steps: int) -> float:
    """An epoch of ``steps`` steps from ``seconds`` measured on its first ``batches``."""
    if batches < 1:
        raise ValueError(f"cannot extrapolate from {batches} batches")
    return seconds * steps / batches


# ------------------------------------------------------------------------- memory of a job
_STATUS_KEYS = ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem")
_ROLLUP_KEYS = ("Rss", "Pss", "Pss_Anon", "Pss_File", "Pss_Shmem")


def _read_kb(path: str, keys: Sequence[str]) -> dict[str, int]:
    """``key: value kB`` lines of a ``/proc`` file, in bytes; empty when the process is gone."""
    out: dict[str, int] = {}
    try:
        with open(path) as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key in keys:
                    out[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return {}
    return out


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (``/proc/<pid>/task/*/children``), those still alive."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as fh:
                    todo.extend(int(c) for c in fh.read().split())
        except OSError:
            continue
    return out


class MemorySampler(threading.Thread):
    """Polls every process of the tree rooted at ``pid``: ``/proc/<pid>/status`` every
    ``interval`` s (per-process peaks of RSS, shared and anonymous memory; the peak of their
    summed RSS), and ``smaps_rollup`` (the summed PSS, with its anonymous, file and shared parts)
    whenever the summed RSS passes its highest value at an earlier PSS read by ``margin`` bytes,
    and at least every ``pss_interval`` s. PSS never exceeds RSS, so its peak falls among the
    RSS highs; reading it only there keeps the sampling cheap (``smaps_rollup`` walks every page
    table of a process, tens of milliseconds for a few GiB) while still catching it."""

    def __init__(
        self, pid: int, interval: float = 0.25, pss_interval: float = 10.0, margin: int = 2**25
    ) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval, self.pss_interval, self.margin = (
            pid,
            interval,
            pss_interval,
            margin,
        )
        self.done = threading.Event()
        self.processes: dict[int, dict[str, Any]] = {}
        self.peak_rss_sum = 0
        self.peak_pss: dict[str, int] = {"Pss": 0}
        self.samples = self.pss_samples = 0
        self._pids: list[int] = []
        self._tree_at = self._pss_at = -math.inf
        self._rss_at_pss = -1

    def sample(self, force_pss: bool = False) -> None:
        now = time.monotonic()
        if now - self._tree_at >= 1.0 or force_pss:  # the tree is looked up again each second
            self._pids, self._tree_at = process_tree(self.pid), now
        rss_sum, alive = 0, []
        for p in self._pids:
            status = _read_kb(f"/proc/{p}/status", _STATUS_KEYS)
            if not status:
                continue
            alive.append(p)
            rec = self.processes.setdefault(p, {"cmdline": _cmdline(p)})
            for key, value in status.items():
                rec[key] = max(rec.get(key, 0), value)
            rss_sum += status.get("VmRSS", 0)
        self.peak_rss_sum = max(self.peak_rss_sum, rss_sum)
        self.samples += 1
        high = rss_sum > self._rss_at_pss + self.margin
        if not (force_pss or high or now - self._pss_at >= self.pss_interval):
            return
        pss = dict.fromkeys(_ROLLUP_KEYS, 0)
        for p in alive:
            for key, value in _read_kb(f"/proc/{p}/smaps_rollup", _ROLLUP_KEYS).items():
                pss[key] += value
        self._pss_at, self._rss_at_pss = now, max(self._rss_at_pss, rss_sum)
        self.pss_samples += 1
        if pss["Pss"] > self.peak_pss["Pss"]:
            self.peak_pss = {**pss, "processes": len(alive)}

    def run(self) -> None:
        while not self.done.is_set():
            self.sample()
            self.done.wait(self.interval)

    def stop(self) -> dict[str, Any]:
        self.done.set()
        if self.ident is not None:  # started
            self.join()
        return {
            "peak_rss_sum": self.peak_rss_sum,
            "peak_pss": self.peak_pss,
            "processes": self.processes,
            "samples": self.samples,
            "pss_samples": self.pss_samples,
        }


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def job_memory(rank_maxrss: Sequence[int], sampled: dict[str, Any], wait_maxrss: int) -> dict:
    """The memory figures of one configuration's job, in bytes: ``rss_sum`` (the sum of the
    ranks' own peak RSS; for one process its ``os.wait4`` peak), ``rss_max`` (the largest rank's)
    and ``pss`` (the sampled peak of the job's summed PSS), with the per-process peaks of shared
    (``RssShmem``) and anonymous (``RssAnon``) memory the sampler saw."""
    ranks = list(rank_maxrss) or [wait_maxrss]
    if len(ranks) == 1:
        ranks = [max(ranks[0], wait_maxrss)]
    procs = sampled.get("processes", {})
    return {
        "rss_sum": sum(ranks),
        "rss_max": max(ranks),
        "rank_rss": ranks,
        "pss": sampled.get("peak_pss", {}).get("Pss", 0),
        "pss_parts": {k: v for k, v in sampled.get("peak_pss", {}).items() if k != "Pss"},
        "sampled_rss_sum": sampled.get("peak_rss_sum", 0),
        "shmem": [p.get("RssShmem", 0) for p in procs.values()],
        "anon": [p.get("RssAnon", 0) for p in procs.values()],
        "samples": sampled.get("samples", 0),
        "pss_samples": sampled.get("pss_samples", 0),
        "sampler_cpu_s": sampled.get("sampler_cpu_s", 0.0),
    }


# ------------------------------------------------------------------------- the figures
def summarise(config: Config, child: dict[str, Any], memory: dict[str, Any]) -> dict[str, Any]:
    """One row of the table from a child's measurements: the epoch (wall, and the job's CPU
    summed over ranks) extrapolated from the batches each epoch trained to ``steps`` steps, the
    median over the measured epochs (those after the warm-up)."""
    steps, batches = int(child["steps_per_epoch"]), int(child["batches_per_epoch"])
    ranks = child["ranks"]
    if len(ranks) != config.devices:
        raise ValueError(
            f"{config.name}: measurements of {len(ranks)} ranks, expected {config.devices}"
        )
    epochs = len(ranks[0]["wall"])
    if epochs < 2:
        raise ValueError(f"{config.name}: {epochs} epoch(s) measured; expected a warm-up and more")
    wall = [extrapolate(s, batches, steps) for s in ranks[0]["seconds"][1:]]
    cpu_each = [[b - a for a, b in zip(r["cpu"][:-1], r["cpu"][1:], strict=True)] for r in ranks]
    cpu = [extrapolate(sum(c), batches, steps) for c in list(zip(*cpu_each, strict=True))[1:]]
    return {
        "config": config.name,
        "devices": config.devices,
        "threads": child["threads"],
        "steps": steps,
        "batches": batches,
        "epochs_measured": epochs - 1,
        "epoch_s": statistics.median(wall),
        "epoch_cpu_s": statistics.median(cpu),
        "start_s": child["start_s"],
        "loss": child["loss"],
        "load": child.get("load", (math.nan, math.nan)),
        **{f"mem_{k}": v for k, v in memory.items()},
    }


def targets(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The requirement's checks, where the rows hold the configurations they compare."""
    by = {r["config"]: r for r in rows}
    out: list[str] = []
    one, two, wide = by.get("1x1"), by.get("2x1"), by.get("1x2")
    if one and two:
        speed = one["epoch_s"] / two["epoch_s"]
        out.append(
            f"2x1 epoch vs 1x1: {speed:.2f}× faster (target ≥ 1.7×): "
            f"{'met' if speed >= 1.7 else 'not met'}"
        )
        ratio = two["mem_pss"] / one["mem_pss"] if one["mem_pss"] else math.nan
        out.append(
            f"2x1 peak memory vs 1x1, summed PSS (shared memory once): {ratio:.2f}× "
            f"(target ≤ 1.3×): {'met' if ratio <= 1.3 else 'not met'}; summed peak RSS "
            f"(shared memory once per rank): {two['mem_rss_sum'] / one['mem_rss_sum']:.2f}×"
        )
    if two and wide:
        verdict = "ahead, met" if two["epoch_s"] < wide["epoch_s"] else "behind, not met"
        out.append(
            f"2x1 vs 1x2: {two['epoch_s']:.1f} s against {wide['epoch_s']:.1f} s "
            f"({wide['epoch_s'] / two['epoch_s']:.2f}×): {verdict}"
        )
    return out


def report(rows: Sequence[dict[str, Any]], heading: str, note: str) -> str:
    """The markdown table (ratios against the ``1x1`` row, else the first) and the checks."""
    base = next((r for r in rows if r["config"] == "1x1"), rows[0])
    lines = [
        heading,
        note,
        "",
        f"| config | epoch s | × {base['config']} | epoch CPU s | CPU × {base['config']} | "
        f"peak RSS GiB (Σ ranks) | peak PSS GiB (Σ) | PSS × {base['config']} | "
        "shared GiB (max rank) | start-up s | load (start → end) | last loss |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        ranks = " + ".join(f"{v / GiB:.2f}" for v in r["mem_rank_rss"])
        rss = f"{r['mem_rss_sum'] / GiB:.2f}" + (f" ({ranks})" if r["devices"] > 1 else "")
        pss_ratio = r["mem_pss"] / base["mem_pss"] if base["mem_pss"] else math.nan
        lines.append(
            f"| {r['config']} | {r['epoch_s']:.1f} | {base['epoch_s'] / r['epoch_s']:.2f}× | "
            f"{r['epoch_cpu_s']:.1f} | {r['epoch_cpu_s'] / base['epoch_cpu_s']:.2f}× | {rss} | "
            f"{r['mem_pss'] / GiB:.2f} | {pss_ratio:.2f}× | "
            f"{max(r['mem_shmem'], default=0) / GiB:.2f} | {r['start_s']:.1f} | "
            f"{r['load'][0]:.1f} → {r['load'][1]:.1f} | {r['loss']:.4f} |"
        )
    lines.append("")
    lines.append(
        f"× columns: {base['config']}'s epoch over this row's (speed-up) for wall time; this "
        f"row's over {base['config']}'s for CPU and PSS."
    )
    for r in rows:
        lines.extend(f"- {r['config']}: {line}" for line in memory_lines(r))
    lines.extend(f"- {t}" for t in targets(rows))
    return "\n".join(lines)


def memory_lines(row: dict[str, Any]) -> list[str]:
    """Where a configuration's memory was: its summed PSS at the peak by kind, each process's
    peaks of anonymous (private) and shared memory (processes above 64 MiB: the ranks), and a
    thread count that differs from the one asked for."""
    out = []
    parts = row.get("mem_pss_parts", {})
    if parts:
        out.append(
            f"summed PSS at its peak: anonymous {parts.get('Pss_Anon', 0) / GiB:.2f}, file "
            f"{parts.get('Pss_File', 0) / GiB:.2f}, shared {parts.get('Pss_Shmem', 0) / GiB:.2f} "
            f"GiB over {parts.get('processes', '?')} process(es); {row['mem_samples']} samples "
            f"({row.get('mem_pss_samples', 0)} of PSS), "
            f"{row['mem_sampler_cpu_s']:.1f} CPU s of sampling"
        )
    big = [(a, s) for a, s in zip(row["mem_anon"], row["mem_shmem"], strict=True) if a > 2**26]
    if big:
        each = ", ".join(f"{a / GiB:.2f} / {s / GiB:.2f}" for a, s in big)
        out.append(f"peak RssAnon / RssShmem GiB per process: {each}")
    asked = int(row["config"].split("x")[1])
    if row["threads"] != asked:
        out.append(f"ran {row['threads']} torch thread(s) per rank, not {asked}")
    return out


# ------------------------------------------------------------------------- the child
def overrides(args: argparse.Namespace, config: Config) -> list[str]:
    """The train config of one configuration."""
    out = [
        f"model={args.method}",
        "encoder=sage",
        f"dataset={args.dataset}",
        "trainer.mini_batch=true",
        f"trainer.epochs={args.epochs}",
        f"trainer.batch_size={max(1, args.batch // config.devices)}",
        f"trainer.num_neighbors=[{','.join(map(str, args.fanout))}]",
        f"trainer.devices={config.devices}",
        f"trainer.limit_batches={'null' if args.max_batches is None else args.max_batches}",
        "trainer.patience=null",
        "trainer.progress=false",
        "trainer.log_every=null",
        f"num_threads={config.threads}",
        f"seed={args.seed}",
    ]
    if args.hidden is not None:
        out.append(f"encoder.hidden_channels={args.hidden}")
    out.extend(args.override)
    if args.dataset == "synthetic_large":
        out += [
            f"dataset.num_nodes={args.num_nodes}",
            f"dataset.avg_degree={args.avg_degree}",
            f"dataset.cache_dir={args.cache_dir}",
        ]
    return out


def compose(args: argparse.Namespace, config: Config) -> Any:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from graphssl.tasks.components import resolve_config

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return resolve_config(hydra_compose(config_name="train", overrides=overrides(args, config)))


def make_clock() -> Any:
    """A trainer callback recording, at the start of the fit and the end of each epoch, the
    process's CPU seconds, and each epoch's wall seconds."""
    import torch

    from graphssl.training.trainer import Callback

    class EpochClock(Callback):
        def __init__(self) -> None:
            self.cpu: list[float] = []
            self.wall: list[float] = []
            self.seconds: list[float] = []
            self.threads = 0

        def on_fit_start(self, trainer: Any, method: Any) -> None:
            self.threads = torch.get_num_threads()
            self.cpu.append(time.process_time())
            self.wall.append(time.perf_counter())

        def on_epoch_end(self, trainer: Any, method: Any, result: Any) -> None:
            self.cpu.append(time.process_time())
            self.wall.append(time.perf_counter())
            self.seconds.append(float(result.seconds))

        def record(self) -> dict[str, Any]:
            import resource

            # cpu/wall: the fit's start, then each epoch's end (one more entry than epochs)
            return {
                "cpu": self.cpu,
                "wall": self.wall[1:],
                "seconds": self.seconds,
                "threads": self.threads,
                "maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            }

    return EpochClock()


def _rank(
    rank: int, container: dict, graph: Any, name: str, data_seed: int, index: Any, out: str
) -> Callable[[], None]:
    """A spawned rank: what ``trainer.devices=N`` builds there (the datamodule around rank 0's
    shared graph and sampler index, the method, the trainer), with an epoch clock; its figures
    go to ``out``."""
    from graphssl.tasks.devices import _rank_worker
    from graphssl.training.trainer import Trainer

    fit = _rank_worker(rank, container, graph, name, data_seed, None, index)
    trainer = fit.args[0] if hasattr(fit, "args") and fit.args else None
    if not isinstance(trainer, Trainer):
        raise TypeError(
            f"expected _rank_worker to return a partial over the rank's Trainer, got {fit!r}"
        )
    clock = make_clock()
    trainer.callbacks.append(clock)

    def run() -> None:
        fit()
        Path(out, f"rank{rank}.json").write_text(json.dumps(clock.record()))

    return run


def child(args: argparse.Namespace, config: Config, out: Path) -> dict[str, Any]:
    """Train one configuration in this process (rank 0) and return its measurements."""
    t0 = time.perf_counter()
    load0 = os.getloadavg()[0]
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from graphssl.tasks.components import build_datamodule, build_method, set_threads
    from graphssl.tasks.devices import share_with_ranks
    from graphssl.training import distributed
    from graphssl.utils import allocator, seed_everything

    cfg = compose(args, config)
    set_threads(config.threads)
    seed_everything(int(cfg.seed))
    dm = build_datamodule(cfg)
    dm.setup()
    method = build_method(cfg, dm)
    clock = make_clock()
    trainer = instantiate(cfg.trainer, callbacks=[clock], checkpoint_every=None)
    marks: dict[str, float] = {}

    def main() -> Any:
        marks["start"] = time.perf_counter() - t0
        return trainer.fit(method, dm)

    with allocator(str(cfg.cpu_allocator)):  # as the train task does
        if config.devices == 1:
            fit = main()
        else:  # the train task's spawned fit (graphssl.tasks.devices.fit_on_devices)
            container = OmegaConf.to_container(cfg, resolve=True)
            graph, index = share_with_ranks(trainer, dm)
            fit = distributed.launch(
                main,
                _rank,
                (container, graph, dm.name, dm.seed, index, str(out)),
                config.devices,
                timeout_s=trainer.dist_timeout_s,
                threads=config.threads,
            )
    ranks = [clock.record()]
    ranks += [json.loads((out / f"rank{r}.json").read_text()) for r in range(1, config.devices)]
    num_nodes = int(dm.data.num_nodes)
    steps = steps_per_epoch(num_nodes, args.batch, config.devices)
    batches = fit.num_batches // max(len(fit.epochs), 1)
    return {
        "num_nodes": num_nodes,
        "steps_per_epoch": steps,
        "batches_per_epoch": batches,
        "threads": ranks[0]["threads"],
        "start_s": marks["start"],
        "loss": fit.losses[-1],
        "ranks": ranks,
        "load": (load0, os.getloadavg()[0]),
    }


# ------------------------------------------------------------------------- the parent
def run_config(
    config: Config, args: argparse.Namespace, passed: list[str], work: Path
) -> dict[str, Any]:
    """One configuration in a child process; its row of the table."""
    out = work / config.name
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), *passed, "--child", config.name]
    cmd += ["--out", str(out)]
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": str(config.threads),
        "MLFLOW_DISABLE_TELEMETRY": "true",
    }
    env.setdefault("GRAPHSSL_DOWNLOAD", "false")
    log = out / "child.log"
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO)
        cpu0 = time.process_time()
        sampler = MemorySampler(proc.pid, args.status_interval, args.pss_interval)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        sampled = sampler.stop()
        sampled["sampler_cpu_s"] = time.process_time() - cpu0  # this process only samples
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-15:])
        raise SystemExit(f"{config.name} failed (exit {proc.returncode}); {log}:\n{tail}")
    measured = json.loads((out / "result.json").read_text())
    ranks_rss = [int(r["maxrss"]) for r in measured["ranks"]]
    memory = job_memory(ranks_rss, sampled, usage.ru_maxrss * 1024)
    (out / "memory.json").write_text(json.dumps(sampled, default=str))
    return summarise(config, measured, memory)


def _with_batch(passed: Sequence[str], batch: int) -> list[str]:
    out = list(passed)
    out[out.index("--batch") + 1] = str(batch)
    return out


def run_independent(
    args: argparse.Namespace, passed: Sequence[str], work: Path, wide: Config, together: int
) -> list[dict[str, Any]]:
    """``together`` one-process trainings (``1xT``, ``T`` of ``wide``) at ``--batch / D``
    seeds per step (``D`` of ``wide``), started at the same time; their rows, each epoch over
    its own steps (every node, ``B / D`` per step)."""
    config = Config(1, wide.threads)
    argv = _with_batch(passed, max(1, args.batch // wide.devices))
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": str(config.threads)}
    env["MLFLOW_DISABLE_TELEMETRY"] = "true"
    env.setdefault("GRAPHSSL_DOWNLOAD", "false")
    procs = []
    for i in range(together):
        out = work / f"independent{together}-{i}"
        out.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, str(Path(__file__).resolve()), *argv, "--child", config.name]
        cmd += ["--out", str(out)]
        with (out / "child.log").open("w") as log:  # the child keeps its own descriptor
            procs.append(
                (subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), out)
            )
    rows = []
    for proc, out in procs:
        if proc.wait() != 0:
            raise SystemExit(f"an independent training failed (exit {proc.returncode}); {out}")
        measured = json.loads((out / "result.json").read_text())
        rows.append(summarise(config, measured, {}))
    return rows


def ceiling_lines(
    one: dict[str, Any],
    pair: Sequence[dict[str, Any]],
    single: dict[str, Any] | None = None,
    wide: dict[str, Any] | None = None,
) -> list[str]:
    """The data-parallel ceiling and the factors of ``single`` (``1xT`` at ``B``) over
    ``wide`` (``DxT``): ``one`` is a ``1xT`` training at ``B / D`` alone, ``pair`` the ``D``
    trainings run at once (each row's epoch covers every node at ``B / D``)."""
    devices, alone = len(pair), one["epoch_s"]
    together = max(r["epoch_s"] for r in pair) / devices  # the slowest one's share of an epoch
    lines = [
        f"independent 1x{one['threads']} at batch / {devices}: alone {alone:.1f} s per epoch, "
        f"{devices} at once {together * devices:.1f} s (the slowest): an epoch shared by "
        f"{devices} without collectives takes {together:.1f} s, {alone / together:.2f}× faster",
        f"factor: contention (at once / alone) {together * devices / alone:.2f}×",
    ]
    if single is not None:
        lines.append(
            f"factor: batch / {devices} (alone over {single['config']} at the whole batch) "
            f"{alone / single['epoch_s']:.2f}×; ceiling {single['epoch_s'] / together:.2f}× "
            f"{single['config']}"
        )
    if wide is not None:
        sync = wide["epoch_s"] / together
        lines.append(
            f"factor: synchronisation ({wide['config']} over the trainings at once) {sync:.2f}×"
        )
        if "epoch_cpu_s" in wide and all("epoch_cpu_s" in r for r in pair):
            # a rank's CPU against its share of the trainings' at once; the rest of the factor
            # is time a rank spends off the CPU: blocked in a collective on the slower rank
            share = statistics.fmean(r["epoch_cpu_s"] for r in pair) / devices
            cpu = (wide["epoch_cpu_s"] / devices) / share
            busy = wide["epoch_cpu_s"] / (devices * wide["epoch_s"])
            lines.append(
                f"  of which: the ranks' CPU {cpu:.2f}× their share of the trainings' at once "
                f"(collectives, shared memory), waiting off the CPU {sync / cpu:.2f}× "
                f"(a rank's CPU over the epoch's wall time: {100 * busy:.0f} %)"
            )
    return lines


def _all_reduce_rank(rank: int, sizes: Sequence[int], reps: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    rendezvous = Path(out, "rendezvous")
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)
    timings = {}
    for size in sizes:
        tensor = torch.ones(size)
        for _ in range(20):  # warm-up: the pairs' buffers
            dist.all_reduce(tensor)
        dist.barrier()
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(reps):
            dist.all_reduce(tensor)
        timings[size] = (
            1e3 * (time.process_time() - cpu) / reps,
            1e3 * (time.perf_counter() - wall) / reps,
        )
    dist.destroy_process_group()
    Path(out, f"collectives{rank}.json").write_text(json.dumps(timings))


def collective_costs(size: int, reps: int = 300) -> list[str]:
    """Two gloo ranks all-reducing 2, 257 and ``size`` float32 values ``reps`` times each:
    a line per rank with the CPU and wall milliseconds per call."""
    import multiprocessing

    sizes = [2, 257, size]
    with tempfile.TemporaryDirectory() as out:
        ctx = multiprocessing.get_context("spawn")
        procs = [ctx.Process(target=_all_reduce_rank, args=(r, sizes, reps, out)) for r in range(2)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join()
            if proc.exitcode != 0:
                raise SystemExit(f"an all-reduce rank failed (exit {proc.exitcode})")
        lines = []
        for rank in range(2):
            got = json.loads(Path(out, f"collectives{rank}.json").read_text())
            cells = [f"{n:,} values {got[str(n)][0]:.2f} / {got[str(n)][1]:.2f}" for n in sizes]
            lines.append(f"rank {rank}, CPU / wall ms per all-reduce: " + "; ".join(cells))
    return lines


def prepare(args: argparse.Namespace) -> None:
    """Generate (or find) the cached graph before any configuration is timed."""
    from graphssl.tasks.components import build_datamodule

    dm = build_datamodule(compose(args, Config(1, 1)))
    dm.setup()
    print(f"graph: {int(dm.data.num_nodes):,} nodes, {int(dm.data.num_edges):,} edges", flush=True)


def decoder_hops(method: str) -> int:
    """The hops of message passing that ``conf/model/<method>.yaml``'s method adds after its
    encoder (GraphMAE's decoder: 1), which several processes sample too."""
    from hydra.utils import get_class
    from omegaconf import OmegaConf

    target = OmegaConf.load(REPO / "conf" / "model" / f"{method}.yaml")["_target_"]
    return int(getattr(get_class(target), "decoder_hops", 0))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line, with the dataset's defaults filled in and ``configs`` parsed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", default="dgi")
    parser.add_argument("--dataset", default="cora")
    parser.add_argument("--num-nodes", type=int, default=PRODUCTS, help="synthetic_large only")
    parser.add_argument("--avg-degree", type=float, default=25.26, help="synthetic_large only")
    parser.add_argument("--cache-dir", type=Path, default=REPO / "outputs" / "cache")
    parser.add_argument("--configs", nargs="+", default=["1x1", "1x2", "2x1"])
    parser.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="epochs, the first a warm-up (default: 4, or 2 with --max-batches)",
    )
    parser.add_argument("--max-batches", type=int, default=None)
    parser.add_argument(
        "--batch",
        type=int,
        default=None,
        help="global seed nodes per step (default: 512; 1024 on synthetic_large)",
    )
    parser.add_argument(
        "--fanout",
        type=int,
        nargs="+",
        default=None,
        help="default: 10 10; 10 5 on synthetic_large; and the last again per decoder hop "
        "(GraphMAE: 10 5 5)",
    )
    parser.add_argument("--hidden", type=int, default=None)
    parser.add_argument(
        "--override",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="train-config overrides of every configuration (e.g. encoder.hidden_channels=128)",
    )
    parser.add_argument(
        "--ceiling",
        action="store_true",
        help="also time independent one-process trainings at batch / D, alone and D at once",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--status-interval", type=float, default=0.25, help="seconds between status reads"
    )
    parser.add_argument(
        "--pss-interval",
        type=float,
        default=10.0,
        help="longest time between smaps_rollup reads (also read at each new high of the RSS)",
    )
    parser.add_argument(
        "--collectives",
        type=int,
        metavar="N",
        help="train nothing: time gloo all-reduces of 2, 257 and N values on two ranks",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    large = args.dataset == "synthetic_large"
    args.batch = args.batch or (1024 if large else 512)
    if args.fanout is None:  # one hop per encoder layer, and one per hop of a decoder
        base = [10, 5] if large else [10, 10]
        args.fanout = base + base[-1:] * decoder_hops(args.method)
    args.epochs = args.epochs or (4 if args.max_batches is None else 2)
    args.cache_dir = args.cache_dir.resolve()
    if args.epochs < 2:
        parser.error("--epochs must be >= 2: the first epoch is a warm-up")
    if args.max_batches is not None and args.max_batches < 1:
        parser.error(f"--max-batches must be >= 1, got {args.max_batches}")
    try:
        args.configs = [parse_config(c) for c in args.configs]
    except ValueError as err:
        parser.error(str(err))
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    large = args.dataset == "synthetic_large"
    sys.path.insert(0, str(REPO))
    os.environ.setdefault("GRAPHSSL_DOWNLOAD", "false")

    if args.collectives is not None:
        print(f"load average {os.getloadavg()[0]:.1f}")
        print("\n".join(collective_costs(args.collectives)))
        return
    if args.child == "prepare":
        prepare(args)
        return
    if args.child is not None:
        result = child(args, parse_config(args.child), args.out)
        (args.out / "result.json").write_text(json.dumps(result))
        return

    passed = [
        *("--method", args.method, "--dataset", args.dataset),
        *("--num-nodes", str(args.num_nodes), "--avg-degree", str(args.avg_degree)),
        *("--cache-dir", str(args.cache_dir), "--epochs", str(args.epochs)),
        *("--batch", str(args.batch), "--fanout", *map(str, args.fanout)),
        *("--seed", str(args.seed)),
        *(() if args.max_batches is None else ("--max-batches", str(args.max_batches))),
        *(() if args.hidden is None else ("--hidden", str(args.hidden))),
        *(("--override", *args.override) if args.override else ()),
    ]
    work = Path(tempfile.mkdtemp(prefix="bench_distributed_"))
    if large:
        cmd = [sys.executable, str(Path(__file__).resolve()), *passed, "--child", "prepare"]
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        subprocess.run(cmd, env=env, cwd=REPO, check=True)
    rows = []
    for config in args.configs:
        row = run_config(config, args, passed, work)
        print(f"{config.name}: {json.dumps(row, default=str)}", flush=True)
        rows.append(row)
    what = f"{args.dataset}" + (f" ({args.num_nodes:,} nodes)" if large else "")
    heading = (
        f"{args.method} on {what}, SAGE fanout {args.fanout}, global batch {args.batch}, "
        f"{os.cpu_count()} cores; load average at the end {os.getloadavg()[0]:.1f}"
    )
    steps = rows[0]["steps"]
    if args.max_batches is not None:
        note = (
            f"epoch: median of {args.epochs - 1} epoch(s) after a warm-up one, each trained on its "
            f"first {rows[0]['batches']} batches and extrapolated to {steps} steps/epoch"
        )
    else:
        note = (
            f"epoch: median of {args.epochs - 1} whole epochs ({steps} steps) after a warm-up one"
        )
    print("\n" + report(rows, heading, note))
    if args.ceiling:
        # the last configuration of several ranks, else 2x1: what the independent runs mirror
        spread = next((c for c in reversed(args.configs) if c.devices > 1), Config(2, 1))
        (one,) = run_independent(args, passed, work, spread, 1)
        pair = run_independent(args, passed, work, spread, spread.devices)
        by = {r["config"]: r for r in rows}
        lines = ceiling_lines(one, pair, by.get(f"1x{spread.threads}"), by.get(spread.name))
        print("\n" + "\n".join(f"- {line}" for line in lines))
    print(f"\nlogs in {work}")


if __name__ == "__main__":
    main()
