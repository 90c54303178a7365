"""Command-line entry points (thin wrappers around importable functions)."""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig

CONFIG_PATH = str(Path(__file__).resolve().parent.parent / "conf")


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="config")
def main(cfg: DictConfig) -> float | None:
    """``graphssl``: train, evaluate and log one run (or one job of a multirun)."""
    from graphssl.pipeline import run

    metrics = run(cfg)
    value = metrics.get(str(cfg.get("optimized_metric")))
    return None if value is None else float(value)


if __name__ == "__main__":
    main()
