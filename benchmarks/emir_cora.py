"""Quality benchmark: does EMIR informativeness rank Cora embedders like their probes?

Trains a zoo of graph embedders on Cora (DGI, GRACE, BGRL with different hidden sizes and
training lengths, plus an untrained GCN) with :func:`graphssl.tasks.train.train` in-process
(Hydra ``compose``, MLflow in a temporary store), then runs
:func:`graphssl.tasks.compare.run_compare` on their ``embeddings.pt`` artifacts and prints the
Spearman / Kendall correlation of the EMIR informativeness ranking with the linear-probe test
accuracy (``probe/logreg/test_acc``), next to the cross-encoder L2 baseline's (lower L2 =
better, so a good baseline has a *negative* correlation). Reference (EMIR rebuttal,
NLP/molecules): Spearman +0.90/+0.94 for I_S vs -0.84/-0.90 for the L2 baseline.

Needs the offline Cora files (``$GRAPHSSL_DATA_DIR`` or ``../shared/data``). CPU only.

Usage::

    python benchmarks/emir_cora.py                         # 9 embedders, EMIR spec defaults
    python benchmarks/emir_cora.py --max-rows 1500 --emir-epochs 5   # faster
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"

#: (run name, model, hidden, epochs)
ZOO: list[tuple[str, str, int, int]] = [
    ("dgi-h256-e60", "dgi", 256, 60),
    ("dgi-h128-e40", "dgi", 128, 40),
    ("dgi-h64-e20", "dgi", 64, 20),
    ("dgi-h128-e3", "dgi", 128, 3),
    ("grace-h128-e60", "grace", 128, 60),
    ("grace-h64-e20", "grace", 64, 20),
    ("bgrl-h128-e60", "bgrl", 128, 60),
    ("bgrl-h64-e20", "bgrl", 64, 20),
    ("gcn-h128-untrained", "dgi", 128, 0),
]


def data_dir() -> Path:
    for c in (os.environ.get("GRAPHSSL_DATA_DIR"), str(REPO.parent / "shared" / "data")):
        if c and (Path(c) / "Planetoid").is_dir():
            return Path(c)
    sys.exit("Cora not found: set GRAPHSSL_DATA_DIR to a folder with Planetoid/Cora/raw")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-rows", type=int, default=None, help="EMIR row subset")
    parser.add_argument(
        "--emir-epochs", type=int, default=None, help="override emir.n_epochs (spec default 10)"
    )
    parser.add_argument(
        "--ce-epochs", type=int, default=None, help="override cross_encoder.epochs (spec default 5)"
    )
    parser.add_argument("--keep", type=Path, default=None, help="keep the MLflow store here")
    parser.add_argument(
        "--skip-training",
        action="store_true",
        help="reuse the runs already in the --keep store (only rerun the comparison)",
    )
    args = parser.parse_args()

    from graphssl.tasks.compare import run_compare
    from graphssl.tasks.train import train as run

    print(
        f"python {platform.python_version()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, {platform.machine()}"
    )
    outputs = args.keep or Path(tempfile.mkdtemp(prefix="emir-cora-"))
    outputs.mkdir(parents=True, exist_ok=True)
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    common = [
        f"paths.outputs_dir={outputs}",
        f"paths.data_dir={data_dir()}",
        "dataset=cora",
        "encoder=gcn",
        "trainer.patience=null",
        "eval.figures=false",
        "~eval.probes.knn",
        "trainer.progress=false",
    ]
    run_ids: list[str] = []
    accs: dict[str, float] = {}
    t0 = time.perf_counter()
    if args.skip_training and not args.keep:
        sys.exit("--skip-training needs --keep <store folder of an earlier run>")
    zoo = [] if args.skip_training else ZOO
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        for name, model, hidden, epochs in zoo:
            t = time.perf_counter()
            cfg = compose(
                config_name="train",
                overrides=[
                    *common,
                    f"model={model}",
                    f"encoder.hidden_channels={hidden}",
                    f"trainer.epochs={epochs}",
                    f"logger.run_name={name}",
                ],
            )
            metrics = run(cfg)
            accs[name] = metrics["probe/logreg/test_acc"]
            print(
                f"trained {name:<20} test_acc {accs[name]:.4f}  ({time.perf_counter() - t:.0f} s)",
                flush=True,
            )
        t_train = time.perf_counter() - t0

    from graphssl.tracking import artifacts
    from graphssl.tracking.mlflow_store import resolve_tracking_uri
    from graphssl.tracking.store import TrackingStore

    store = TrackingStore(resolve_tracking_uri(None, outputs), "graphssl")
    run_ids = [r.run_id for r in artifacts.select_runs(store, experiment="graphssl")]
    overrides = [
        f"paths.outputs_dir={outputs}",
        f"output_dir={outputs / 'compare'}",
        f"run_ids=[{','.join(run_ids)}]",
        "progress=false",
    ]
    if args.max_rows:
        overrides.append(f"max_rows={args.max_rows}")
    if args.emir_epochs is not None:
        overrides.append(f"emir.n_epochs={args.emir_epochs}")
    if args.ce_epochs is not None:
        overrides.append(f"cross_encoder.epochs={args.ce_epochs}")
    t1 = time.perf_counter()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        result = run_compare(compose(config_name="compare", overrides=overrides))
        t_compare = time.perf_counter() - t1

    c = result.correlations
    print()
    print(
        f"Cora, {len(result.names)} embedders, {result.n_rows} rows; training {t_train:.0f} s, "
        f"compare {t_compare:.0f} s; overrides: {' '.join(overrides[3:]) or 'none'}"
    )
    print("| ranking vs probe/logreg/test_acc | Spearman | Kendall |")
    print("|---|---|---|")
    print(
        f"| EMIR informativeness (higher = better) | {c['emir/spearman_informativeness']:+.3f} "
        f"| {c['emir/kendall_informativeness']:+.3f} |"
    )
    if "emir/spearman_cross_encoder" in c:
        print(
            f"| cross-encoder L2 (lower = better) | {c['emir/spearman_cross_encoder']:+.3f} "
            f"| {c['emir/kendall_cross_encoder']:+.3f} |"
        )
    print(f"communities: {[sorted(x) for x in result.communities]}")
    print(f"MLflow store: {outputs / 'mlflow.db'} (compare run {result.run_id})")


if __name__ == "__main__":
    main()
