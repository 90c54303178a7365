"""CPU and wall time of training, diagnostics and probes under graphssl's thread settings.

One fresh process per setting (thread pools and OpenMP's wait policy are fixed when the
libraries load), each repeated ``--repeats`` times, on Cora's public split with the default
run's model (DGI, a one-layer 512-unit GCN, full batch):

* ``default``: what ``graphssl`` does with ``num_threads=null``: torch and every BLAS/OpenMP
  pool at one thread per core, ``OMP_WAIT_POLICY=PASSIVE`` (:mod:`graphssl._startup`);
* ``spin``: the same pools with the OpenMP runtime's own wait policy (``OMP_WAIT_POLICY``
  unset: idle threads spin before they sleep);
* ``one``: ``num_threads=1``, one thread for torch and every pool.

Stages: ``train`` (``--epochs`` epochs of the Trainer, after one warm-up epoch), ``diagnostics``
(the default diagnostics suite on the trained embeddings) and ``probes`` (the default probes:
the logistic-regression grid and the kNN probe). Per stage and setting it prints the process
CPU time (user + system of all threads, ``resource.getrusage``) and the wall time, best of the
repeats, each as a ratio to ``one`` measured in the same invocation, and how far the metrics are
from ``one``'s. The load average is printed before and after: on a shared machine, times are
only comparable within one invocation.

Usage::

    python benchmarks/bench_threads.py --repeats 3
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[1]
SETTINGS = ("default", "spin", "one")
STAGES = ("train", "diagnostics", "probes")
#: variables that would fix the pools' sizes before the settings choose them
THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measure(setting: str, repeats: int, epochs: int) -> dict[str, object]:
    """One setting, in this process: per stage, seconds of CPU and wall of each repeat, and
    the diagnostics' and probes' metrics."""
    if setting != "spin":
        import graphssl._startup  # noqa: F401  (as the console entries, before torch loads)
    import torch
    from hydra import compose, initialize_config_dir

    from graphssl.tasks.components import (
        build_datamodule,
        build_evaluation,
        build_method,
        resolve_config,
        set_threads,
    )
    from graphssl.threads import pool_sizes
    from graphssl.training.trainer import Trainer
    from graphssl.utils import seed_everything

    set_threads(1 if setting == "one" else None)
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = resolve_config(compose(config_name="train", overrides=["dataset=cora", "model=dgi"]))
    dm = build_datamodule(cfg)
    evaluation = build_evaluation(cfg)
    seed_everything(0)
    method = build_method(cfg, dm)
    Trainer(epochs=1, progress=False, log_every=None).fit(method, dm)  # warm-up
    import scipy.linalg  # noqa: F401  (every pool the probes use is loaded before timing)
    import sklearn.linear_model  # noqa: F401

    times: dict[str, dict[str, list[float]]] = {s: {"cpu": [], "wall": []} for s in STAGES}
    metrics: dict[str, float] = {}

    def timed(stage: str, fn: Callable[[], T]) -> T:
        c0, w0 = _cpu(), time.perf_counter()
        out = fn()
        times[stage]["cpu"].append(_cpu() - c0)
        times[stage]["wall"].append(time.perf_counter() - w0)
        return out

    for _ in range(repeats):
        seed_everything(0)
        trained = build_method(cfg, dm)
        trainer = Trainer(epochs=epochs, progress=False, log_every=None)
        timed("train", functools.partial(trainer.fit, trained, dm))
        z, y = evaluation.extract(trained, dm)
        metrics = dict(timed("diagnostics", functools.partial(evaluation.diagnose, z)))
        probes = functools.partial(evaluation.probe_metrics, dm, z, y, seed=0)
        metrics.update(timed("probes", probes))
    return {
        "setting": setting,
        "times": times,
        "pools": pool_sizes(),
        "wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "torch_threads": torch.get_num_threads(),
        "metrics": metrics,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=20, help="timed training epochs")
    parser.add_argument("--child", choices=SETTINGS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.repeats, args.epochs)))
        return
    print(f"load average before: {os.getloadavg()}, cores: {os.cpu_count()}")
    env = {k: v for k, v in os.environ.items() if k not in THREAD_ENV}
    env["PYTHONPATH"] = str(REPO)
    results = {}
    for setting in SETTINGS:
        options = ["--repeats", str(args.repeats), "--epochs", str(args.epochs)]
        out = subprocess.run(
            [sys.executable, __file__, "--child", setting, *options],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        results[setting] = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"load average after: {os.getloadavg()}")
    base = results["one"]
    print(
        f"\n{'stage':<12} {'setting':<8} {'CPU s':>7} {'× one':>6} {'wall s':>7} {'× one':>6}"
        f"  {'max |metric diff|':>17}  wait policy, torch threads"
    )
    for stage in STAGES:
        b_cpu, b_wall = min(base["times"][stage]["cpu"]), min(base["times"][stage]["wall"])
        for setting, r in results.items():
            cpu, wall = min(r["times"][stage]["cpu"]), min(r["times"][stage]["wall"])
            keys = r["metrics"].keys() & base["metrics"].keys()
            diff = max((abs(r["metrics"][k] - base["metrics"][k]) for k in keys), default=0.0)
            print(
                f"{stage:<12} {setting:<8} {cpu:>7.2f} {cpu / b_cpu:>6.2f} {wall:>7.2f}"
                f" {wall / b_wall:>6.2f}  {diff:>17.3g}  {r['wait_policy']}, {r['torch_threads']}"
            )


if __name__ == "__main__":
    main()
