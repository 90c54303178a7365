"""Probe accuracy along training, for any configured run.

Composes ``conf/config.yaml`` with the given Hydra overrides, trains once, and every ``--every``
epochs (and after the first) extracts the embeddings and prints the training loss and the
validation and test accuracy of the run's configured probes (``eval.probes``: ``logreg`` and
``knn`` by default, plus any a preset adds, e.g. GRACE's cross-validated ``grace``; with
``--adam``, also the papers' ``AdamLinearProbe``). Seeded as ``graphssl`` seeds a run, so
the last line equals the run's ``probe/*`` when the run does not select its weights
(``callbacks.selection``; this script ignores it and shows the whole curve). STUDIES.md §7
uses it to choose epoch counts on validation accuracy (BGRL, GRACE) and to follow GraphMAE's two
initialisations.

Usage::

    python benchmarks/probe_curve.py --every 25 experiment=bgrl_citeseer trainer.epochs=300
    python benchmarks/probe_curve.py --every 200 experiment=grace_cora trainer.epochs=400 seed=1
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def probe_curve(
    overrides: Sequence[str], every: int, threads: int = 1, adam: bool = False, label: str = ""
) -> None:
    """Train the composed run and print one line of probe accuracies every ``every`` epochs."""
    if "GRAPHSSL_DATA_DIR" not in os.environ and (REPO.parent / "shared" / "data").is_dir():
        os.environ["GRAPHSSL_DATA_DIR"] = str(REPO.parent / "shared" / "data")

    import torch
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from graphssl.evaluation.adam_probe import AdamLinearProbe
    from graphssl.evaluation.extraction import extract_embeddings
    from graphssl.tasks.components import (
        build_datamodule,
        build_method,
        build_probes,
        resolve_config,
    )
    from graphssl.training.trainer import Callback
    from graphssl.utils import seed_everything

    torch.set_num_threads(threads)
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = resolve_config(
            compose(config_name="train", overrides=[*overrides, "trainer.progress=false"])
        )
    seed_everything(int(cfg.seed))
    dm = build_datamodule(cfg)
    method = build_method(cfg, dm)
    split = dm.splits()[0]
    # the run's configured probes that fit its task, as the run builds them
    probes: dict[str, Any] = build_probes(cfg.eval.probes, dm)
    if adam:
        probes["Adam probe"] = AdamLinearProbe(seed=int(cfg.seed))
    source = cfg.eval.extraction.encoder_source

    class Every(Callback):
        def on_epoch_end(self, trainer: Any, m: Any, result: Any) -> None:
            if result.epoch and (result.epoch + 1) % every:
                return
            m.eval()
            z, y = extract_embeddings(m, dm, encoder_source=source)
            m.train()
            cols = []
            for name, p in probes.items():
                out = p.evaluate(z, y, split.train, split.val, split.test)
                cols.append(
                    f"{name} val {100 * out['val_acc']:.1f} test {100 * out['test_acc']:.1f}"
                )
            print(
                f"{label}epoch {result.epoch + 1:5d}  loss {result.metrics['loss']:.4f}  "
                + "  ".join(cols),
                flush=True,
            )

    t0 = time.perf_counter()
    instantiate(cfg.trainer, callbacks=[Every()], checkpoint_path=None).fit(method, dm)
    print(f"{cfg.trainer.epochs} epochs in {time.perf_counter() - t0:.0f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. experiment=grace_cora")
    parser.add_argument("--every", type=int, default=25, help="evaluate every N epochs")
    parser.add_argument("--adam", action="store_true", help="also the papers' Adam probe")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    args = parser.parse_args(argv)
    if args.every < 1:
        parser.error(f"--every must be >= 1, got {args.every}")
    probe_curve(args.overrides, args.every, args.threads, args.adam)
    return 0


if __name__ == "__main__":
    sys.exit(main())
