"""docs/extending.md, done as the page shows it: a user's own method, dataset, probe and
diagnostic, in a package and a config folder outside graphssl, reach a run and its MLflow store.

The page's files (every ``python`` or ``yaml`` block whose first line is ``# <path>``) are
written into a temporary project folder, which goes on ``sys.path``; each of the page's commands
(``PYTHONPATH=$PWD graphssl ...``, ``$PWD`` being that folder) is composed in-process with
Hydra's compose API and its overrides, plus a few that keep the run small (2 epochs, no figures,
no stored embeddings, a temporary store), and trained with :func:`graphssl.tasks.train.train`.
"""

from __future__ import annotations

import importlib
import math
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.errors import InstantiationException
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig

from graphssl.tasks.train import train
from graphssl.tasks.validate import ConfigError

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf"
DOC = REPO / "docs" / "extending.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
PREFIX = "PYTHONPATH=$PWD graphssl "
#: what keeps a shown command's run to seconds here; none of it changes which objects are built
SMALL = [
    "trainer.epochs=2",
    "trainer.progress=false",
    "eval.figures=false",
    "logger.log_embeddings=false",
    "logger.experiment_name=extending",
]


def shown_files() -> dict[str, str]:
    """``{path: text}`` of the page's ``python`` and ``yaml`` blocks that start ``# <path>``."""
    files = {}
    for m in FENCE.finditer(DOC.read_text()):
        first = m[2].splitlines()[0]
        if m[1] in ("python", "yaml") and re.fullmatch(r"# [\w/]+\.(py|yaml)", first):
            files[first[2:]] = m[2]
    return files


def shown_command(*parts: str) -> str:
    """The one ``PYTHONPATH=$PWD graphssl`` command of the page's ``bash`` blocks that contains
    every one of ``parts``."""
    found = [
        line.strip()
        for m in FENCE.finditer(DOC.read_text())
        if m[1] == "bash"
        for line in m[2].splitlines()
        if line.startswith(PREFIX) and all(p in line for p in parts)
    ]
    assert len(found) == 1, f"docs/extending.md shows {len(found)} commands with {parts}: {found}"
    return found[0]


def overrides(command: str, project: Path) -> list[str]:
    """A shown command's Hydra overrides, with ``$PWD`` the project folder, as the shell
    would pass them."""
    words = shlex.split(command[len(PREFIX) :].replace("$PWD", str(project)))
    assert all(("=" in w or w.startswith("~")) and not w.startswith("-") for w in words), words
    return words


@pytest.fixture
def project(tmp_path: Path, outputs_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``my_project/`` of the page, importable, as the working directory."""
    root = tmp_path / "my_project"
    files = shown_files()
    assert {"my_ext/smooth.py", "my_conf/eval/mine.yaml"} <= set(files), sorted(files)
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "my_ext" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.chdir(root)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield root
    torch.set_num_threads(threads)
    for name in [n for n in sys.modules if n == "my_ext" or n.startswith("my_ext.")]:
        del sys.modules[name]  # the next test imports its own project's copy


def _compose(project: Path, words: list[str]) -> DictConfig:
    outputs = project.parent / "outputs"
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(
            config_name="train", overrides=[*words, *SMALL, f"paths.outputs_dir={outputs}"]
        )


def _client(project: Path) -> MlflowClient:
    return MlflowClient(f"sqlite:///{project.parent / 'outputs' / 'mlflow.db'}")


def _runs(project: Path) -> list[Any]:
    client = _client(project)
    exp = client.get_experiment_by_name("extending")
    return [] if exp is None else list(client.search_runs([exp.experiment_id]))


def _train(project: Path, words: list[str]) -> tuple[dict[str, float], Any]:
    """Train the composed config; its metrics and its one finished MLflow run."""
    metrics = train(_compose(project, words))
    (run,) = _runs(project)
    assert run.info.status == "FINISHED"
    return metrics, run


def test_a_method_of_ones_own(project: Path) -> None:
    words = overrides(shown_command("model=smooth"), project)
    assert f"hydra.searchpath=[file://{project}/my_conf]" in words
    cfg = _compose(project, words)
    assert cfg.model._target_ == "my_ext.smooth.SmoothDecorrelated"

    metrics, run = _train(project, words)
    assert run.data.tags["mlflow.runName"] == "smoothdecorrelated-SBM"
    assert run.data.params["model._target_"] == "my_ext.smooth.SmoothDecorrelated"
    client = _client(project)
    for key in ("train/loss", "train/smooth"):  # every key of the user's loss dict, per epoch
        history = client.get_metric_history(run.info.run_id, key)
        assert [m.step for m in history] == [0, 1], key
        assert all(math.isfinite(m.value) for m in history), key
    for key in ("probe/logreg/test_acc", "probe/logreg/baseline_test_acc", "diag/rankme"):
        assert run.data.metrics[key] == pytest.approx(metrics[key]), key

    from graphssl.tracking.models import load_method

    uri = f"sqlite:///{project.parent / 'outputs' / 'mlflow.db'}"
    loaded = load_method(run.info.run_id, tracking_uri=uri)
    assert type(loaded) is importlib.import_module("my_ext.smooth").SmoothDecorrelated
    assert loaded.lam == 0.01  # my_conf/model/smooth.yaml's value


def test_a_method_by_target_override_on_a_configured_one(project: Path) -> None:
    """The page's no-YAML variant: ``model._target_=...`` over DGI's keys."""
    words = overrides(shown_command("model._target_="), project)
    assert "model=smooth" not in words and not any(w.startswith("hydra.") for w in words)
    _, run = _train(project, words)
    assert run.data.tags["mlflow.runName"] == "smoothdecorrelated-SBM"
    assert "train/smooth" in run.data.metrics


def test_a_dataset_of_ones_own(project: Path) -> None:
    words = overrides(shown_command("dataset=ring"), project)
    metrics, run = _train(project, words)
    assert run.data.tags["mlflow.runName"] == "dgi-RingOfCliques"
    assert run.data.params["dataset._target_"] == "my_ext.ring.RingOfCliques"
    assert run.data.metrics["data/num_nodes"] == 40  # 4 cliques of 10
    assert run.data.metrics["data/num_edges"] == 4 * 45 + 4  # the cliques' and the ring's
    assert [d.dataset.name for d in run.inputs.dataset_inputs] == ["RingOfCliques"]
    assert 0.0 <= metrics["probe/logreg/test_acc"] <= 1.0


def test_a_dataset_key_its_class_does_not_accept_is_named(project: Path) -> None:
    words = overrides(shown_command("dataset=ring"), project)
    with pytest.raises(
        InstantiationException, match=r"RingOfCliques got unknown argument.*'num_rings'"
    ):
        train(_compose(project, [*words, "+dataset.num_rings=2"]))
    assert _runs(project) == []  # the data is built before the run is opened


def test_a_probe_and_a_diagnostic_from_an_eval_config_of_ones_own(project: Path) -> None:
    words = overrides(shown_command("eval=mine"), project)
    _, run = _train(project, words)
    logged = run.data.metrics
    assert (
        run.data.params["eval.probes.centroid._target_"] == "my_ext.centroid.NearestCentroidProbe"
    )
    for split in ("train", "val", "test"):
        assert 0.0 <= logged[f"probe/centroid/{split}_acc"] <= 1.0
    assert logged["probe/centroid/gain"] == pytest.approx(
        logged["probe/centroid/test_acc"] - logged["probe/centroid/baseline_test_acc"]
    )
    assert "probe/logreg/test_acc" in logged and "probe/knn/test_acc" in logged  # the defaults
    width = 512  # the embedding width: conf/encoder/gcn.yaml's hidden_channels
    for key in ("diag/participation_ratio", "diag_baseline/participation_ratio"):
        assert 1.0 <= logged[key] <= width, key
    assert "diag/rankme" in logged  # the suite runs beside the extra diagnostic


def test_a_probe_on_the_command_line(project: Path) -> None:
    words = overrides(shown_command("+eval.probes.centroid="), project)
    _, run = _train(project, words)
    assert run.data.params["eval.probes.centroid.normalize"] == "False"
    assert 0.0 <= run.data.metrics["probe/centroid/test_acc"] <= 1.0
    assert "probe/centroid/gain" in run.data.metrics


def test_a_diagnostic_on_the_command_line(project: Path) -> None:
    words = overrides(shown_command("+eval.diagnostics.extra.participation_ratio="), project)
    _, run = _train(project, words)
    assert 1.0 <= run.data.metrics["diag/participation_ratio"] <= 512
    assert "probe/centroid/test_acc" not in run.data.metrics


def test_a_probe_that_cannot_be_built_is_refused_before_any_run(project: Path) -> None:
    command = shown_command("+eval.probes.centroid=")
    words = overrides(command.replace("NearestCentroidProbe", "NoSuchProbe"), project)
    with pytest.raises(ConfigError, match=r"eval\.probes\.centroid\._target_"):
        train(_compose(project, words))
    assert _runs(project) == []


def test_a_diagnostic_without_partial_is_refused_before_any_run(project: Path) -> None:
    command = shown_command("+eval.diagnostics.extra.participation_ratio=")
    assert ",_partial_:true}" in command
    words = overrides(command.replace(",_partial_:true}", "}"), project)
    with pytest.raises(InstantiationException, match=r"my_ext\.diagnostics\.participation_ratio"):
        train(_compose(project, words))
    assert _runs(project) == []
