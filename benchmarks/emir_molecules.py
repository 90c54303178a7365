"""Study: does EMIR informativeness on HIV molecules rank graph embedders like MoleculeNet tasks?

The EMIR paper's molecular experiment (Darrin et al., NeurIPS 2024) at a small scale: a zoo of
graph-level embedders (InfoGraph and GraphCL with GIN encoders of several widths, depths and
training lengths, plus untrained GIN encoders) is trained on a seeded subset of HIV's molecules
with the preset ``experiment=emir_molecules`` (the same molecules are the comparison's reference
rows; the paper used ZINC). Each stored model is then evaluated on the seven MoleculeNet tasks
(``from_run=<id> dataset=<task> trainer.epochs=0``: the datasets' seeded 80/10/10 splits,
logistic regression scored by average precision for BACE, BBBP, ClinTox and Tox21, ridge
regression scored by RMSE for ESOL, FreeSolv and Lipo). Per task the embedders are ranked
(1 = best); their mean rank is the downstream score. :func:`graphssl.tasks.compare.run_compare`
then ranks the embedders by informativeness on the HIV rows (in-sample, the authors' figure, and
held-out) and by the cross-encoder L2 baseline, and correlates each ranking with the mean
downstream rank (logged to every member run as ``downstream/neg_mean_rank``, higher = better, so
a positive correlation means agreement for informativeness and a negative one for L2).
A second comparison on a seeded subset of the reference rows (``--small-rows``) shows how the
answer moves with the number of rows.

Everything goes to one MLflow store: a study run ``emir_molecules`` (experiment
``emir_molecules``, tagged ``graphssl.role=sweep``) with the member runs as its children, the
comparison runs (``graphssl.role=compare``) and, in the experiment ``emir_molecules_tasks``, one
run per (member, task). The study run holds the table (``emir_molecules.md``, ``.csv``) and the
correlations (``study/*``).

Needs RDKit (``pip install rdkit``) and the MoleculeNet CSVs (``$GRAPHSSL_DATA_DIR`` or
``../shared/data``). CPU only.

Usage::

    python benchmarks/emir_molecules.py --keep /tmp/emir_molecules      # the real scale
    python benchmarks/emir_molecules.py --quick                          # a smoke run, ~1 min
    python benchmarks/emir_molecules.py --keep /tmp/emir_molecules --reuse  # resume / recompare
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

import argparse
import contextlib
import io
import math
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hydra import compose, initialize_config_dir

from graphssl.evaluation.emir.study import (
    agreement,
    csv_text,
    mean_ranks,
    ranking_correlations,
    task_correlation_table,
    task_ranks,
    task_table,
)

REPO = Path(__file__).resolve().parents[1]

CONF = REPO / "conf"
EXPERIMENT = "emir_molecules"
TASK_EXPERIMENT = "emir_molecules_tasks"
DOWNSTREAM = "downstream/neg_mean_rank"


@dataclass(frozen=True)
class Member:
    """One embedder of the zoo: ``model`` (infograph | graphcl) on a GIN encoder."""

    name: str
    model: str
    hidden: int
    layers: int
    epochs: int

    @property
    def dim(self) -> int:
        """Embedding size: the readouts of every layer concatenated."""
        return self.hidden * self.layers

    def overrides(self) -> list[str]:
        return [
            f"model={self.model}",
            f"encoder.hidden_channels={self.hidden}",
            f"encoder.num_layers={self.layers}",
            f"trainer.epochs={self.epochs}",
        ]


def _member(model: str, hidden: int, layers: int, epochs: int) -> Member:
    prefix = {"infograph": "ig", "graphcl": "gcl"}[model]
    name = f"gin-h{hidden}-l{layers}-untrained" if epochs == 0 else None
    return Member(name or f"{prefix}-h{hidden}-l{layers}-e{epochs}", model, hidden, layers, epochs)


#: 12 embedders: widths 16-64, depths 3-5, 3-20 epochs, two untrained encoders
ZOO: list[Member] = [
    _member("infograph", 32, 3, 20),
    _member("infograph", 32, 3, 3),
    _member("infograph", 64, 3, 10),
    _member("infograph", 16, 3, 10),
    _member("infograph", 32, 5, 10),
    _member("graphcl", 32, 3, 20),
    _member("graphcl", 32, 3, 3),
    _member("graphcl", 64, 3, 10),
    _member("graphcl", 16, 3, 10),
    _member("graphcl", 32, 5, 10),
    _member("infograph", 32, 3, 0),
    _member("infograph", 64, 3, 0),
]
#: --quick: four small embedders, one epoch at most
QUICK_ZOO: list[Member] = [
    _member("infograph", 16, 2, 1),
    _member("graphcl", 16, 2, 1),
    _member("infograph", 8, 2, 1),
    _member("infograph", 16, 2, 0),
]

#: task → (config name, display name, logged metric, higher is better)
TASKS: dict[str, tuple[str, str, bool]] = {
    "bace": ("BACE", "probe/logreg/test_ap", True),
    "bbbp": ("BBBP", "probe/logreg/test_ap", True),
    "clintox": ("ClinTox", "probe/logreg/test_ap", True),
    "tox21": ("Tox21", "probe/logreg/test_ap", True),
    "esol": ("ESOL", "probe/ridge/test_rmse", False),
    "freesolv": ("FreeSolv", "probe/ridge/test_rmse", False),
    "lipo": ("Lipo", "probe/ridge/test_rmse", False),
}


@dataclass(frozen=True)
class Scale:
    """How big the study is."""

    hiv_molecules: int
    task_molecules: int | None  # None: every molecule of each task
    zoo: tuple[Member, ...]
    compare: tuple[str, ...]  # extra graphssl-compare overrides
    small_rows: int | None  # a second comparison on this many reference rows


REAL = Scale(12_500, None, tuple(ZOO), (), 2_500)
QUICK = Scale(
    300,
    150,
    tuple(QUICK_ZOO),
    ("emir.n_epochs=1", "emir.n_epochs_marg=1", "cross_encoder.epochs=1", "emir.n_jobs=1"),
    None,
)


#: task → whether a higher metric is better (AP: yes; RMSE: no)
HIGHER_IS_BETTER: dict[str, bool] = {task: higher for task, (_, _, higher) in TASKS.items()}
#: task → its column in the study table, e.g. ``BACE AP``
HEADERS: dict[str, str] = {
    task: f"{label} {metric.rsplit('_', 1)[-1].upper()}"
    for task, (label, metric, _) in TASKS.items()
}


# ------------------------------------------------------------------------------------- runs
def data_dir() -> Path:
    for c in (os.environ.get("GRAPHSSL_DATA_DIR"), str(REPO.parent / "shared" / "data")):
        if c and (Path(c) / "MoleculeNet" / "hiv" / "raw" / "HIV.csv").is_file():
            return Path(c)
    sys.exit("MoleculeNet not found: set GRAPHSSL_DATA_DIR to a folder with MoleculeNet/hiv/raw")


def _train(overrides: list[str], log: Path) -> dict[str, float]:
    """One training run; its summary table goes to ``log``, not the console."""
    from graphssl.tasks.train import train

    cfg = compose(config_name="train", overrides=overrides)
    with log.open("a") as f, contextlib.redirect_stdout(f):
        return train(cfg)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny smoke scale (~1 min)")
    parser.add_argument("--keep", type=Path, default=None, help="keep the MLflow store here")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="reuse member and task runs already in the --keep store (same names and scale)",
    )
    parser.add_argument("--hiv-molecules", type=int, default=None, help="HIV subset size")
    parser.add_argument("--small-rows", type=int, default=None, help="second comparison's rows")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument(
        "--emir-jobs", type=int, default=None, help="EMIR worker processes (default: compare's)"
    )
    parser.add_argument(
        "--compare", nargs="*", default=[], help="extra graphssl-compare overrides (key=value)"
    )
    args = parser.parse_args(argv)
    if args.reuse and not args.keep:
        parser.error("--reuse needs --keep <store folder of an earlier run>")

    from graphssl.tasks.compare import run_compare
    from graphssl.tracking import artifacts
    from graphssl.tracking.inputs import newest_named_run
    from graphssl.tracking.mlflow_store import resolve_tracking_uri
    from graphssl.tracking.store import TrackingStore

    scale = QUICK if args.quick else REAL
    hiv_n = args.hiv_molecules or scale.hiv_molecules
    small_rows = args.small_rows if args.small_rows is not None else scale.small_rows
    task_n = "null" if scale.task_molecules is None else str(scale.task_molecules)
    data = data_dir()
    torch.set_num_threads(args.threads)
    load = "/".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"python {platform.python_version()}, torch {torch.__version__}, {args.threads} "
        f"thread(s), load {load}; {len(scale.zoo)} embedders on {hiv_n} HIV molecules, "
        f"{len(TASKS)} tasks ("
        + ("all molecules" if scale.task_molecules is None else f"{task_n} molecules each")
        + ")",
        flush=True,
    )
    outputs = args.keep or Path(tempfile.mkdtemp(prefix="emir-molecules-"))
    outputs.mkdir(parents=True, exist_ok=True)
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    store = TrackingStore(resolve_tracking_uri(None, outputs), EXPERIMENT)
    runs_log = outputs / "runs.log"  # the runs' summary tables
    common = [
        f"paths.outputs_dir={outputs}",
        f"paths.data_dir={data}",
        "experiment=emir_molecules",
        f"num_threads={args.threads}",
        "trainer.progress=false",
    ]
    hiv = [f"dataset.max_molecules={hiv_n}"]
    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    tags = {artifacts.ROLE_TAG: "sweep", "graphssl.study": EXPERIMENT}
    with (
        store.start_run(EXPERIMENT, experiment_name=EXPERIMENT, tags=tags) as study,
        initialize_config_dir(config_dir=str(CONF), version_base="1.3"),
    ):
        study.log_params(
            {
                "hiv_molecules": hiv_n,
                "task_molecules": task_n,
                "members": ",".join(m.name for m in scale.zoo),
                "tasks": ",".join(TASKS),
                "quick": args.quick,
            }
        )
        # 1. the zoo, trained on the HIV subset (the reference rows)
        run_ids: dict[str, str] = {}
        for m in scale.zoo:
            t = time.perf_counter()
            same = {"dataset.max_molecules": str(hiv_n)}
            found = newest_named_run(store, EXPERIMENT, m.name, same) if args.reuse else None
            reused = found is not None
            if found is None:
                _train([*common, *hiv, *m.overrides(), f"logger.run_name={m.name}"], runs_log)
                found = newest_named_run(store, EXPERIMENT, m.name, same)
                if found is None:
                    raise RuntimeError(f"the run {m.name!r} was not found after training")
            run_ids[m.name] = found.run_id
            artifacts.set_parent(store, found.run_id, study.run_id)
            hiv_ap = found.metrics.get("probe/logreg/test_ap", math.nan)
            print(
                f"member {m.name:<22} d={m.dim:<4} HIV test AP {hiv_ap:.3f} "
                f"({time.perf_counter() - t:.0f} s{', reused' if reused else ''})",
                flush=True,
            )
        timings["train"] = time.perf_counter() - t_start

        # 2. every stored model on every task
        t1 = time.perf_counter()
        scores: dict[str, dict[str, float]] = {task: {} for task in TASKS}
        for m in scale.zoo:
            for task, (_, metric, _) in TASKS.items():
                name = f"{m.name}-{task}"
                same = {"from_run": run_ids[m.name]}
                found = newest_named_run(store, TASK_EXPERIMENT, name, same) if args.reuse else None
                if found is not None:
                    run_metrics = found.metrics
                else:
                    run_metrics = _train(
                        [
                            *common,
                            *m.overrides(),
                            f"dataset={task}",
                            f"dataset.max_molecules={task_n}",
                            f"from_run={run_ids[m.name]}",
                            "trainer.epochs=0",
                            f"logger.experiment_name={TASK_EXPERIMENT}",
                            f"logger.run_name={name}",
                            "logger.log_model=false",
                            "logger.log_embeddings=false",
                            "eval.diagnostics.enabled=false",
                        ],
                        runs_log,
                    )
                scores[task][m.name] = float(run_metrics.get(metric, math.nan))
            print(
                f"tasks  {m.name:<22} "
                + " ".join(f"{TASKS[t][0]} {scores[t][m.name]:.3f}" for t in TASKS),
                flush=True,
            )
        timings["tasks"] = time.perf_counter() - t1
        ranks = task_ranks(scores, HIGHER_IS_BETTER)
        means = mean_ranks(ranks)
        for m in scale.zoo:
            per_task = {f"downstream/{t}": scores[t][m.name] for t in TASKS}
            per_task.update({f"downstream/{t}_rank": ranks[t][m.name] for t in TASKS})
            per_task["downstream/mean_rank"] = means[m.name]
            per_task[DOWNSTREAM] = -means[m.name]
            artifacts.log_metrics_to(store, run_ids[m.name], per_task)

        # 3. EMIR on the HIV rows, against the mean downstream rank
        compare_overrides = [
            f"paths.outputs_dir={outputs}",
            f"run_ids=[{','.join(run_ids.values())}]",
            f"downstream={DOWNSTREAM}",
            "progress=false",
            *scale.compare,
            *([f"emir.n_jobs={args.emir_jobs}"] if args.emir_jobs is not None else []),
            *args.compare,
        ]
        results = {}
        row_counts: list[int | None] = [None, *([small_rows] if small_rows else [])]
        for rows in row_counts:
            t2 = time.perf_counter()
            label = "all" if rows is None else str(rows)
            extra = [] if rows is None else [f"max_rows={rows}", f"run_name=compare-{rows}"]
            extra.append(f"output_dir={outputs / 'compare' / label}")
            result = run_compare(
                compose(config_name="compare", overrides=[*compare_overrides, *extra])
            )
            artifacts.set_parent(store, result.run_id, study.run_id)
            timings[f"compare_{label}"] = time.perf_counter() - t2
            results[label] = result

        # 4. the study's table and correlations
        report = io.StringIO()
        tasks = list(TASKS)
        main_result = results["all"]
        report.write(
            f"{len(scale.zoo)} embedders trained on {hiv_n} HIV molecules; EMIR on "
            f"{main_result.n_rows} reference rows; tasks: "
            f"{'all molecules' if scale.task_molecules is None else f'{task_n} molecules'} "
            "each, seeded 80/10/10 splits; rank 1 = best\n\n"
        )
        dims = {m.name: m.dim for m in scale.zoo}
        report.write(task_table(dims, scores, ranks, means, main_result, HEADERS) + "\n")
        metrics: dict[str, float] = {}
        mean_dim = float(np.mean([m.dim for m in scale.zoo]))
        csv_rows: list[dict[str, Any]] = []
        for label, result in results.items():
            prefix = "study" if label == "all" else f"study/rows_{label}"
            rows_ = ranking_correlations(result, scores, means, HIGHER_IS_BETTER)
            report.write(
                f"\nRankings on {result.n_rows} HIV rows vs the mean downstream rank "
                "(higher informativeness and lower L2 should go with a better rank: agreement "
                "is a positive correlation for I_S and a negative one for L2):\n\n"
            )
            report.write(task_correlation_table(rows_, {t: TASKS[t][0] for t in tasks}) + "\n")
            agree = agreement(result)
            if agree is not None:
                report.write(
                    f"\nin-sample vs held-out informativeness over the {len(result.names)} "
                    f"embedders: Spearman {agree:+.3f} ({result.n_rows / mean_dim:.0f} "
                    "rows per mean target dimension)\n"
                )
                metrics[f"{prefix}/rho_in_out"] = agree
            if result.caveat:
                report.write(f"\n{result.caveat}\n")
            for r in rows_:
                metrics[f"{prefix}/spearman_{r['ranking']}"] = r["spearman"]
                metrics[f"{prefix}/kendall_{r['ranking']}"] = r["kendall"]
                for task in tasks:
                    metrics[f"{prefix}/spearman_{r['ranking']}_{task}"] = r[f"spearman_{task}"]
                csv_rows.append({"rows": result.n_rows, **r})
            metrics[f"{prefix}/n_rows"] = float(result.n_rows)
        timings["total"] = time.perf_counter() - t_start
        metrics.update({f"time/{k}_seconds": v for k, v in timings.items()})
        text = report.getvalue()
        study.log_metrics({k: v for k, v in metrics.items() if math.isfinite(v)})
        study.set_tags({f"graphssl.study.compare_{k}": r.run_id for k, r in results.items()})
        study.log_text(text, "emir_molecules.md")
        study.log_text(csv_text(csv_rows), "emir_molecules_correlations.csv")
        print()
        print(text)
        print(
            "wall time: "
            + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items())
            + f"; load {'/'.join(f'{x:.2f}' for x in os.getloadavg())}"
        )
        print(f"MLflow store: {outputs / 'mlflow.db'} (study run {study.run_id})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
