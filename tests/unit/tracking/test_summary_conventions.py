"""Sweep summaries' helpers, MLflow's conventional tags, and titled figures."""

from __future__ import annotations

import torch

from graphssl.evaluation.plots import projection_figure, spectrum_figure
from graphssl.tracking.conventions import split_config_values, standard_tags
from graphssl.tracking.summary import child_label, parse_overrides, swept_keys
from graphssl.tracking.sweep import job_run_name


def test_swept_keys_are_the_sweep_overrides_and_the_sweepers_space() -> None:
    keys = swept_keys(
        ["dataset=sbm", "model=dgi,grace", "trainer.epochs=range(2,4)", "seed=1"],
        ["encoder.hidden_channels"],
    )
    assert keys == ["model", "trainer.epochs", "encoder.hidden_channels"]


def test_child_names_carry_the_swept_values() -> None:
    overrides = ["dataset=sbm", "model=dgi", "trainer.epochs=50"]
    assert parse_overrides(" ".join(overrides))["trainer.epochs"] == "50"
    assert child_label(parse_overrides(" ".join(overrides)), ["trainer.epochs"]) == (
        "trainer.epochs=50"
    )
    parent = {"swept": ["trainer.epochs"]}
    assert job_run_name("dgi-Cora", overrides, parent) == "dgi-Cora[trainer.epochs=50]"
    assert job_run_name("dgi-Cora", overrides, None) == "dgi-Cora"


def test_configuration_values_become_tags() -> None:
    metrics = {
        "probe/logreg/test_acc": 0.8,
        "probe/logreg/weight_decay": 0.001,
        "probe/logreg/converged": 1.0,
        "probe/logreg/num_splits": 10.0,
        "probe/knn/k": 20.0,
        "diag/rankme": 12.5,
    }
    measured, tags = split_config_values(metrics)
    assert measured == {"probe/logreg/test_acc": 0.8, "diag/rankme": 12.5}
    assert tags == {
        "probe/logreg/weight_decay": "0.001",
        "probe/logreg/converged": "1",
        "probe/logreg/num_splits": "10",
        "probe/knn/k": "20",
    }


def test_standard_tags() -> None:
    tags = standard_tags("abc123-dirty", ["model=grace", "trainer.epochs=5"])
    assert tags["mlflow.source.git.commit"] == "abc123"
    assert tags["mlflow.note.content"] == "`graphssl model=grace trainer.epochs=5`"
    assert tags["mlflow.user"]
    assert "mlflow.source.git.commit" not in standard_tags("unknown", None)


def test_figures_are_titled_with_the_run() -> None:
    z = torch.randn(200, 16, generator=torch.Generator().manual_seed(0))
    y = torch.arange(200) % 3
    title = "DGI on Cora · dgi-Cora"
    for fig in (spectrum_figure(z, title=title), projection_figure(z, y, title=title)):
        assert fig.axes[0].get_title().startswith(title + "\n")
    assert spectrum_figure(z).axes[0].get_title().startswith("Embedding spectrum")


def test_the_children_figure_with_long_labels_warns_nothing(tmp_path) -> None:
    """Many swept values make tick labels longer than the figure: it is drawn and saved as the
    sweep parent saves it, without matplotlib's "Tight layout not applied" warning."""
    import warnings

    import matplotlib.pyplot as plt

    from graphssl.tracking.summary import FIGURE_SAVE_KWARGS, _figure

    keys = [f"model.augment{i}.feature_p" for i in range(6)]
    rows = [
        {
            "run_name": f"r{j}",
            "m": 0.5 + j / 10,
            **{k: f"0.{j}{i}123456" for i, k in enumerate(keys)},
        }
        for j in range(3)
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = _figure(rows, keys, "m", "sweep: m per child")
        fig.savefig(tmp_path / "children.png", **FIGURE_SAVE_KWARGS)
    plt.close(fig)
    assert (tmp_path / "children.png").stat().st_size > 0
