"""Linear-probe quality of graphssl's methods against the published numbers.

For every (method, dataset) pair and seed, composes the tuned experiment
``conf/experiment/<method>_<dataset>.yaml`` (when there is none, the method's Cora experiment
with ``dataset=<dataset>``, else ``model=<method> dataset=<dataset>``) with Hydra's compose
API, runs :func:`graphssl.pipeline.run` in this process with MLflow writing to a temporary
store, and prints a Markdown table of the logistic-regression
probe's test accuracy (``probe/logreg/test_acc``, mean ± standard deviation over seeds) beside
the number published in the GraphMAE paper's Table 1 (Hou et al., KDD 2022), which reports all
of DGI, GRACE, BGRL, CCA-SSG and GraphMAE under the same public-split protocol. Graph-level
methods (InfoGraph, GraphCL on MUTAG, PROTEINS, NCI1) report the 10-fold cross-validation
accuracy (the mean over folds of one seed; the table's ± is then over seeds) next to their
papers' numbers. A last column gives, for context, the same embeddings under the papers' own
evaluation, which tells a protocol difference from a method difference: for node methods
``eval=papers`` (Adam, 300 epochs, the test accuracy of the best validation epoch), for graph
methods ``eval=graph_papers`` (an RBF-kernel SVM with ``C`` grid-searched by 5-fold CV on each
training fold, as InfoGraph's and GraphCL's code).

Usage::

    python benchmarks/quality.py --methods cca_ssg graphmae --datasets cora citeseer --seeds 5
    python benchmarks/quality.py --methods graphmae --datasets cora --seeds 1 --epochs-scale 0.1

``--epochs-scale`` multiplies every run's ``trainer.epochs`` (rounded, at least 1) for quick
runs; the table shows the epochs actually trained (``train/epochs``: one for the
gradient-free DeepWalk/node2vec fit) and, for runs that select their weights on a validation
probe (``eval.select.every``), the mean selected epoch. ``--override`` appends Hydra overrides
to every run, e.g. ``--override trainer.epochs=400 eval.select.every=25``. Real data comes
from ``$GRAPHSSL_DATA_DIR`` (default: ``../shared/data`` beside the repository).
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"

#: Published test accuracy in %: the GraphMAE paper, Table 1 (node level, public splits), and the
#: InfoGraph / GraphCL papers (graph level, 10-fold cross-validation).
PUBLISHED: dict[tuple[str, str], float] = {
    ("dgi", "cora"): 82.3,
    ("dgi", "citeseer"): 71.8,
    ("grace", "cora"): 81.9,
    ("grace", "citeseer"): 71.2,
    ("bgrl", "cora"): 82.7,
    ("bgrl", "citeseer"): 71.1,
    ("cca_ssg", "cora"): 84.0,
    ("cca_ssg", "citeseer"): 73.1,
    ("graphmae", "cora"): 84.2,
    ("graphmae", "citeseer"): 73.4,
    # graph level, 10-fold cross-validation (InfoGraph, ICLR 2020; GraphCL, NeurIPS 2020)
    ("infograph", "mutag"): 89.0,
    ("infograph", "proteins"): 74.4,
    ("infograph", "nci1"): 76.2,
    ("graphcl", "mutag"): 86.8,
    ("graphcl", "proteins"): 74.4,
    ("graphcl", "nci1"): 77.9,
}

METRIC = "probe/logreg/test_acc"
#: Graph-classification datasets: evaluated in folds, with the graph papers' SVM for context.
GRAPH_DATASETS = frozenset(
    {"mutag", "proteins", "nci1", "enzymes", "imdb_binary", "ptc_mr", "synthetic_graphs"}
)


def papers_protocol(dataset: str) -> tuple[str, str]:
    """``(eval group option, metric)`` of the papers' own evaluation of ``dataset``: the Adam
    linear layer of the node papers, or the SVM of the graph papers."""
    if dataset in GRAPH_DATASETS:
        return "graph_papers", "probe/svc/test_acc"
    return "papers", "probe/adam/test_acc"


def overrides_for(
    method: str, dataset: str, seed: int, outputs: Path, extra: list[str] | None = None
) -> list[str]:
    """Hydra overrides of one run: the tuned experiment when it exists, and quiet evaluation."""
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
        "logger.log_embeddings=false",
        "logger.experiment_name=quality-benchmark",
        "trainer.progress=false",
        *(extra or []),
    ]


def run_one(
    method: str,
    dataset: str,
    seed: int,
    epochs_scale: float,
    outputs: Path,
    extra: list[str] | None = None,
) -> tuple[float, float, int, float, float]:
    """Test accuracy (%) of both probes, epochs trained, the selected epoch (1-based; NaN
    without ``eval.select``) and seconds of one run."""
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    from graphssl.pipeline import run

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        overrides = overrides_for(method, dataset, seed, outputs, extra)
        cfg = compose(config_name="config", overrides=overrides)
    epochs = max(1, round(int(cfg.trainer.epochs) * epochs_scale))
    with open_dict(cfg):
        cfg.trainer.epochs = epochs
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):  # keep stdout for the table
        metrics = run(cfg)
    seconds = time.perf_counter() - t0
    if METRIC not in metrics:
        raise RuntimeError(
            f"{method} on {dataset} (seed {seed}) logged no {METRIC!r}; got "
            f"{sorted(k for k in metrics if k.startswith('probe/'))}"
        )
    # epochs trained (early stopping may end sooner; a gradient-free fit logs one)
    trained = int(metrics.get("train/epochs", epochs))
    paper = 100.0 * float(metrics.get(papers_protocol(dataset)[1], math.nan))
    selected = float(metrics.get("select/best_epoch", math.nan)) + 1
    return 100.0 * float(metrics[METRIC]), paper, trained, selected, seconds


def fmt(values: list[float]) -> str:
    if not values:
        return "—"
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:.1f} ± {std:.1f}"


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
        help="Hydra overrides appended to every run (e.g. eval.select.every=25)",
    )
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.epochs_scale <= 0:
        parser.error("--seeds must be >= 1 and --epochs-scale > 0")

    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.pop("MLFLOW_TRACKING_URI", None)  # the temporary store below, never a real one
    if "GRAPHSSL_DATA_DIR" not in os.environ and (REPO.parent / "shared" / "data").is_dir():
        os.environ["GRAPHSSL_DATA_DIR"] = str(REPO.parent / "shared" / "data")
    logging.basicConfig(level=logging.WARNING)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    rows = []
    with tempfile.TemporaryDirectory(prefix="graphssl-quality-") as tmp:
        for method in args.methods:
            for dataset in args.datasets:
                accs: list[float] = []
                papers: list[float] = []
                selected: list[float] = []
                epochs, seconds = 0, 0.0
                for seed in range(args.first_seed, args.first_seed + args.seeds):
                    acc, paper, epochs, sel, sec = run_one(
                        method, dataset, seed, args.epochs_scale, Path(tmp), args.override
                    )
                    accs.append(acc)
                    papers.append(paper)
                    seconds += sec
                    chosen = ""
                    if math.isfinite(sel):
                        selected.append(sel)
                        chosen = f", weights of epoch {sel:.0f}"
                    print(
                        f"# {method} {dataset} seed {seed}: test_acc {acc:.2f} "
                        f"(papers' probe {paper:.2f}; {epochs} epochs{chosen}, {sec:.0f} s)",
                        file=sys.stderr,
                        flush=True,
                    )
                trained = str(epochs)
                if selected:
                    trained += f" (sel. {statistics.fmean(selected):.0f})"
                rows.append((method, dataset, trained, accs, papers, seconds / len(accs)))

    print(
        "| method | dataset | epochs | seeds | ours (test acc %) | published | difference "
        "| papers' probe (Adam / graph: SVM) | s / run |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for method, dataset, epochs, accs, papers, sec in rows:
        published = PUBLISHED.get((method, dataset))
        diff = (
            f"{statistics.fmean(accs) - published:+.1f}" if published is not None and accs else "—"
        )
        pub = f"{published:.1f}" if published is not None else "—"
        print(
            f"| {method} | {dataset} | {epochs} | {len(accs)} | {fmt(accs)} | {pub} | {diff} "
            f"| {fmt(papers)} | {sec:.0f} |"
        )
    return 0 if all(math.isfinite(a) for row in rows for a in row[3]) else 1


if __name__ == "__main__":
    sys.exit(main())
