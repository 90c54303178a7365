"""Study: does EMIR informativeness rank a supervised image model zoo like its test accuracy?

The EMIR paper's image experiment (Darrin et al., NeurIPS 2024) at a small scale: the preset
``experiment=emir_zoo`` trains the supervised timm model zoo of ``experiment=model_zoo``
(14 architectures of 9 families x {1, 4} epochs on 10k Fashion-MNIST images, 28 runs: one Hydra
multirun, so one MLflow sweep parent with a child per member) and keeps each member's penultimate
embeddings of 20,000 images (the 10k training + validation images and the 10k test images).
Each member logs two downstream scores: ``supervised/test_acc``, the accuracy of its own
classifier head, and ``probe/logreg/test_acc``, a linear probe fitted on its embeddings.

:func:`graphssl.tasks.compare.run_compare` then ranks the members by informativeness (the median
over reference members of ``I_S(U -> Z) / d_Z``) on a seeded subset of the rows (``--rows``,
several values allowed), every member wider than ``--max-dims`` projected onto its leading
principal components first (the estimator's cost grows with ``d_Z^2``; the members are 192 to
1280 wide). Each ranking — informativeness in-sample (the authors' figure), informativeness on
the rows its conditional nets were not fitted on (held-out), and the cross-encoder L2 baseline
(lower = better, so agreement is a negative correlation) — is correlated (Spearman and Kendall)
with both downstream scores; the study also reports how well the in-sample and held-out rankings
agree and how well the two downstream scores agree with each other.

Everything goes to the MLflow store of ``--store`` (a ``GRAPHSSL_OUTPUTS`` folder): the zoo's
sweep parent and members (trained here with ``--train``, else the newest sweep parent already in
experiment ``emir_zoo``, its FINISHED children), a study run ``emir_zoo`` (experiment
``emir_zoo``, tagged ``graphssl.role=sweep`` and ``graphssl.study=emir_zoo``) whose children are
the comparison runs (``graphssl.role=compare``), and the study run's tables (``emir_zoo.md``, the
per-member ``emir_zoo.csv`` and ``emir_zoo_correlations.csv``) and correlations (``study/*``: the
largest row count unprefixed, every other one under ``study/rows_<n>/``). The tables are also
written into ``--store`` and printed.

Needs Fashion-MNIST (``$GRAPHSSL_DATA_DIR/FashionMNIST/raw``) to train. CPU only.

Usage::

    python benchmarks/emir_zoo.py --store outputs --train              # train the zoo, compare
    python benchmarks/emir_zoo.py --store outputs                      # compare the zoo in it
    python benchmarks/emir_zoo.py --store outputs --rows 2500 10000    # two comparisons
    python benchmarks/emir_zoo.py --quick --store /tmp/emir_zoo        # a smoke run, ~1-2 min
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

import argparse
import io
import math
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from hydra import compose, initialize_config_dir

from graphssl.evaluation.emir.study import (
    RANKINGS,
    agreement,
    csv_text,
    zoo_correlation_table,
    zoo_correlations,
    zoo_metrics,
    zoo_table,
)

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
EXPERIMENT = "emir_zoo"
#: the metric graphssl-compare correlates its rankings with (the zoo's own test accuracy)
COMPARE_DOWNSTREAM = "supervised/test_acc"
#: short label → member metric; every ranking is correlated with each
DOWNSTREAMS: dict[str, str] = {
    "supervised": "supervised/test_acc",
    "probe": "probe/logreg/test_acc",
}
TRAIN_LOG = "emir_zoo_train.log"


@dataclass(frozen=True)
class Scale:
    """How big the study is."""

    train: tuple[str, ...]  # extra overrides of `graphssl experiment=emir_zoo`
    rows: tuple[int, ...]  # default --rows
    max_dims: int  # default --max-dims
    compare: tuple[str, ...]  # extra graphssl-compare overrides


REAL = Scale((), (10_000,), 64, ())
#: --quick: two small architectures x {0, 4} epochs on 400 training-pool and 200 test images
#: (600 rows, compared whole and on a 300-row subset), small batches, one-epoch EMIR
QUICK = Scale(
    (
        "encoder.name=lcnet_050,resnet10t",
        "trainer.epochs=0,4",
        "dataset.subset=400",
        "dataset.test_subset=200",
        "dataset.batch_size=32",
        "eval.diagnostics.enabled=false",
        "trainer.progress=false",
    ),
    (300, 600),
    16,
    ("emir.n_epochs=1", "emir.n_epochs_marg=1", "cross_encoder.epochs=1", "emir.n_jobs=1"),
)


# ------------------------------------------------------------------------------------- runs
def train_zoo(store_dir: Path, threads: int, extra: Sequence[str]) -> tuple[list[str], float]:
    """``python -m graphssl experiment=emir_zoo`` into ``store_dir``; its console output goes to
    ``store_dir/emir_zoo_train.log``. A failed member does not stop the study (the comparison
    uses the FINISHED ones); no member at all does."""
    cmd = [sys.executable, "-m", "graphssl", "experiment=emir_zoo", f"num_threads={threads}"]
    cmd += list(extra)
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["GRAPHSSL_OUTPUTS"] = str(store_dir)
    # this checkout's graphssl, whichever one the interpreter has installed
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    log = store_dir / TRAIN_LOG
    print(f"$ {shown(cmd, store_dir)}  (log: {log})", flush=True)
    t = time.perf_counter()
    with log.open("a") as f:
        rc = subprocess.run(
            cmd,
            env=env,
            cwd=store_dir,
            stdout=f,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        ).returncode
    seconds = time.perf_counter() - t
    if rc != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        print(f"warning: the zoo's training exited with status {rc}; last lines:\n{tail}")
    return cmd, seconds


def shown(cmd: Sequence[str], store_dir: Path) -> str:
    """The training command as a shell line: ``GRAPHSSL_OUTPUTS=<store> python -m graphssl ...``."""
    return f"GRAPHSSL_OUTPUTS={shlex.quote(str(store_dir))} " + shlex.join(["python", *cmd[1:]])


def _no_zoo(store_dir: Path, why: str) -> SystemExit:
    return SystemExit(
        f"{why} in the MLflow store {store_dir} ({store_dir / 'mlflow.db'}): train the zoo first "
        f"with `python benchmarks/emir_zoo.py --store {store_dir} --train` (or "
        f"`GRAPHSSL_OUTPUTS={store_dir} graphssl experiment=emir_zoo`), or give --store the "
        "folder that holds it"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--store", type=Path, required=True, help="MLflow store folder (a GRAPHSSL_OUTPUTS dir)"
    )
    parser.add_argument("--train", action="store_true", help="train the zoo into --store first")
    parser.add_argument(
        "--quick", action="store_true", help="train a 4-member zoo on 600 images and compare"
    )
    parser.add_argument("--parent", default=None, help="the zoo's sweep parent run id")
    parser.add_argument(
        "--rows", type=int, nargs="+", default=None, help="reference rows, one comparison each"
    )
    parser.add_argument("--max-dims", type=int, default=None, help="project wider members")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads of the training and the comparison (default: every core; 1 with "
        "--quick)",
    )
    parser.add_argument(
        "--emir-jobs", type=int, default=None, help="EMIR worker processes (default: compare's)"
    )
    parser.add_argument(
        "--compare", nargs="*", default=[], help="extra graphssl-compare overrides (key=value)"
    )
    parser.add_argument(
        "--train-overrides",
        nargs="*",
        default=[],
        help="extra overrides of the zoo's training; a swept key (encoder.name=a,b) replaces "
        "the preset's list",
    )
    args = parser.parse_args(argv)

    from graphssl.evaluation.correlation import correlation
    from graphssl.tasks.compare import run_compare
    from graphssl.tracking import artifacts
    from graphssl.tracking.inputs import newest_sweep_parent, zoo_members
    from graphssl.tracking.mlflow_store import default_artifact_location, resolve_tracking_uri
    from graphssl.tracking.store import TrackingStore

    scale = QUICK if args.quick else REAL
    threads = args.threads or (1 if args.quick else os.cpu_count() or 1)
    train = args.train or args.quick
    rows_list = sorted(set(args.rows or scale.rows))
    max_dims = args.max_dims if args.max_dims is not None else scale.max_dims
    store_dir = args.store.absolute()
    torch.set_num_threads(threads)
    load = "/".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"python {platform.python_version()}, torch {torch.__version__}, {threads} "
        f"thread(s), load {load}; store {store_dir}",
        flush=True,
    )
    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    commands: list[str] = []
    if train:
        store_dir.mkdir(parents=True, exist_ok=True)
        # a key of --train-overrides replaces the scale's (Hydra would keep the later one but
        # name the members after both)
        merged = {o.split("=", 1)[0]: o for o in [*scale.train, *args.train_overrides]}
        cmd, timings["train"] = train_zoo(store_dir, threads, list(merged.values()))
        commands.append(shown(cmd, store_dir))
        print(f"zoo trained in {timings['train']:.0f} s", flush=True)
    elif not (store_dir / "mlflow.db").is_file():
        raise _no_zoo(store_dir, "no mlflow.db")

    os.environ.pop("MLFLOW_TRACKING_URI", None)  # the store is --store's, whatever the shell says
    uri = resolve_tracking_uri(None, store_dir)
    store = TrackingStore(uri, EXPERIMENT, default_artifact_location(uri, store_dir))
    if args.parent:
        parent = artifacts.get_run(store, args.parent)
    else:
        parent = newest_sweep_parent(store, EXPERIMENT)
        if parent is None:
            raise _no_zoo(store_dir, f"no sweep parent run in experiment {EXPERIMENT!r}")
    finished = artifacts.select_runs(store, parent_run_id=parent.run_id)
    if len(finished) < 2:
        raise _no_zoo(
            store_dir,
            f"the zoo's sweep parent {parent.run_id} ({parent.status}) has {len(finished)} "
            "FINISHED member(s), the comparison needs at least 2,",
        )
    print(
        f"zoo: sweep parent {parent.run_id} ({parent.run_name}, {parent.status}), "
        f"{len(finished)} FINISHED member(s)",
        flush=True,
    )
    if parent.status != "FINISHED":
        print(
            f"warning: the sweep parent is {parent.status} (still training, or a member "
            "failed): the comparison uses the members FINISHED so far"
        )

    compare_overrides = [
        f"paths.outputs_dir={store_dir}",
        f"parent_run_id={parent.run_id}",
        f"downstream={COMPARE_DOWNSTREAM}",
        f"max_dims={max_dims}",
        "progress=false",
        *scale.compare,
        *([f"emir.n_jobs={args.emir_jobs}"] if args.emir_jobs is not None else []),
        *args.compare,
    ]
    tags = {
        artifacts.ROLE_TAG: "sweep",
        "graphssl.study": EXPERIMENT,
        "graphssl.study.zoo_parent": parent.run_id,
    }
    with (
        store.start_run(EXPERIMENT, experiment_name=EXPERIMENT, tags=tags) as study,
        initialize_config_dir(config_dir=str(CONF), version_base="1.3"),
    ):
        study.log_params(
            {
                "zoo_parent": parent.run_id,
                "members": len(finished),
                "rows": ",".join(map(str, rows_list)),
                "max_dims": max_dims,
                "quick": args.quick,
                "train": train,
                "compare_overrides": " ".join(compare_overrides)[:500],
            }
        )
        # 1. one comparison per row count, each a child of the study run
        results = {}
        for rows in rows_list:
            extra = [
                f"max_rows={rows}",
                f"run_name=compare-{rows}",
                f"output_dir={store_dir / 'emir_zoo_compare' / f'rows_{rows}'}",
            ]
            commands.append("graphssl-compare " + shlex.join([*compare_overrides, *extra]))
            print(f"$ {commands[-1]}", flush=True)
            t = time.perf_counter()
            result = run_compare(
                compose(config_name="compare", overrides=[*compare_overrides, *extra])
            )
            artifacts.set_parent(store, result.run_id, study.run_id)
            timings[f"compare_{rows}"] = time.perf_counter() - t
            results[rows] = result

        # 2. the members' downstream scores, the tables and the correlations
        main_rows = rows_list[-1]
        members = zoo_members(
            store, results[main_rows], DOWNSTREAMS["supervised"], DOWNSTREAMS["probe"]
        )
        by_name = {m.name: m for m in members}
        sup_probe = correlation([m.supervised for m in members], [m.probe for m in members])
        report = io.StringIO()
        main_result = results[main_rows]
        report.write(
            f"EMIR on the image model zoo: {len(members)} members of sweep {parent.run_id}, "
            f"{main_result.n_rows} reference rows, members wider than {max_dims} projected onto "
            f"their {max_dims} leading principal components; rank 1 = best (highest I_S, "
            "lowest L2)\n\n"
        )
        report.write(zoo_table(members, main_result) + "\n")
        report.write(
            "\nEach ranking vs each downstream score over the members (agreement is a positive "
            "correlation for I_S and a negative one for L2):\n\n"
        )
        metrics: dict[str, float] = {}
        corr_rows: list[dict[str, Any]] = []
        member_rows: list[dict[str, Any]] = []
        for rows, result in results.items():
            ordered = [by_name[n] for n in result.names]
            corr = zoo_correlations(ordered, result, DOWNSTREAMS)
            corr_rows += corr
            prefix = "study" if rows == main_rows else f"study/rows_{rows}"
            metrics.update(zoo_metrics(corr, result, prefix, DOWNSTREAMS))
            for m in ordered:
                member_rows.append(
                    {
                        "rows": result.n_rows,
                        "member": m.label,
                        "run_id": m.run_id,
                        "architecture": m.architecture,
                        "epochs": m.epochs,
                        "d": m.dim,
                        "d_compared": max_dims if m.name in result.original_dims else m.dim,
                        "supervised_test_acc": m.supervised,
                        "probe_test_acc": m.probe,
                        **{key: getattr(result, key).get(m.name, math.nan) for key in RANKINGS},
                    }
                )
        report.write(zoo_correlation_table(corr_rows) + "\n\n")
        for result in results.values():
            agree = agreement(result)
            if agree is not None:
                report.write(
                    f"in-sample vs held-out informativeness on {result.n_rows} rows: Spearman "
                    f"{agree:+.3f}\n"
                )
        report.write(
            f"supervised test accuracy vs linear-probe test accuracy over the {sup_probe[2]} "
            f"members: Spearman {sup_probe[0]:+.3f}, Kendall {sup_probe[1]:+.3f}"
            + (f" ({sup_probe[3]})" if sup_probe[3] else "")
            + "\n"
        )
        metrics["study/spearman_supervised_probe"] = sup_probe[0]
        metrics["study/kendall_supervised_probe"] = sup_probe[1]
        notes = [
            f"{r['ranking']} vs {r['downstream']}: {r['note']}" for r in corr_rows if r["note"]
        ]
        notes += [
            f"{result.n_rows} rows: {result.caveat}" for result in results.values() if result.caveat
        ]
        for note in notes:
            report.write(f"\nnote: {note}\n")
        timings["total"] = time.perf_counter() - t_start
        report.write(
            "\ncommands:\n\n"
            + "".join(f"    {c}\n" for c in commands)
            + "\nwall time: "
            + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items())
            + "\n"
        )
        text = report.getvalue()
        metrics.update({f"time/{k}_seconds": v for k, v in timings.items()})
        study.log_metrics({k: v for k, v in metrics.items() if math.isfinite(v)})
        study.set_tags({f"graphssl.study.compare_{k}": r.run_id for k, r in results.items()})
        files = {
            "emir_zoo.md": text,
            "emir_zoo.csv": csv_text(member_rows),
            "emir_zoo_correlations.csv": csv_text(corr_rows),
        }
        for name, content in files.items():
            (store_dir / name).write_text(content)
            study.log_text(content, name)
        print()
        print(text)
        print(
            f"MLflow store: {store_dir / 'mlflow.db'} (study run {study.run_id}); tables in "
            f"{store_dir / 'emir_zoo.md'}, {store_dir / 'emir_zoo.csv'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
