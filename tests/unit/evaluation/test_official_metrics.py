"""OGB's evaluator beside the probes: ``probe/<p>/ogb_test_<metric>``, from a fake datamodule
and from a generated ogbn-products folder through the train task."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from hydra import compose, initialize_config_dir

from graphssl.data.base import Split
from graphssl.evaluation import Evaluation
from graphssl.evaluation.knn_probe import KNNProbe
from graphssl.evaluation.logreg_probe import LogRegProbe
from graphssl.evaluation.official import official_metrics
from graphssl.evaluation.runner import run_probes

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))
from dataset_files import need_ogb, ogbn_zip, unzip_to

CONF = Path(__file__).resolve().parents[3] / "conf"


def blobs(n: int = 120, classes: int = 3, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % classes
    centres = 3.0 * torch.randn(classes, 8, generator=g)
    return centres[y] + torch.randn(n, 8, generator=g), y


def split(n: int) -> Split:
    ids = torch.randperm(n, generator=torch.Generator().manual_seed(1))
    return Split(train=ids[: n // 2], val=ids[n // 2 : 3 * n // 4], test=ids[3 * n // 4 :])


def accuracy(y_true: Any, y_pred: Any) -> float:
    return float(
        (torch.as_tensor(y_true).view(-1) == torch.as_tensor(y_pred).view(-1)).float().mean()
    )


def rocauc(y_true: Any, y_score: Any) -> float:
    """Mann-Whitney ROC-AUC of one binary task."""
    y, s = torch.as_tensor(y_true).view(-1), torch.as_tensor(y_score).view(-1).double()
    pos, neg = s[y == 1], s[y == 0]
    return float(
        ((pos[:, None] > neg[None, :]).double() + 0.5 * (pos[:, None] == neg[None, :])).mean()
    )


class FakeOGB:
    """Just what the train task asks of an OGB datamodule."""

    name = "fake-ogb"
    task = "classification"

    def __init__(self, labels: torch.Tensor, metric: str) -> None:
        self.labels = labels
        self.ogb_metric = metric
        self._split = split(labels.numel())

    def splits(self) -> list[Split]:
        return [self._split]

    def ogb_evaluator(self) -> Any:
        return accuracy if self.ogb_metric == "acc" else rocauc


def test_accuracy_from_every_probe_matches_the_probes_own() -> None:
    z, y = blobs()
    s = split(y.numel())
    probes = {"logreg": LogRegProbe(weight_decay=0.01), "knn": KNNProbe(k=5)}
    ours = run_probes(z, y, [s], probes)
    out = official_metrics(z, y, [s], probes, accuracy, "acc")
    assert set(out) == {"probe/logreg/ogb_test_acc", "probe/knn/ogb_test_acc"}
    assert out["probe/logreg/ogb_test_acc"] == pytest.approx(ours["probe/logreg/test_acc"])
    assert out["probe/knn/ogb_test_acc"] == pytest.approx(ours["probe/knn/test_acc"])
    with pytest.raises(ValueError, match="'rmse'"):
        official_metrics(z, y, [s], probes, accuracy, "rmse")


def test_rocauc_uses_positive_class_scores_and_skips_probes_without_scores(
    caplog: pytest.LogCaptureFixture,
) -> None:
    z, y = blobs(classes=2)
    s = split(y.numel())
    probes = {"logreg": LogRegProbe(weight_decay=0.01), "knn": KNNProbe(k=5)}
    with caplog.at_level(logging.INFO, logger="graphssl.evaluation.official"):
        out = official_metrics(z, y, [s], probes, rocauc, "rocauc")
    assert set(out) == {"probe/logreg/ogb_test_rocauc"}
    assert 0.9 < out["probe/logreg/ogb_test_rocauc"] <= 1.0  # separable blobs
    assert "'knn' gives no class scores" in caplog.text
    # flipped labels: the positive class's column is used, so the AUC flips too
    flipped = official_metrics(z, 1 - y, [s], probes, rocauc, "rocauc")
    assert flipped["probe/logreg/ogb_test_rocauc"] == pytest.approx(
        out["probe/logreg/ogb_test_rocauc"]
    )


def test_the_evaluation_refits_with_the_selected_weight_decay() -> None:
    z, y = blobs()
    dm = FakeOGB(y, "acc")
    evaluation = Evaluation(probes={"logreg": LogRegProbe(weight_decay=[10.0, 0.01])})
    ours = run_probes(z, y, dm.splits(), {"logreg": LogRegProbe(weight_decay=[10.0, 0.01])})
    out = evaluation.ogb_metrics(dm, z, y, ours)
    assert out["probe/logreg/ogb_test_acc"] == pytest.approx(ours["probe/logreg/test_acc"])
    assert evaluation.ogb_metrics(object(), z, y, ours) == {}
    # probe_metrics is the probes and OGB's metric in one call
    both = evaluation.probe_metrics(dm, z, y, seed=0)
    assert both["probe/logreg/ogb_test_acc"] == pytest.approx(out["probe/logreg/ogb_test_acc"])


def test_a_run_on_an_ogb_folder_logs_ogbs_accuracy(
    outputs_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need_ogb()
    from graphssl.tasks.train import train

    data = tmp_path / "data"
    ogbn_zip(tmp_path / "products.zip", "products", "sales_ranking", extra_year=False)
    unzip_to(tmp_path / "products.zip", data / "OGB" / "ogbn_products")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            config_name="train",
            overrides=[
                "dataset=ogbn_products",
                f"paths.data_dir={data}",
                f"paths.outputs_dir={outputs_dir}",
                "paths.download=false",
                "trainer.epochs=2",
                "trainer.progress=false",
                "eval.figures=false",
                "logger.log_embeddings=false",
            ],
        )
    metrics = train(cfg)
    assert metrics["probe/logreg/ogb_test_acc"] == pytest.approx(metrics["probe/logreg/test_acc"])
    assert metrics["probe/knn/ogb_test_acc"] == pytest.approx(metrics["probe/knn/test_acc"])
    assert "probe/logreg/baseline_ogb_test_acc" in metrics
