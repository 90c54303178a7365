"""Linear-probe quality of graphssl's methods against the published numbers.

For each (method, dataset) it runs the tuned preset ``conf/experiment/<method>_<dataset>.yaml``
(else the method's Cora preset with ``dataset=<dataset>``, else ``model=<method>
dataset=<dataset>``) as one multirun over the seeds, ``graphssl -m <preset> seed=5,6,...``, into
one MLflow store (experiment ``quality-benchmark``), then prints the store's leaderboard,
``graphssl-report kind=leaderboard``: per probe the mean ± std over seeds, the untrained
baseline, the gain and the published figure (``conf/published.yaml``); epochs, training time,
memory. Every run is evaluated by the default probe (``logreg``), by the same probe on the
earlier L2 grid stopping at 0.1 (``logreg_spec``), on graph datasets by the default probe
selecting its L2 strength on each fold's validation part instead of by inner cross-validation
(``logreg_split``), and by the papers' own protocol (the Adam
layer of ``eval=papers`` on node datasets, the SVM of ``eval=graph_papers`` on graph datasets;
a preset may add its authors' evaluation as the probe named after the method). ``--probes``
picks and orders the columns (default: those probes, as the presets of ``--methods`` ×
``--datasets`` configure them).

Usage::

    python benchmarks/quality.py --methods dgi --datasets cora --seeds 2 --epochs-scale 0.05
    python benchmarks/quality.py --threads 1 --first-seed 5 --seeds 5 --store outputs/quality
    python benchmarks/quality.py --report-only --store outputs/quality --probes logreg \\
        --write BENCHMARKS.md

The leaderboard ranks every run in the store's experiment: several invocations into one
``--store`` make one table (a preset run twice into it counts both runs' seeds); without
``--store`` the runs go to a temporary one. ``--report-only`` trains nothing; ``--write FILE``
replaces the table between ``<!-- quality-table:start -->`` and ``<!-- quality-table:end -->``
in ``FILE`` (BENCHMARKS.md's method quality table) with the leaderboard, so the table is
regenerated, not typed. ``--epochs-scale`` multiplies each preset's ``trainer.epochs``;
``--override`` appends Hydra overrides to every run.

The runs' other figures are in the store (``graphssl-ui --outputs DIR``), and other
leaderboards of it: ``--report-override leaderboard.metric=val_acc`` gives the validation
accuracy the presets are tuned on; the selected L2 strength is each run's tag
``probe/logreg/weight_decay``. Probing the stored embeddings again without training is
``graphssl-evaluate parent=<a preset's sweep parent run>`` (docs/evaluation.md). Real data
comes from ``$GRAPHSSL_DATA_DIR`` (default: ``../shared/data`` beside the repository).
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
EXPERIMENT = "quality-benchmark"
#: the console commands the script runs: ``{command: its entry in graphssl.cli}``
ENTRIES = {"graphssl": "main", "graphssl-report": "report_main"}
#: the markers around the table ``--write`` replaces
START = "<!-- quality-table:start -->"
END = "<!-- quality-table:end -->"
#: The earlier L2 grid of the default probe, stopping at 0.1: on the public Planetoid splits
#: (120–140 labelled nodes) validation picks 1–30 when it may, so this probe shows what the
#: narrower grid loses.
SPEC_GRID = (0.1, 0.01, 1e-3, 1e-4, 1e-5, 0.0)
#: Graph-classification datasets: evaluated in folds, with the graph papers' SVM.
GRAPH_DATASETS = frozenset(
    {"mutag", "proteins", "nci1", "enzymes", "imdb_binary", "ptc_mr", "synthetic_graphs"}
)


def papers_eval(dataset: str) -> str:
    """The ``eval`` option with the papers' own evaluation of ``dataset`` beside the default
    probe: the Adam linear layer of the node papers (probe ``adam``), or the SVM of the graph
    papers (probe ``svc``)."""
    return "graph_papers" if dataset in GRAPH_DATASETS else "papers"


def preset(method: str, dataset: str) -> list[str]:
    """The overrides selecting the tuned preset of ``method`` on ``dataset``: its experiment,
    else the method's Cora experiment on ``dataset``, else the method's defaults."""
    if (CONF / "experiment" / f"{method}_{dataset}.yaml").is_file():
        return [f"experiment={method}_{dataset}"]
    if (CONF / "experiment" / f"{method}_cora.yaml").is_file():
        return [f"experiment={method}_cora", f"dataset={dataset}"]
    return [f"model={method}", f"dataset={dataset}"]


def run_overrides(
    method: str,
    dataset: str,
    store: Path,
    extra: Sequence[str] = (),
    threads: int | None = None,
    keep_embeddings: bool = False,
) -> list[str]:
    """The Hydra overrides of every run of one preset (the seeds and epochs aside): the preset,
    the store, the papers' evaluation, the narrower-grid probe, quiet evaluation (the
    embeddings logged only with ``keep_embeddings``), then ``extra``."""
    return [
        *preset(method, dataset),
        f"paths.outputs_dir={store}",
        f"eval={papers_eval(dataset)}",
        "eval.diagnostics.enabled=false",
        "eval.figures=false",
        f"logger.log_embeddings={str(keep_embeddings).lower()}",
        f"logger.experiment_name={EXPERIMENT}",
        f"logger.run_name={method}-{dataset}-seed${{seed}}",
        "trainer.progress=false",
        *([f"num_threads={threads}"] if threads else []),
        "++eval.probes.logreg_spec._target_=graphssl.evaluation.logreg_probe.LogRegProbe",
        f"++eval.probes.logreg_spec.weight_decay=[{','.join(map(str, SPEC_GRID))}]",
        # selected the way the default probe is (validation split or inner cross-validation)
        "++eval.probes.logreg_spec.selection=${eval.probes.logreg.selection}",
        "++eval.probes.logreg_spec.inner_folds=${eval.probes.logreg.inner_folds}",
        "++eval.probes.logreg_spec.seed=${eval.probes.logreg.seed}",
        *(split_probe_overrides() if dataset in GRAPH_DATASETS else []),
        *extra,
    ]


def split_probe_overrides() -> list[str]:
    """A graph dataset's second default probe, ``logreg_split``: the default probe (its grid,
    early stop and seed) selecting its L2 strength on each training fold's 10 % validation part
    instead of by inner cross-validation, so that the leaderboard shows both protocols on the
    same embeddings."""
    return [
        "++eval.probes.logreg_split._target_=graphssl.evaluation.logreg_probe.LogRegProbe",
        "++eval.probes.logreg_split.weight_decay=${eval.probes.logreg.weight_decay}",
        "++eval.probes.logreg_split.early_stop=${eval.probes.logreg.early_stop}",
        "++eval.probes.logreg_split.selection=split",
        "++eval.probes.logreg_split.seed=${eval.probes.logreg.seed}",
    ]


def composed(overrides: Sequence[str]) -> Any:
    """``conf/train.yaml`` composed with ``overrides``, as ``graphssl`` would compose one run."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides))


def scaled_epochs(epochs: int, scale: float) -> int:
    """``epochs`` times ``scale``, rounded, at least 1."""
    return max(1, round(epochs * scale))


def multirun_command(overrides: Sequence[str], seeds: Sequence[int]) -> list[str]:
    """``graphssl -m`` with the basic launcher (jobs one after another in one process) over
    ``seeds``."""
    return [
        "graphssl",
        "-m",
        "hydra/launcher=basic",
        *overrides,
        f"seed={','.join(map(str, seeds))}",
    ]


def report_command(
    store: Path, out_dir: Path, probes: Sequence[str], extra: Sequence[str] = ()
) -> list[str]:
    """``graphssl-report kind=leaderboard`` of the store's benchmark runs, its files written to
    ``out_dir``, the probe columns ``probes`` in order."""
    return [
        "graphssl-report",
        "kind=leaderboard",
        f"experiment_name={EXPERIMENT}",
        f"paths.outputs_dir={store}",
        f"output_dir={out_dir}",
        f"leaderboard.probes=[{','.join(probes)}]",
        *extra,
    ]


def columns(configs: Sequence[tuple[str, Any]]) -> list[str]:
    """The probe columns of the runs of ``configs`` (``(method, composed config)`` each): the
    default probe, the narrower grid, then on graph datasets the default probe selecting on the
    validation part (``logreg_split``), each preset's papers' probe and its authors' own
    (the probe named after the method), those its config has, in order of first appearance."""
    out = ["logreg", "logreg_spec"]
    for method, cfg in configs:
        probes = cfg.eval.probes
        for p in ("logreg_split", "adam", "svc", method):
            if p not in out and probes.get(p) is not None:
                out.append(p)
    return out


def child_env() -> dict[str, str]:
    """The commands' environment: this checkout's graphssl, the store of ``paths.outputs_dir``
    (never ``$MLFLOW_TRACKING_URI``'s), the shared data folder when none is set."""
    env = dict(os.environ)
    env.pop("MLFLOW_TRACKING_URI", None)
    env.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    env.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    if "GRAPHSSL_DATA_DIR" not in env and (REPO.parent / "shared" / "data").is_dir():
        env["GRAPHSSL_DATA_DIR"] = str(REPO.parent / "shared" / "data")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


def executable(command: Sequence[str]) -> list[str]:
    """``command`` (a graphssl console command and its arguments) as this interpreter runs it:
    the console entry of :data:`ENTRIES` called with ``command`` as ``sys.argv``."""
    prog, *args = command
    entry = ENTRIES[prog]
    code = f"import sys; sys.argv[0] = {prog!r}; from graphssl.cli import {entry}; {entry}()"
    return [sys.executable, "-c", code, *args]


def run(command: Sequence[str]) -> int:
    """Run the console ``command`` with its output on this process's stderr (stdout is the
    table's); returns its exit status."""
    print(f"$ {shlex.join(command)}", file=sys.stderr, flush=True)
    try:
        err = sys.stderr.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):  # a captured stderr
        done = subprocess.run(executable(command), env=child_env(), capture_output=True, text=True)
        sys.stderr.write(done.stdout + done.stderr)
        return done.returncode
    return subprocess.run(executable(command), env=child_env(), stdout=err, stderr=err).returncode


def demote(markdown: str, levels: int) -> str:
    """``markdown`` with every heading ``levels`` deeper (a document's title inside a
    section)."""
    return re.sub(r"^#", "#" * (levels + 1), markdown, flags=re.M)


def replace_table(text: str, table: str) -> str:
    """``text`` with what lies between :data:`START` and :data:`END` replaced by ``table``
    (the markers kept).

    Raises:
        ValueError: ``text`` does not hold each marker once, the start before the end.
    """
    found = (text.count(START), text.count(END))
    if found != (1, 1) or text.index(START) > text.index(END):
        raise ValueError(
            f"expected one {START!r} line and, after it, one {END!r} line around the table to "
            f"replace; found {found[0]} and {found[1]}"
            + (", the end first" if found == (1, 1) else "")
        )
    head, rest = text.split(START, 1)
    tail = rest.split(END, 1)[1]
    return f"{head}{START}\n{table.strip()}\n{END}{tail}"


def arguments() -> argparse.ArgumentParser:
    """The command line of the script."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--methods",
        nargs="+",
        default=["cca_ssg", "dgi", "bgrl", "grace", "graphmae"],
        help="model names of conf/model (default: the node methods of BENCHMARKS.md's table, "
        "cca_ssg dgi bgrl grace graphmae)",
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
        help="multiply each preset's trainer.epochs (default: 1.0)",
    )
    parser.add_argument("--threads", type=int, default=None, help="num_threads of every run")
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
        help="the runs' MLflow store (with their embeddings, for graphssl-evaluate) instead of "
        "a temporary folder",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="train nothing: the leaderboard of the runs in --store",
    )
    parser.add_argument(
        "--probes",
        nargs="+",
        default=None,
        help="the leaderboard's probe columns, in order (default: logreg logreg_spec, then the "
        "papers' and the methods' own probes of the presets)",
    )
    parser.add_argument(
        "--report-override",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="overrides of graphssl-report (e.g. leaderboard.metric=val_acc)",
    )
    parser.add_argument(
        "--write",
        type=Path,
        default=None,
        metavar="FILE",
        help=f"replace the table between {START} and {END} in FILE with the leaderboard",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    from hydra.errors import HydraException

    parser = arguments()
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.epochs_scale <= 0:
        parser.error("--seeds must be >= 1 and --epochs-scale > 0")
    if args.report_only and (args.store is None or not args.store.is_dir()):
        parser.error("--report-only ranks the runs of an existing --store DIR")
    if args.write is not None:
        try:
            replace_table(args.write.read_text(), "")
        except (OSError, ValueError) as err:
            parser.error(f"--write {args.write}: {err}")

    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    failed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="graphssl-quality-") as tmp:
        store = (args.store or Path(tmp) / "store").absolute()
        # every preset composed first: a wrong name stops the script before any training
        plans = []
        for method in args.methods:
            for dataset in args.datasets:
                overrides = run_overrides(
                    method,
                    dataset,
                    store,
                    args.override,
                    args.threads,
                    keep_embeddings=args.store is not None,
                )
                try:
                    cfg = composed([*overrides, f"seed={seeds[0]}"])
                except HydraException as err:
                    parser.error(f"{method} on {dataset}: {err}")
                if args.epochs_scale != 1.0:
                    epochs = scaled_epochs(int(cfg.trainer.epochs), args.epochs_scale)
                    overrides.append(f"trainer.epochs={epochs}")
                plans.append((method, dataset, cfg, overrides))
        for method, dataset, _, overrides in [] if args.report_only else plans:
            if run(multirun_command(overrides, seeds)) != 0:
                failed.append(f"{method} on {dataset}")
        probes = args.probes or columns([(method, cfg) for method, _, cfg, _ in plans])
        out = Path(tmp) / "leaderboard"
        if run(report_command(store, out, probes, args.report_override)) != 0:
            parser.exit(1, "quality.py: error: graphssl-report failed (above)\n")
        table = (out / "leaderboard.md").read_text()
    print(table)
    if args.write is not None:
        args.write.write_text(replace_table(args.write.read_text(), demote(table, 2)))
        print(f"(table written to {args.write})", file=sys.stderr)
    if failed:
        print(f"quality.py: failed runs: {', '.join(failed)} (above)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
