"""Entry points of the analysis commands ``graphssl-compare`` and ``graphssl-report``.

Thin ``@hydra.main`` wrappers around :func:`graphssl.compare.run_compare` and
:func:`graphssl.report.run_report` (style rule 1); configs: ``conf_analysis/compare.yaml``,
``conf_analysis/report.yaml``.
"""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig

# A folder of its own, beside conf/: conf/ has an `experiment` group, which would turn
# `experiment=<name>` into a defaults-list override instead of the MLflow experiment to read
# (and a folder inside conf/ would be listed as a group by `graphssl --help`).
CONFIG_PATH = str(Path(__file__).resolve().parent.parent / "conf_analysis")


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="compare")
def compare_main(cfg: DictConfig) -> None:
    """``graphssl-compare``: EMIR ranking of the embedders of several runs."""
    from graphssl.compare import run_compare

    run_compare(cfg)


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="report")
def report_main(cfg: DictConfig) -> None:
    """``graphssl-report``: which diagnostic predicts downstream accuracy, per group of runs."""
    from graphssl.report import run_report

    run_report(cfg)


if __name__ == "__main__":
    compare_main()
