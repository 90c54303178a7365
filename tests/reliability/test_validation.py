"""A config that cannot run is refused before any work: no MLflow run is created (so none is left
RUNNING or marked FINISHED, and no training is lost to a changed config hash), the error names
the key or file and what was expected, and the corrected config then runs.

The train task runs in-process (the ``tasks`` fixture); that the CLI prints such a refusal as
one paragraph without a traceback is tested in tests/integration/test_cli.py.
"""

from __future__ import annotations

import pytest

FAST = ["dataset=sbm", "trainer.epochs=2", "eval.figures=false", "logger.log_embeddings=false"]


def assert_refused(tasks, *overrides: str, needles: list[str]) -> None:
    with pytest.raises(Exception) as info:
        tasks.train(*FAST, *overrides)
    text = str(info.value)
    for needle in needles:
        assert needle in text, f"{needle!r} not in the error:\n{text[-2000:]}"
    assert tasks.statuses() == []  # refused before any run was created


@pytest.mark.parametrize(
    ("override", "needles"),
    [
        ("+eval.probes.bogus={k: 3}", ["eval.probes.bogus", "has no _target_"]),
        (
            "eval.probes.knn._target_=graphssl.evaluation.knn_probe.NoSuchProbe",
            [
                "eval.probes.knn._target_='graphssl.evaluation.knn_probe.NoSuchProbe'",
                "cannot be built",
            ],
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
def test_refused_before_training(tasks, override, needles) -> None:
    assert_refused(tasks, override, needles=needles)


@pytest.mark.parametrize(
    "key", ["trainer.num_neighbors", "eval.extraction.num_neighbors"], ids=["train", "extract"]
)
def test_fanouts_must_match_the_encoders_depth(tasks, key) -> None:
    mode = key.rsplit(".", 1)[0] + ".mini_batch=true"
    assert_refused(
        tasks,
        "encoder.num_layers=2",
        mode,
        f"{key}=[5,5,5,5]",
        needles=[f"{key}=[5, 5, 5, 5] samples 4 hop(s)", "encoder.num_layers=2"],
    )


def test_unknown_probe_then_the_fixed_config_runs(tasks) -> None:
    assert_refused(tasks, "+eval.probes.bogus={k: 3}", needles=["eval.probes.bogus"])
    tasks.train(*FAST, "encoder.num_layers=2", "trainer.mini_batch=true")
    assert tasks.statuses() == ["FINISHED"]


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"# @package _global_\ntrainer:\n  epochs: 2\n# caf\xe9\n", "is not valid UTF-8 text"),
        (b"- trainer\n- epochs\n", "holds a YAML list (2 items)"),
    ],
    ids=["latin1", "list"],
)
def test_bad_experiment_file(tasks, tmp_path, content, needle):
    folder = tmp_path / "conf" / "experiment"
    folder.mkdir(parents=True)
    (folder / "mine.yaml").write_bytes(content)
    search = f"hydra.searchpath=[file://{tmp_path / 'conf'}]"
    assert_refused(
        tasks, search, "+experiment=mine", needles=[str(folder / "mine.yaml"), needle, "expected a"]
    )
