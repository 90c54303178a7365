"""Where a sweep's time goes: a multirun through the CLI against the same trainings in one bare
process without evaluation.

The sweep is ``graphssl -m model=<methods> dataset=<datasets> seed=<seeds>`` with the default
evaluation (diagnostics, logistic-regression and kNN probes, the untrained baseline, figures)
and MLflow logging, launched with Hydra's basic launcher (one job after another) or, with
``--launcher joblib``, joblib's. The bare process composes the same configs and only trains
them (datamodule, method, :class:`~graphssl.training.trainer.Trainer` without callbacks): the
floor a sweep cannot go below. Both use ``trainer.patience=null`` so every job trains the same
number of epochs, and ``num_threads`` (``--threads``).

It prints jobs per hour, the sweep's wall and CPU time against the bare process's (the ratio is
the sweep's overhead; target 1.25), and the share of each stage of the sweep, from the time/*
metrics every child run logs:

* start-up: what is outside the jobs' MLflow runs (interpreter, imports, Hydra, the sweep's
  parent run): the launcher's wall time (times its slots) minus the runs' durations;
* training, extraction, diagnostics, probes, baseline, figures (and the embeddings artifact):
  ``time/train_seconds``, ``time/extract_seconds``, ``time/diagnostics_seconds``,
  ``time/probe_seconds``, ``time/baseline_seconds``, ``time/figures_seconds``;
* store: the rest of each run (its dataset, model, params and metrics logged, the data loaded).

The MLflow store is created (and migrated) before the clock starts. A second invocation with
the same ``--outputs`` finds the baselines of the first in ``<outputs>/cache/baseline``.

Usage::

    python benchmarks/bench_sweep.py              # 3 methods x 2 datasets x 2 seeds, 50 epochs
    python benchmarks/bench_sweep.py --quick      # 2 methods x Cora x seed 0, 5 epochs
    python benchmarks/bench_sweep.py --launcher joblib --n-jobs 2
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
METHODS = ("dgi", "grace", "bgrl")
DATASETS = ("cora", "citeseer")
SEEDS = (0, 1)
QUICK = {"methods": ("dgi", "grace"), "datasets": ("cora",), "seeds": (0,), "epochs": 5}
EXPERIMENT = "bench_sweep"
STAGES = {
    "training": "time/train_seconds",
    "extraction": "time/extract_seconds",
    "diagnostics": "time/diagnostics_seconds",
    "probes": "time/probe_seconds",
    "baseline": "time/baseline_seconds",
    "figures": "time/figures_seconds",
}
TARGET = 1.25


def common_overrides(epochs: int, threads: int | None) -> list[str]:
    return [
        f"trainer.epochs={epochs}",
        "trainer.patience=null",
        "trainer.progress=false",
        f"num_threads={'null' if threads is None else threads}",
        f"logger.experiment_name={EXPERIMENT}",
    ]


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def bare(jobs: list[dict[str, Any]], epochs: int, threads: int | None) -> None:
    """The trainings of ``jobs`` one after another in this process, nothing else."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from graphssl.tasks.components import (
        build_datamodule,
        build_method,
        resolve_config,
        set_threads,
    )
    from graphssl.utils import allocator, seed_everything

    epochs_run = 0
    for job in jobs:
        overrides = [
            f"model={job['model']}",
            f"dataset={job['dataset']}",
            f"seed={job['seed']}",
            *common_overrides(epochs, threads),
        ]
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
            cfg = resolve_config(compose(config_name="train", overrides=overrides))
        set_threads(cfg.get("num_threads"))
        seed_everything(int(cfg.seed))
        dm = build_datamodule(cfg)
        method = build_method(cfg, dm)
        trainer = instantiate(cfg.trainer, callbacks=[], checkpoint_every=None)
        with allocator(str(cfg.get("cpu_allocator", "reuse"))):
            trainer.fit(method, dm)
        epochs_run += epochs
    print(json.dumps({"jobs": len(jobs), "epochs": epochs_run}))


def child_runs(outputs: Path) -> list[Any]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{outputs / 'mlflow.db'}")
    exp = client.get_experiment_by_name(EXPERIMENT)
    if exp is None:
        return []
    runs = client.search_runs([exp.experiment_id], max_results=10_000)
    return [r for r in runs if "mlflow.parentRunId" in r.data.tags]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="2 methods x 1 dataset x 1 seed x 5 epochs")
    p.add_argument("--epochs", type=int, default=None, help="epochs per job (default 50)")
    p.add_argument("--methods", default=None, help=f"comma list (default {','.join(METHODS)})")
    p.add_argument("--datasets", default=None, help=f"comma list (default {','.join(DATASETS)})")
    p.add_argument("--seeds", default=None, help="comma list (default 0,1)")
    p.add_argument("--launcher", choices=("basic", "joblib"), default="basic")
    p.add_argument("--n-jobs", type=int, default=2, help="joblib workers")
    p.add_argument("--threads", type=int, default=1, help="num_threads of every job (0: null)")
    p.add_argument("--outputs", type=Path, default=None, help="GRAPHSSL_OUTPUTS of the sweep")
    p.add_argument("--skip-bare", action="store_true")
    p.add_argument("--bare-child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    threads = args.threads or None
    methods = tuple(args.methods.split(",")) if args.methods else METHODS
    datasets = tuple(args.datasets.split(",")) if args.datasets else DATASETS
    seeds = tuple(int(s) for s in args.seeds.split(",")) if args.seeds else SEEDS
    epochs = args.epochs if args.epochs is not None else 50
    if args.quick:
        methods = tuple(args.methods.split(",")) if args.methods else QUICK["methods"]
        datasets = tuple(args.datasets.split(",")) if args.datasets else QUICK["datasets"]
        seeds = tuple(int(s) for s in args.seeds.split(",")) if args.seeds else QUICK["seeds"]
        epochs = args.epochs if args.epochs is not None else int(QUICK["epochs"])  # type: ignore[call-overload]
    if args.bare_child:
        bare(json.loads(args.bare_child), epochs, threads)
        return

    outputs = args.outputs or REPO / "outputs" / "bench_sweep" / time.strftime("%Y%m%d-%H%M%S")
    outputs = outputs.resolve()
    outputs.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(
        GRAPHSSL_OUTPUTS=str(outputs),
        MLFLOW_DISABLE_TELEMETRY="true",
        PYTHONPATH=str(REPO) + os.pathsep + env.get("PYTHONPATH", ""),
    )
    env.pop("MLFLOW_TRACKING_URI", None)
    from mlflow.tracking import MlflowClient

    MlflowClient(f"sqlite:///{outputs / 'mlflow.db'}").search_experiments()  # migrate now

    jobs = [{"model": m, "dataset": d, "seed": s} for m in methods for d in datasets for s in seeds]
    n = len(jobs)
    print(
        f"sweep: {n} jobs ({', '.join(methods)} x {', '.join(datasets)} x seeds "
        f"{','.join(map(str, seeds))}), {epochs} epochs, num_threads={threads}, "
        f"launcher {args.launcher}; outputs {outputs}"
    )
    print(f"machine: {os.cpu_count()} cores; load average before {os.getloadavg()}")

    cmd = [
        sys.executable,
        "-m",
        "graphssl",
        "-m",
        f"model={','.join(methods)}",
        f"dataset={','.join(datasets)}",
        f"seed={','.join(map(str, seeds))}",
        *common_overrides(epochs, threads),
    ]
    slots = 1
    if args.launcher == "joblib":
        cmd += ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={args.n_jobs}"]
        slots = args.n_jobs
    before_runs = {r.info.run_id for r in child_runs(outputs)}
    c0, w0 = _children_cpu(), time.perf_counter()
    res = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    sweep_wall, sweep_cpu = time.perf_counter() - w0, _children_cpu() - c0
    if res.returncode != 0:
        sys.exit(f"the sweep failed ({res.returncode}):\n{res.stderr[-4000:]}")
    runs = [r for r in child_runs(outputs) if r.info.run_id not in before_runs]
    print(f"load average after sweep {os.getloadavg()}")

    bare_wall = bare_cpu = float("nan")
    if not args.skip_bare:
        c0, w0 = _children_cpu(), time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                __file__,
                "--bare-child",
                json.dumps(jobs),
                "--epochs",
                str(epochs),
                "--threads",
                str(args.threads),
            ],
            cwd=REPO,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        bare_wall, bare_cpu = time.perf_counter() - w0, _children_cpu() - c0
        print(f"load average after bare {os.getloadavg()}")

    # stages, summed over the jobs
    totals = dict.fromkeys([*STAGES, "store"], 0.0)
    in_runs = 0.0
    for r in runs:
        duration = (r.info.end_time - r.info.start_time) / 1000.0
        in_runs += duration
        staged = 0.0
        for stage, key in STAGES.items():
            value = float(r.data.metrics.get(key, 0.0))
            totals[stage] += value
            staged += value
        totals["store"] += max(0.0, duration - staged)
    startup = max(0.0, sweep_wall * slots - in_runs)
    shares = {"start-up": startup, **totals}
    whole = sum(shares.values())

    print(f"\n{len(runs)} of {n} child runs found")
    print(
        f"sweep wall {sweep_wall:.1f} s, CPU {sweep_cpu:.1f} s; jobs per hour "
        f"{3600.0 * n / sweep_wall:.1f}"
    )
    if not args.skip_bare:
        print(
            f"bare  wall {bare_wall:.1f} s, CPU {bare_cpu:.1f} s; jobs per hour "
            f"{3600.0 * n / bare_wall:.1f}"
        )
        print(
            f"ratio sweep / bare: wall {sweep_wall / bare_wall:.2f}x, CPU "
            f"{sweep_cpu / bare_cpu:.2f}x (target {TARGET}x)"
        )
    print("\nstage        seconds   share")
    for stage, seconds in shares.items():
        print(f"{stage:<12} {seconds:>8.1f}  {100.0 * seconds / whole:>5.1f} %")


if __name__ == "__main__":
    main()
