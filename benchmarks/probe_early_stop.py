"""Does a change to the logistic-regression probe change what it selects?

For every finished training run of an MLflow store's experiment that stored its embeddings
(the quality benchmark's store: ``benchmarks/quality.py --store DIR``), the run's own
``logreg`` probe (from its stored ``config.yaml``: grid, selection by validation split or inner
cross-validation, seed) is fitted again on the stored embeddings twice, on the run's own splits
(every fold of a graph dataset). ``--compare early-stop`` (the default): walking the whole grid
(``early_stop=null``) and ending the walk after ``--early-stop`` values in a row scoring below
the best so far. ``--compare solver``: with the run's own early stop, the L-BFGS solver as
before (``torch.optim.LBFGS`` on ``[n, D + 1]`` rows, ``bench_probes.solver_as_before``) and
as now. Per run it prints the selected L2 strength (per fold for graph datasets) and the test
accuracy of both, and the probe's CPU time; per (method, dataset) how many runs kept their
selection, the largest change of a run's test accuracy and the change of the row's mean, in
points, against the 0.1-point tolerance (on the row's mean: the figure the quality table
shows), and the CPU ratio. Nothing is logged to the store.

Usage::

    python benchmarks/probe_early_stop.py --store outputs/quality
    python benchmarks/probe_early_stop.py --store outputs/quality --early-stop 3 --filter \\
        "params.\\`dataset.name\\` = 'Cora'"
    python benchmarks/probe_early_stop.py --store outputs/quality --compare solver

Real data comes from ``$GRAPHSSL_DATA_DIR`` (default: ``../shared/data`` beside the repository).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: what a change of test accuracy may reach without changing the quality table (points)
TOLERANCE = 0.1


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def selected(metrics: dict[str, float], probe: str = "logreg") -> str:
    """The selected L2 strength(s): one value, or one per fold (``weight_decay_fold<i>``)."""
    folds = sorted(
        (k for k in metrics if k.startswith(f"probe/{probe}/weight_decay_fold")),
        key=lambda k: int(k.rsplit("fold", 1)[1]),
    )
    if folds:
        return ",".join(f"{metrics[k]:g}" for k in folds)
    value = metrics.get(f"probe/{probe}/weight_decay")
    return "?" if value is None else f"{value:g}"


def probe_twice(
    store: Any, run: Any, early_stop: int, data_dir: str, tmp: str, compare: str = "early-stop"
) -> dict[str, Any] | None:
    """The run's ``logreg`` probe on its stored embeddings twice: without and with the early
    stop (``compare="early-stop"``, as ``whole`` and ``early``), or with the solver as before
    and as now (``compare="solver"``, as ``whole`` and ``early`` too: before, now); ``None`` for
    a run without the probe or the embeddings."""
    import contextlib

    from omegaconf import OmegaConf

    from graphssl.tasks.components import build_datamodule, build_evaluation
    from graphssl.tracking import artifacts
    from graphssl.tracking.embeddings import fetch_embeddings
    from graphssl.utils import seed_everything

    try:
        cfg = artifacts.stored_config(store, run, tmp)
        emb = fetch_embeddings(store, run)
    except FileNotFoundError:
        return None
    if "logreg" not in (cfg.eval.get("probes") or {}) or emb.labels is None:
        return None
    cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    cfg.dataset.data_dir = data_dir
    seed = int(cfg.get("seed", 0))
    seed_everything(seed)
    dm = build_datamodule(cfg)
    out: dict[str, Any] = {"name": run.run_name, "dataset": dm.name}
    own = cfg.eval.probes.logreg.get("early_stop")
    if compare == "solver":
        from bench_probes import solver_as_before  # benchmarks/ is on sys.path (main)

        settings: list[tuple[str, Any, Any]] = [
            ("whole", own, solver_as_before),
            ("early", own, contextlib.nullcontext),
        ]
    else:
        settings = [
            ("whole", None, contextlib.nullcontext),
            ("early", early_stop, contextlib.nullcontext),
        ]
    for label, stop, solver in settings:
        run_cfg = cfg.copy()
        run_cfg.eval.probes = {"logreg": {**run_cfg.eval.probes.logreg, "early_stop": stop}}
        evaluation = build_evaluation(run_cfg)
        c0 = _cpu()
        with solver():
            metrics = evaluation.probe_metrics(dm, emb.embeddings, emb.labels, seed)
        out[label] = {
            "test": 100.0 * metrics["probe/logreg/test_acc"],
            "lambda": selected(metrics),
            "cpu": _cpu() - c0,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, required=True, help="the MLflow store's folder")
    parser.add_argument("--experiment", default="quality-benchmark")
    parser.add_argument("--early-stop", type=int, default=3, help="values below the best")
    parser.add_argument("--filter", default=None, help="an extra MLflow search filter")
    parser.add_argument(
        "--compare",
        choices=["early-stop", "solver"],
        default="early-stop",
        help="whole grid against the early stop, or the solver as before against now",
    )
    args = parser.parse_args(argv)
    if args.early_stop < 1:
        parser.error(f"--early-stop must be >= 1, got {args.early_stop}")
    db = args.store / "mlflow.db"
    if not db.is_file():
        parser.error(f"--store {args.store}: no MLflow store there (expected {db})")
    sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    from graphssl.tracking import artifacts
    from graphssl.tracking.store import TrackingStore

    data_dir = os.environ.get("GRAPHSSL_DATA_DIR", str(REPO.parent / "shared" / "data"))
    store = TrackingStore(f"sqlite:///{db.resolve()}", args.experiment)
    runs = artifacts.select_runs(store, experiment=args.experiment, filter_string=args.filter)
    print(f"load average before: {os.getloadavg()}; {len(runs)} runs in {args.experiment!r}")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for run in runs:
            row = probe_twice(store, run, args.early_stop, data_dir, tmp, args.compare)
            if row is None:
                continue
            rows.append(row)
            w, e = row["whole"], row["early"]
            print(
                f"{row['name']:<36} λ {w['lambda']} → {e['lambda']}; test {w['test']:.2f} → "
                f"{e['test']:.2f}; CPU {w['cpu']:.2f} → {e['cpu']:.2f} s",
                flush=True,
            )
    print(f"load average after: {os.getloadavg()}\n")
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[str(row["name"]).split("-seed")[0]].append(row)
    a, b = ("before", "now") if args.compare == "solver" else ("whole", "early")
    print(
        f"| method-dataset | runs | same λ | largest run change | row mean change (points) | "
        f"CPU {b} / {a} |"
    )
    print("|---|--:|--:|--:|--:|--:|")
    worst = 0.0
    for key, members in sorted(groups.items()):
        same = sum(m["whole"]["lambda"] == m["early"]["lambda"] for m in members)
        change = max(abs(m["whole"]["test"] - m["early"]["test"]) for m in members)
        mean = sum(m["early"]["test"] - m["whole"]["test"] for m in members) / len(members)
        ratio = sum(m["early"]["cpu"] for m in members) / sum(m["whole"]["cpu"] for m in members)
        worst = max(worst, abs(mean))
        print(f"| {key} | {len(members)} | {same} | {change:.2f} | {mean:+.2f} | {ratio:.2f}× |")
    verdict = "met" if worst <= TOLERANCE else "not met"
    print(f"\nlargest change of a row's mean {worst:.2f} points (tolerance {TOLERANCE}): {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
