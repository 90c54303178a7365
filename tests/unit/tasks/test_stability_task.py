"""``graphssl-stability``: config composes; a small study is printed and logged to MLflow."""

from __future__ import annotations

from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from graphssl.cli import CONFIG_PATH
from graphssl.tasks.components import resolve_config
from graphssl.tasks.stability import run_stability


def test_stability_run_is_logged(outputs_dir: Path, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    emb = tmp_path / "emb.pt"
    torch.save(
        {"embeddings": torch.randn(400, 16, generator=torch.Generator().manual_seed(1))}, emb
    )
    with initialize_config_dir(config_dir=CONFIG_PATH, version_base="1.3"):
        cfg = compose(
            "stability",
            overrides=[
                f"paths.outputs_dir={outputs_dir}",
                "stability.generated.num_rows=500",
                "stability.generated.dim=16",
                f"stability.sources=[generated,{emb}]",
                "stability.repeats=2",
                "stability.metrics=[rankme,stable_rank]",
            ],
        )
    cfg = resolve_config(cfg)
    assert OmegaConf.select(cfg, "logger.experiment_name") == "stability"
    result = run_stability(cfg)
    assert result.batch_sizes == [128, 256] and len(result.sources) == 2
    out = capsys.readouterr().out
    assert "| RankMe |" in out and "| Stable rank |" in out

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{outputs_dir / 'mlflow.db'}")
    exp = client.get_experiment_by_name("stability")
    assert exp is not None
    (run,) = client.search_runs([exp.experiment_id])
    assert run.data.tags["graphssl.role"] == "stability"
    assert 0.0 <= run.data.metrics["stability/rankme/bounded"] <= 1.0
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "stability/rankme/q_mean")]
    assert sorted(steps) == [128, 256]
    assert "stability_table.md" in [a.path for a in client.list_artifacts(run.info.run_id)]
