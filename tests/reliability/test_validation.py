"""A config that cannot run is refused before any work: no MLflow run is created (so none is left
RUNNING or marked FINISHED, and no training is lost to a changed config hash), the error is one
paragraph naming the key or file and what was expected, and the corrected config then runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from faultkit import run_statuses

FAST = ["dataset=sbm", "trainer.epochs=2", "eval.figures=false", "logger.log_embeddings=false"]


def cli(cmd, env, *args, timeout=300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, timeout=timeout)


def assert_refused(res, outputs: Path, *needles: str) -> None:
    assert res.returncode != 0
    for needle in needles:
        assert needle in res.stderr, f"{needle!r} not in stderr:\n{res.stderr[-2000:]}"
    assert "Traceback" not in res.stderr
    assert run_statuses(outputs / "mlflow.db") == []  # refused before any run was created


@pytest.mark.parametrize(
    ("override", "needles"),
    [
        ("+eval.probes.bogus={k: 3}", ["eval.probes.bogus", "has no _target_"]),
        (
            "eval.probes.knn._target_=graphssl.evaluation.knn.NoSuchProbe",
            ["eval.probes.knn._target_='graphssl.evaluation.knn.NoSuchProbe'", "cannot be built"],
        ),
        ("+eval.probes.knn.kk=3", ["eval.probes.knn._target_", "kk"]),
        (
            "trainer.epochs=100000000000000000000",
            ["trainer.epochs=100000000000000000000 is out of range", "at most 10000000"],
        ),
        ("seed=-1", ["seed=-1 is out of range"]),
        ("trainer.epochs=abc", ["trainer.epochs must be an integer, got 'abc' (str)"]),
    ],
)
def test_refused_before_training(graphssl_cmd, cli_env, outputs_dir, override, needles) -> None:
    assert_refused(cli(graphssl_cmd, cli_env, *FAST, override), outputs_dir, *needles)


@pytest.mark.parametrize(
    "key", ["trainer.num_neighbors", "eval.extraction.num_neighbors"], ids=["train", "extract"]
)
def test_fanouts_must_match_the_encoders_depth(graphssl_cmd, cli_env, outputs_dir, key) -> None:
    mode = key.rsplit(".", 1)[0] + ".mini_batch=true"
    res = cli(graphssl_cmd, cli_env, *FAST, "encoder.num_layers=2", mode, f"{key}=[5,5,5,5]")
    assert_refused(res, outputs_dir, f"{key}=[5, 5, 5, 5] samples 4 hop(s)", "encoder.num_layers=2")


def test_unknown_probe_then_the_fixed_config_runs(graphssl_cmd, cli_env, outputs_dir) -> None:
    res = cli(graphssl_cmd, cli_env, *FAST, "+eval.probes.bogus={k: 3}")
    assert_refused(res, outputs_dir, "eval.probes.bogus")
    res = cli(graphssl_cmd, cli_env, *FAST, "encoder.num_layers=2", "trainer.mini_batch=true")
    assert res.returncode == 0, res.stderr[-2000:]
    assert run_statuses(outputs_dir / "mlflow.db") == ["FINISHED"]


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"# @package _global_\ntrainer:\n  epochs: 2\n# caf\xe9\n", "is not valid UTF-8 text"),
        (b"- trainer\n- epochs\n", "holds a YAML list (2 items)"),
    ],
    ids=["latin1", "list"],
)
def test_bad_experiment_file(graphssl_cmd, cli_env, outputs_dir, tmp_path, content, needle):
    folder = tmp_path / "conf" / "experiment"
    folder.mkdir(parents=True)
    (folder / "mine.yaml").write_bytes(content)
    search = f"hydra.searchpath=[file://{tmp_path / 'conf'}]"
    res = cli(graphssl_cmd, cli_env, *FAST, search, "+experiment=mine")
    assert_refused(res, outputs_dir, str(folder / "mine.yaml"), needle, "expected a")
