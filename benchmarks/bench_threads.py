"""CPU time of the evaluation's probes and diagnostics under different thread budgets.

The default run's evaluation (the diagnostics suite, the logistic-regression grid and the kNN
probe of ``conf/eval/default.yaml``) on the embeddings of an untrained GCN (512 units) on Cora,
public split, timed in one fresh process per setting (thread pools cannot be resized back
reliably) and repeated ``--repeats`` times:

* ``default``: nothing set, torch and every BLAS/OpenMP pool at one thread per core;
* ``torch1``: ``torch.set_num_threads(1)`` alone (what ``num_threads=1`` did before the thread
  budget: NumPy's and SciPy's OpenBLAS and scikit-learn's OpenMP kept one thread per core);
* ``budget1``: ``set_threads(1)``, one thread for torch and every pool;
* ``budget``: ``set_threads(None)``, every pool at torch's default count.

It prints, per setting, the process CPU time (user + system of all threads, from
``resource.getrusage``) and the wall time of the evaluation, each as a ratio to ``default``
measured in the same invocation, the loaded pools' sizes, and how far the metrics are from the
default's (largest absolute difference). The load average is printed before and after: on a
shared machine, wall times are only comparable within one invocation.

Usage::

    OMP_NUM_THREADS= python benchmarks/bench_threads.py --repeats 3
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

REPO = Path(__file__).resolve().parents[1]
SETTINGS = ("default", "torch1", "budget1", "budget")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measure(setting: str, repeats: int) -> dict[str, object]:
    """One setting, in this process: seconds of CPU and wall per evaluation, and its metrics."""
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
    from graphssl.utils import seed_everything

    if setting == "torch1":
        torch.set_num_threads(1)
    elif setting == "budget1":
        set_threads(1)
    elif setting == "budget":
        set_threads(None)
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = resolve_config(compose(config_name="train", overrides=["dataset=cora", "model=dgi"]))
    dm = build_datamodule(cfg)
    evaluation = build_evaluation(cfg)
    seed_everything(0)
    method = build_method(cfg, dm)
    z, y = evaluation.extract(method, dm)
    import scipy.linalg  # noqa: F401  (every pool the probes use is loaded before timing)
    import sklearn.linear_model  # noqa: F401

    metrics: dict[str, float] = {}
    cpu, wall = [], []
    for _ in range(repeats):
        c0, w0 = _cpu(), time.perf_counter()
        metrics = evaluation.diagnose(z)
        metrics.update(evaluation.probe_metrics(dm, z, y, seed=0))
        cpu.append(_cpu() - c0)
        wall.append(time.perf_counter() - w0)
    return {"setting": setting, "cpu": cpu, "wall": wall, "pools": pool_sizes(), "metrics": metrics}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", choices=SETTINGS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.repeats)))
        return
    print(f"load average before: {os.getloadavg()}, cores: {os.cpu_count()}")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    }
    env["PYTHONPATH"] = str(REPO)
    results = {}
    for setting in SETTINGS:
        out = subprocess.run(
            [sys.executable, __file__, "--child", setting, "--repeats", str(args.repeats)],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        results[setting] = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"load average after: {os.getloadavg()}")
    base = results["default"]
    b_cpu, b_wall = min(base["cpu"]), min(base["wall"])
    print(
        f"\n{'setting':<9} {'CPU s (best)':>12} {'CPU ratio':>9} {'wall s (best)':>13} "
        f"{'wall ratio':>10}  max |metric diff|  pools"
    )
    for setting, r in results.items():
        cpu, wall = min(r["cpu"]), min(r["wall"])
        keys = r["metrics"].keys() & base["metrics"].keys()
        same = max((abs(r["metrics"][k] - base["metrics"][k]) for k in keys), default=0.0)
        print(
            f"{setting:<9} {cpu:>12.2f} {cpu / b_cpu:>9.2f} {wall:>13.2f} {wall / b_wall:>10.2f}"
            f"  {same:<16.3g}  {r['pools']}"
        )


if __name__ == "__main__":
    main()
