"""Linear-probe quality of graphssl's methods against the published numbers.

For every (method, dataset) pair and seed, composes the tuned experiment
``conf/experiment/<method>_<dataset>.yaml`` (when there is none, the method's Cora experiment
with ``dataset=<dataset>``, else ``model=<method> dataset=<dataset>``) with Hydra's compose
API, runs :func:`graphssl.tasks.train.train` in this process with MLflow writing to a temporary
store, and prints a Markdown table of the logistic-regression
probe's test accuracy (``probe/logreg/test_acc``, mean ± standard deviation over seeds) beside
the number published in the GraphMAE paper's Table 1 (Hou et al., KDD 2022), which reports all
of DGI, GRACE, BGRL, CCA-SSG and GraphMAE under the same public-split protocol. Graph-level
methods (InfoGraph, GraphCL on MUTAG, PROTEINS, NCI1) report the 10-fold cross-validation
accuracy (the mean over folds of one seed; the table's ± is then over seeds) next to their
papers' numbers. Their presets select the probe's L2 strength by 5-fold cross-validation inside
each training fold (``eval.probes.logreg.selection=cv``; the validation column is then the
selected strength's mean inner-CV accuracy), ``--override eval.probes.logreg.selection=split``
on each fold's 10 % validation part; each run's line on stderr says which. A last column gives,
for context, the same embeddings under the papers' own evaluation, which tells a protocol
difference from a method difference: for node methods
``eval=papers`` (Adam, 300 epochs, the test accuracy of the best validation epoch; a preset
may set it as its authors' code does on that dataset: GraphMAE's CiteSeer weight decay 0.01 in
``graphmae_citeseer``), for graph
methods ``eval=graph_papers`` (an RBF-kernel SVM with ``C`` grid-searched by 5-fold CV on each
training fold, as InfoGraph's and GraphCL's code). A second column evaluates the same embeddings
with the logistic-regression probe on the earlier, narrower L2 grid (``SPEC_GRID``, 0.1 … 0;
the default grid reaches 100), which the public Planetoid splits often select at its edge.
Then come
the untrained-encoder baseline (``eval.baseline``: the same architecture, freshly
initialised with the run's seed, never trained, under the same probe:
``probe/logreg/baseline_test_acc``) and the gain, trained minus untrained
(``probe/logreg/gain``), so every row says what self-supervision added; with ``--reprobe``
they stay empty (the untrained embeddings are not stored). DeepWalk/node2vec have none.
The last column is the default probe's validation accuracy, the figure presets are tuned on
(with ``--first-seed 0``; seeds 5–9 report the tuned presets and choose nothing).

The figures of the table (mean ± std over seeds, untrained baseline, gain, published figure
and difference, epochs) are computed by the leaderboard
(:func:`graphssl.evaluation.leaderboard.leaderboard`, what ``graphssl-report kind=leaderboard``
shows) from the runs' metrics; this script runs the presets and lays the table out. With
``--store DIR`` the same runs can be ranked from the store later::

    graphssl-report kind=leaderboard experiment_name=quality-benchmark paths.outputs_dir=DIR

Usage::

    python benchmarks/quality.py --methods cca_ssg graphmae --datasets cora citeseer --seeds 5
    python benchmarks/quality.py --methods graphmae --datasets cora --seeds 1 --epochs-scale 0.1

``--epochs-scale`` multiplies every run's ``trainer.epochs`` (rounded, at least 1) for quick
runs; the table shows the epochs actually trained (``train/epochs``: one for the
gradient-free DeepWalk/node2vec fit) and, for runs that select their weights on a validation
probe (``callbacks.selection.every``), the mean selected epoch. ``--override`` appends Hydra
overrides to every run, e.g. ``--override trainer.epochs=400 callbacks.selection.every=25``.
Real data comes from ``$GRAPHSSL_DATA_DIR`` (default: ``../shared/data`` beside the repository).

``--store DIR`` keeps the runs in ``DIR`` (an MLflow store, browsable with ``graphssl-ui
--outputs DIR``, with each run's embeddings as its ``embeddings.pt`` artifact) instead of a
temporary folder. ``--reprobe`` then trains nothing: it runs the evaluate task
(:func:`graphssl.tasks.evaluate.evaluate`, ``graphssl-evaluate``) on the stored embeddings of the
same (method, dataset, seed) runs under the probes configured now, so a probe change costs
seconds instead of a retraining (the table's s / run is then the probes' time), and logs
nothing. It uses the newest stored run whose training config is the one composed now: the
probes (but not the one ``callbacks.selection`` chooses the weights with), diagnostics, figures and
logging may differ, nothing else::

    python benchmarks/quality.py --methods bgrl --datasets citeseer --store outputs/quality
    python benchmarks/quality.py --methods bgrl --datasets citeseer --store outputs/quality \\
        --reprobe --override eval.probes.adam.weight_decay=0.1
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from graphssl.evaluation.leaderboard import Leaderboard, Stat

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"

#: The published figures (method, dataset, probe, metric, value, source) are those of
#: ``conf/published.yaml``, which the leaderboard reads: the GraphMAE paper, Table 1 (node level,
#: public splits), and the InfoGraph / GraphCL papers (graph level, 10-fold cross-validation).

METRIC = "probe/logreg/test_acc"
#: what a preset is tuned on (seeds 0–4): the default probe's validation accuracy
VAL_METRIC = "probe/logreg/val_acc"
BASELINE_METRIC = "probe/logreg/baseline_test_acc"
GAIN_METRIC = "probe/logreg/gain"
#: A second logistic-regression probe on the same embeddings, on the earlier grid that stops at
#: 0.1 (the default, ``DEFAULT_WEIGHT_DECAYS``, reaches 100): on the public Planetoid splits
#: (120–140 labelled nodes, 256–512 dimensions) validation picks 1–30 when it may, so this
#: column shows what the narrower grid loses.
SPEC_GRID = (0.1, 0.01, 1e-3, 1e-4, 1e-5, 0.0)
SPEC_METRIC = "probe/logreg_spec/test_acc"
#: Graph-classification datasets: evaluated in folds, with the graph papers' SVM for context.
GRAPH_DATASETS = frozenset(
    {"mutag", "proteins", "nci1", "enzymes", "imdb_binary", "ptc_mr", "synthetic_graphs"}
)


def papers_protocol(dataset: str) -> tuple[str, str]:
    """``(eval group option, metric)`` of the papers' own evaluation of ``dataset``: the Adam
    linear layer of the node papers, or the SVM of the graph papers. A method's preset may
    define its authors' own evaluation as the probe named after the method (``grace``: GRACE's
    CV-selected logistic regression; ``graphmae`` on CiteSeer: GraphMAE's weight decay), which
    then fills the column instead (:func:`papers_metric`)."""
    if dataset in GRAPH_DATASETS:
        return "graph_papers", "probe/svc/test_acc"
    return "papers", "probe/adam/test_acc"


def papers_metric(method: str, dataset: str, metrics: dict[str, float]) -> tuple[str, str]:
    """``(probe name, metric)`` of the papers' column: the method's own probe when its run
    logged one, else the dataset's papers' protocol."""
    own = f"probe/{method}/test_acc"
    if own in metrics:
        return method, own
    metric = papers_protocol(dataset)[1]
    return metric.split("/")[1], metric


def run_name(method: str, dataset: str, seed: int) -> str:
    """The MLflow run name of one benchmark run (what ``--reprobe`` looks runs up by)."""
    return f"{method}-{dataset}-seed{seed}"


def overrides_for(
    method: str,
    dataset: str,
    seed: int,
    outputs: Path,
    extra: list[str] | None = None,
    keep_embeddings: bool = False,
) -> list[str]:
    """Hydra overrides of one run: the tuned experiment when it exists, and quiet evaluation
    (the embeddings logged to MLflow only with ``keep_embeddings``)."""
    experiment = CONF / "experiment" / f"{method}_{dataset}.yaml"
    on_cora = CONF / "experiment" / f"{method}_cora.yaml"
    if experiment.is_file():
        base = [f"experiment={experiment.stem}"]
    elif on_cora.is_file():  # the method's Cora settings on another dataset
        base = [f"experiment={on_cora.stem}", f"dataset={dataset}"]
    else:
        base = [f"model={method}", f"dataset={dataset}"]
    return [
        *base,
        f"seed={seed}",
        f"paths.outputs_dir={outputs}",
        f"eval={papers_protocol(dataset)[0]}",
        "eval.diagnostics.enabled=false",
        "eval.figures=false",
        f"logger.log_embeddings={str(keep_embeddings).lower()}",
        "logger.experiment_name=quality-benchmark",
        f"logger.run_name={run_name(method, dataset, seed)}",
        "trainer.progress=false",
        "++eval.probes.logreg_spec._target_=graphssl.evaluation.logreg_probe.LogRegProbe",
        f"++eval.probes.logreg_spec.weight_decay=[{','.join(map(str, SPEC_GRID))}]",
        # the narrower grid is selected the way the default probe is (validation split or
        # inner cross-validation, as the preset says)
        "++eval.probes.logreg_spec.selection=${eval.probes.logreg.selection}",
        "++eval.probes.logreg_spec.inner_folds=${eval.probes.logreg.inner_folds}",
        "++eval.probes.logreg_spec.seed=${eval.probes.logreg.seed}",
        *(extra or []),
    ]


@dataclass
class Result:
    """One run: test accuracy (%) of the probes, epochs trained, the selected epoch (1-based;
    NaN without ``callbacks.selection``), the narrower-grid probe's selected weight decay and
    validation accuracy, the untrained baseline's test accuracy and the gain (NaN without a
    baseline), and seconds."""

    ours: float
    spec: float
    papers: float
    papers_probe: str
    epochs: int
    selected: float
    spec_weight_decay: float
    spec_val: float
    seconds: float
    baseline: float = math.nan
    gain: float = math.nan
    val: float = math.nan
    #: every metric of the run (what the leaderboard reads), ``train/epochs`` the epochs above
    metrics: dict[str, float] = field(default_factory=dict)


def compose_run(
    method: str,
    dataset: str,
    seed: int,
    epochs_scale: float,
    outputs: Path,
    extra: list[str] | None = None,
    keep_embeddings: bool = False,
) -> DictConfig:
    """The composed config of one run, its ``trainer.epochs`` scaled by ``epochs_scale``."""
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        overrides = overrides_for(method, dataset, seed, outputs, extra, keep_embeddings)
        cfg = compose(config_name="train", overrides=overrides)
    with open_dict(cfg):
        cfg.trainer.epochs = max(1, round(int(cfg.trainer.epochs) * epochs_scale))
    return cfg


def result_of(
    metrics: dict[str, float], method: str, dataset: str, seconds: float, epochs: int
) -> Result:
    """The table's figures from one run's metrics."""
    papers_probe, papers = papers_metric(method, dataset, metrics)
    return Result(
        ours=100.0 * float(metrics[METRIC]),
        spec=100.0 * float(metrics.get(SPEC_METRIC, math.nan)),
        papers=100.0 * float(metrics.get(papers, math.nan)),
        papers_probe=papers_probe,
        # epochs trained (early stopping may end sooner; a gradient-free fit logs one)
        epochs=int(metrics.get("train/epochs", epochs)),
        selected=float(metrics.get("select/best_epoch", math.nan)) + 1,
        spec_weight_decay=float(metrics.get("probe/logreg_spec/weight_decay", math.nan)),
        spec_val=100.0 * float(metrics.get("probe/logreg_spec/val_acc", math.nan)),
        seconds=seconds,
        baseline=100.0 * float(metrics.get(BASELINE_METRIC, math.nan)),
        gain=100.0 * float(metrics.get(GAIN_METRIC, math.nan)),
        val=100.0 * float(metrics.get(VAL_METRIC, math.nan)),
        metrics={**metrics, "train/epochs": float(metrics.get("train/epochs", epochs))},
    )


def run_one(
    method: str,
    dataset: str,
    seed: int,
    epochs_scale: float,
    outputs: Path,
    extra: list[str] | None = None,
    keep_embeddings: bool = False,
) -> Result:
    """Train and evaluate one configured run."""
    from graphssl.tasks.train import train as run

    cfg = compose_run(method, dataset, seed, epochs_scale, outputs, extra, keep_embeddings)
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):  # keep stdout for the table
        metrics = run(cfg)
    seconds = time.perf_counter() - t0
    if METRIC not in metrics:
        raise RuntimeError(
            f"{method} on {dataset} (seed {seed}) logged no {METRIC!r}; got "
            f"{sorted(k for k in metrics if k.startswith('probe/'))}"
        )
    return result_of(metrics, method, dataset, seconds, int(cfg.trainer.epochs))


class ReprobeError(Exception):
    """``--reprobe`` found no stored run to evaluate again (its message says why)."""


def evaluate_config(cfg: DictConfig, store: Path) -> DictConfig:
    """The evaluate task's config (``conf/evaluate.yaml``) for the runs of ``store``, with the
    ``eval`` node of the composed training config ``cfg``, logging nothing."""
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        ecfg = compose(
            config_name="evaluate",
            overrides=[
                f"paths.outputs_dir={store}",
                f"logger.experiment_name={cfg.logger.experiment_name}",
                "log=false",
            ],
        )
    with open_dict(ecfg):
        ecfg.eval = cfg.eval
    return ecfg


def reprobe_one(
    method: str,
    dataset: str,
    seed: int,
    epochs_scale: float,
    store: Path,
    extra: list[str] | None = None,
) -> Result:
    """Evaluate the embeddings a ``--store`` run logged under the probes configured now (the
    evaluate task): the newest finished run of ``(method, dataset, seed)`` whose training
    config is the one composed now (the evaluate task's re-probe rule,
    :func:`graphssl.tasks.evaluate.stored_run_of`).

    Raises:
        ReprobeError: ``store`` holds no such run (none of that name with embeddings, or none
            trained under this config), or its embeddings do not fit the dataset.
    """
    from graphssl.tasks.components import resolve_config
    from graphssl.tasks.evaluate import EvaluationRefused, evaluate, stored_run_of
    from graphssl.tracking import artifacts
    from graphssl.tracking.embeddings import HASH_TAG
    from graphssl.tracking.store import TrackingStore

    cfg = compose_run(method, dataset, seed, epochs_scale, store, extra, keep_embeddings=True)
    resolved = resolve_config(cfg)
    tracking = TrackingStore.from_config(resolved)
    name = run_name(method, dataset, seed)
    try:
        found = artifacts.select_runs(
            tracking,
            experiment=tracking.experiment_name,
            filter_string=f"tags.mlflow.runName = '{name}'",
        )
    except LookupError:  # no such experiment in the store
        found = []
    runs = [r for r in reversed(found) if HASH_TAG in r.tags]  # newest first
    if not runs:
        raise ReprobeError(
            f"no finished run {name!r} with embeddings in {tracking.tracking_uri} "
            f"(experiment {tracking.experiment_name!r}); expected one from an earlier "
            f"`quality.py --store {store}` with the same methods, datasets and seeds"
        )
    with tempfile.TemporaryDirectory() as tmp:
        try:
            stored = stored_run_of(tracking, runs, cfg, tmp)
        except EvaluationRefused as err:
            raise ReprobeError(f"{err} — train again without --reprobe") from err
    try:
        with contextlib.redirect_stdout(sys.stderr):  # keep stdout for the table
            (evaluated,) = evaluate(evaluate_config(resolved, store), runs=[stored], store=tracking)
    except EvaluationRefused as err:
        raise ReprobeError(f"{name}: {err}") from err
    seconds = evaluated.metrics.get("time/evaluate_seconds", math.nan)
    return result_of(evaluated.all_metrics, method, dataset, seconds, int(cfg.trainer.epochs))


def selection_of(metrics: dict[str, float]) -> str:
    """How the default probe chose its L2 strength in a run: by inner cross-validation (its
    ``inner_folds`` logged; the validation figure is then the mean inner-CV accuracy) or on the
    validation split, with the strength chosen (the mean over folds)."""
    chosen = metrics.get("probe/logreg/weight_decay", math.nan)
    folds = metrics.get("probe/logreg/inner_folds")
    how = "validation split" if folds is None else f"{folds:.0f}-fold inner CV"
    return f"weight decay {chosen:g} by {how}"


def finite(values: list[float]) -> list[float]:
    """The finite values (runs without a baseline give NaN)."""
    return [v for v in values if math.isfinite(v)]


def fmt(values: list[float]) -> str:
    """``mean ± std`` of the finite values; "—" when there are none (a probe that was not run)."""
    values = finite(values)
    if not values:
        return "—"
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:.1f} ± {std:.1f}"


def fmt_stat(s: Stat) -> str:
    """A leaderboard :class:`~graphssl.evaluation.leaderboard.Stat` of accuracies as :func:`fmt`
    prints them: ``mean ± std`` in % (``± 0.0`` for one seed), "—" without values."""
    if s.n == 0:
        return "—"
    return f"{100.0 * s.mean:.1f} ± {100.0 * s.std if s.n > 1 else 0.0:.1f}"


def boards(rows: list[tuple[str, str, list[Result]]]) -> tuple[Leaderboard, Leaderboard | None]:
    """The leaderboards of the runs' test and validation accuracies, one row per (method,
    dataset), beside the published figures of ``conf/published.yaml`` (``None`` for the
    validation accuracies when no run logged one)."""
    from graphssl.evaluation.leaderboard import leaderboard
    from graphssl.tasks.report import load_published
    from graphssl.tracking.artifacts import RunRecord

    records = [
        RunRecord(
            run_id=f"{method}-{dataset}-{i}",
            run_name=f"{method}-{dataset}-{i}",
            experiment_id="",
            status="FINISHED",
            params={"method": method, "dataset": dataset, "seed": str(i)},
            metrics=r.metrics,
        )
        for method, dataset, results in rows
        for i, r in enumerate(results)
    ]
    probes = sorted({"logreg", "logreg_spec"} | {r.papers_probe for _, _, rs in rows for r in rs})
    keys = {"probes": probes, "method_key": "params.method", "dataset_key": "params.dataset"}
    test = leaderboard(records, metric="test_acc", published=load_published(), **keys)
    try:
        val = leaderboard(records, metric="val_acc", **keys)
    except ValueError:  # no run logged a validation accuracy
        return test, None
    return test, val


def print_table(rows: list[tuple[str, str, list[Result]]]) -> None:
    """The Markdown table of ``rows`` (method, dataset, the runs' results): the leaderboard's
    figures laid out as BENCHMARKS.md's method quality table, with the narrower grid, the
    papers' probe and the seconds per run (training and evaluation) beside them."""
    test, val = boards(rows)
    val_rows = {(r.method, r.dataset): r for r in (val.rows if val is not None else [])}
    print(
        "| method | dataset | epochs | seeds | ours (test acc %) | ours, λ grid 0.1 … 0 "
        "| published | difference | papers' probe (which) | s / run | untrained | gain "
        "| ours (val acc %) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for method, dataset, results in rows:
        row = test.row(method, dataset)
        ours = row.cells["logreg"]
        pub = "—" if ours.published is None else f"{100.0 * ours.published.value:.1f}"
        diff = "—" if math.isnan(ours.difference) else f"{100.0 * ours.difference:+.1f}"
        trained = f"{row.epochs.mean:.0f}"
        if row.selected_epoch.n:
            trained += f" (sel. {row.selected_epoch.mean:.0f})"
        which = sorted({r.papers_probe for r in results})
        papers = (
            fmt_stat(row.cells[which[0]].value)
            if len(which) == 1
            else fmt([r.papers for r in results])
        )
        sec = statistics.fmean(r.seconds for r in results)
        found = val_rows.get((method, dataset))
        ours_val = "—" if found is None else fmt_stat(found.cells["logreg"].value)
        print(
            f"| {method} | {dataset} | {trained} | {len(results)} | {fmt_stat(ours.value)} "
            f"| {fmt_stat(row.cells['logreg_spec'].value)} | {pub} | {diff} "
            f"| {papers} ({', '.join(which)}) | {sec:.0f} "
            f"| {fmt_stat(ours.baseline)} | {fmt_stat(ours.gain)} "
            f"| {ours_val} |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--methods",
        nargs="+",
        default=["cca_ssg", "graphmae"],
        help="model names of conf/model (default: cca_ssg graphmae)",
    )
    parser.add_argument(
        "--datasets",
        nargs="+",
        default=["cora", "citeseer"],
        help="dataset names of conf/dataset (default: cora citeseer)",
    )
    parser.add_argument("--seeds", type=int, default=5, help="number of seeds (default: 5)")
    parser.add_argument(
        "--first-seed", type=int, default=0, help="seeds run from this one on (default: 0)"
    )
    parser.add_argument(
        "--epochs-scale",
        type=float,
        default=1.0,
        help="multiply every run's trainer.epochs (default: 1.0)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    parser.add_argument(
        "--override",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="Hydra overrides appended to every run (e.g. callbacks.selection.every=25)",
    )
    parser.add_argument(
        "--store",
        type=Path,
        default=None,
        metavar="DIR",
        help="keep the runs (MLflow store, checkpoints) and their embeddings in DIR instead of "
        "a temporary folder, so that --reprobe can evaluate them again",
    )
    parser.add_argument(
        "--reprobe",
        action="store_true",
        help="do not train: evaluate the embeddings of the runs in --store under the probes "
        "configured now (e.g. with --override eval.probes.adam.weight_decay=0.01)",
    )
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.epochs_scale <= 0:
        parser.error("--seeds must be >= 1 and --epochs-scale > 0")
    if args.reprobe and args.store is None:
        parser.error("--reprobe evaluates the runs of a --store DIR; pass --store")
    if args.reprobe and not args.store.is_dir():
        parser.error(f"--store {args.store} is not a directory; expected the DIR of an earlier run")

    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.pop("MLFLOW_TRACKING_URI", None)  # the temporary store below, never a real one
    if "GRAPHSSL_DATA_DIR" not in os.environ and (REPO.parent / "shared" / "data").is_dir():
        os.environ["GRAPHSSL_DATA_DIR"] = str(REPO.parent / "shared" / "data")
    logging.basicConfig(level=logging.WARNING)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    rows = []
    with contextlib.ExitStack() as stack:
        if args.store is not None:
            outputs = args.store.absolute()
        else:
            outputs = Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="graphssl-quality-"))
            )
        for method in args.methods:
            for dataset in args.datasets:
                results: list[Result] = []
                for seed in range(args.first_seed, args.first_seed + args.seeds):
                    if args.reprobe:
                        try:
                            r = reprobe_one(
                                method, dataset, seed, args.epochs_scale, outputs, args.override
                            )
                        except ReprobeError as e:
                            parser.exit(2, f"quality.py: error: {e}\n")
                    else:
                        r = run_one(
                            method,
                            dataset,
                            seed,
                            args.epochs_scale,
                            outputs,
                            args.override,
                            keep_embeddings=args.store is not None,
                        )
                    results.append(r)
                    chosen = (
                        f", weights of epoch {r.selected:.0f}" if math.isfinite(r.selected) else ""
                    )
                    print(
                        f"# {method} {dataset} seed {seed}: test_acc {r.ours:.2f} "
                        f"(val {r.val:.2f}; {selection_of(r.metrics)}) "
                        f"(grid 0.1 … 0: {r.spec:.2f} at weight decay "
                        f"{r.spec_weight_decay:g}, val {r.spec_val:.2f}; "
                        f"papers' probe ({r.papers_probe}) {r.papers:.2f}; "
                        f"untrained {r.baseline:.2f}, gain {r.gain:+.2f}; "
                        f"{r.epochs} epochs{chosen}, "
                        f"{r.seconds:.0f} s{', re-probed' if args.reprobe else ''})",
                        file=sys.stderr,
                        flush=True,
                    )
                rows.append((method, dataset, results))

    print_table(rows)
    return 0 if all(math.isfinite(r.ours) for _, _, rs in rows for r in rs) else 1


if __name__ == "__main__":
    sys.exit(main())
