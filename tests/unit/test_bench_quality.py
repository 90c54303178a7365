"""``benchmarks/quality.py``: the presets it resolves, the overrides and commands it builds, the
columns it asks the leaderboard for, and the table it writes between BENCHMARKS.md's markers.
Nothing is trained (the script end to end: tests/integration/test_quality_benchmark.py)."""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks" / "quality.py"


@pytest.fixture(scope="module")
def quality(load_benchmark: Callable[[str], ModuleType]) -> ModuleType:
    return load_benchmark("quality")


# ---------------------------------------------------------------- presets and overrides


def test_presets_resolve_to_the_tuned_experiment_then_the_cora_one_then_the_model(
    quality: ModuleType,
) -> None:
    assert quality.preset("dgi", "citeseer") == ["experiment=dgi_citeseer"]
    # no dgi_pubmed preset: DGI's Cora settings on PubMed
    assert not (REPO / "conf" / "experiment" / "dgi_pubmed.yaml").exists()
    assert quality.preset("dgi", "pubmed") == ["experiment=dgi_cora", "dataset=pubmed"]
    # no supervised preset at all: the model's own defaults
    assert not list((REPO / "conf" / "experiment").glob("supervised_*.yaml"))
    assert quality.preset("supervised", "cora") == ["model=supervised", "dataset=cora"]


def test_run_overrides_compose_the_preset_with_the_benchmarks_probes(
    quality: ModuleType, tmp_path: Path
) -> None:
    node = quality.composed([*quality.run_overrides("dgi", "pubmed", tmp_path), "seed=5"])
    assert node.model._target_ == "graphssl.methods.dgi.DGI" and node.dataset.name == "PubMed"
    assert node.trainer.epochs == quality.composed(["experiment=dgi_cora"]).trainer.epochs
    assert node.paths.outputs_dir == str(tmp_path)
    assert node.logger.experiment_name == "quality-benchmark"
    assert node.logger.run_name == "dgi-pubmed-seed5"
    assert node.logger.log_embeddings is False and node.eval.diagnostics.enabled is False
    probes = node.eval.probes
    assert probes.adam._target_.endswith("AdamLinearProbe")  # eval=papers
    assert list(probes.logreg_spec.weight_decay) == list(quality.SPEC_GRID)
    assert probes.logreg_spec.selection == probes.logreg.selection == "split"
    assert "logreg_split" not in probes  # one protocol on node datasets

    # a graph dataset: the SVM of eval=graph_papers; the narrower grid selected as the
    # preset selects the default probe's strength (inner cross-validation)
    graph = quality.composed(
        quality.run_overrides(
            "infograph", "mutag", tmp_path, ["trainer.epochs=7"], 1, keep_embeddings=True
        )
    )
    assert graph.eval.probes.svc._target_.endswith("SVCProbe")
    assert graph.eval.probes.logreg_spec.selection == graph.eval.probes.logreg.selection == "cv"
    # both protocols on the same embeddings: the default probe again, selecting on the split
    split = graph.eval.probes.logreg_split
    assert (
        split.selection == "split" and split.weight_decay == graph.eval.probes.logreg.weight_decay
    )
    assert split.early_stop == graph.eval.probes.logreg.early_stop
    assert graph.trainer.epochs == 7 and graph.num_threads == 1
    assert graph.logger.log_embeddings is True


def test_epochs_scale_rounds_and_keeps_one(quality: ModuleType) -> None:
    assert quality.scaled_epochs(300, 0.05) == 15
    assert quality.scaled_epochs(300, 1.5) == 450
    assert quality.scaled_epochs(20, 0.01) == 1


def test_the_multirun_sweeps_the_seeds_alone(quality: ModuleType, tmp_path: Path) -> None:
    overrides = quality.run_overrides("grace", "cora", tmp_path, ["trainer.epochs=3"])
    command = quality.multirun_command(overrides, [5, 6, 7])
    assert command[:3] == ["graphssl", "-m", "hydra/launcher=basic"]
    assert command[3:-1] == overrides and command[-1] == "seed=5,6,7"
    parsed = OverridesParser.create().parse_overrides(command[2:])
    sweeps = [o for o in parsed if o.is_sweep_override()]
    assert [o.key_or_group for o in sweeps] == ["seed"]  # the L2 grid is a list, not a sweep
    assert list(sweeps[0].sweep_iterator()) == [5, 6, 7]
    # run as the console entry by this interpreter
    exe = quality.executable(command)
    assert exe[:2] == [sys.executable, "-c"] and "from graphssl.cli import main" in exe[2]
    assert exe[3:] == command[1:]


def test_the_columns_are_the_probes_the_presets_log(quality: ModuleType, tmp_path: Path) -> None:
    configs = [
        (m, quality.composed(quality.run_overrides(m, d, tmp_path)))
        for m, d in [("dgi", "cora"), ("grace", "citeseer"), ("infograph", "mutag")]
    ]
    # GRACE's preset adds GRACE's own evaluation as the probe `grace`; DGI's has none; graph
    # datasets add the default probe selecting on the validation part
    assert quality.columns(configs) == [
        "logreg", "logreg_spec", "adam", "grace", "logreg_split", "svc"
    ]  # fmt: skip


def test_the_report_command_selects_the_store_and_the_columns(
    quality: ModuleType, tmp_path: Path
) -> None:
    from hydra import compose, initialize_config_dir

    command = quality.report_command(
        tmp_path, tmp_path / "out", ["logreg", "adam"], ["leaderboard.metric=val_acc"]
    )
    assert command[0] == "graphssl-report"
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="report", overrides=command[1:])
    assert cfg.kind == "leaderboard" and cfg.experiment_name == "quality-benchmark"
    assert cfg.paths.outputs_dir == str(tmp_path) and cfg.output_dir == str(tmp_path / "out")
    assert list(cfg.leaderboard.probes) == ["logreg", "adam"]
    assert cfg.leaderboard.metric == "val_acc"


# ---------------------------------------------------------------- the table between the markers


def test_the_table_between_the_markers_is_replaced(quality: ModuleType) -> None:
    text = f"# Doc\n\nbefore\n{quality.START}\n| old |\n|--|\n{quality.END}\nafter\n"
    new = quality.replace_table(text, "| new |\n|--|\n")
    assert new == f"# Doc\n\nbefore\n{quality.START}\n| new |\n|--|\n{quality.END}\nafter\n"
    assert quality.replace_table(new, "| old |\n|--|") == text  # again: markers kept


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("no markers\n", "found 0 and 0"),
        (f"{'<!-- quality-table:start -->'}\n| t |\n", "found 1 and 0"),
        ("<!-- quality-table:end -->\n| t |\n<!-- quality-table:start -->\n", "the end first"),
        ("<!-- quality-table:start -->\n" * 2 + "<!-- quality-table:end -->\n", "found 2 and 1"),
    ],
)
def test_a_missing_or_misplaced_marker_is_refused(
    quality: ModuleType, text: str, found: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(found)) as err:
        quality.replace_table(text, "| t |")
    assert quality.START in str(err.value) and quality.END in str(err.value)


def test_the_leaderboards_headings_go_below_the_section(quality: ModuleType) -> None:
    md = "# Leaderboard: x\n\n| a |\n|---|\n\n## Notes\n\n- n\n"
    assert quality.demote(md, 2) == "### Leaderboard: x\n\n| a |\n|---|\n\n#### Notes\n\n- n\n"


def test_write_refuses_a_file_without_markers_before_training(
    quality: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "BENCHMARKS.md"
    target.write_text("## Method quality\n\n| table |\n")
    with pytest.raises(SystemExit) as stop:
        quality.main(["--methods", "dgi", "--datasets", "cora", "--write", str(target)])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"--write {target}" in err and quality.START in err
    assert target.read_text() == "## Method quality\n\n| table |\n"  # untouched

    with pytest.raises(SystemExit) as stop:  # nothing to rank without a store
        quality.main(["--report-only"])
    assert stop.value.code == 2 and "existing --store DIR" in capsys.readouterr().err

    with pytest.raises(SystemExit) as stop:  # a wrong name stops before any run
        quality.main(
            [
                "--methods",
                "dgi",
                "--datasets",
                "no_such_dataset",
                "--report-only",
                "--store",
                str(tmp_path),
            ]
        )
    assert stop.value.code == 2 and "dgi on no_such_dataset" in capsys.readouterr().err


def test_benchmarks_md_holds_the_markers_and_the_scripts_commands(quality: ModuleType) -> None:
    text = (REPO / "BENCHMARKS.md").read_text()
    section = text.split("\n## Method quality", 1)[1].split("\n## ", 1)[0]
    assert quality.START in section and quality.END in section
    quality.replace_table(text, "")  # each marker once, in order
    (block,) = re.findall(r"```bash\n(.*?)```", section, re.S)
    commands = [shlex.split(line) for line in block.replace("\\\n", " ").splitlines() if line]
    assert commands and all(c[:2] == ["python", "benchmarks/quality.py"] for c in commands)
    parsed = [quality.arguments().parse_args(c[2:]) for c in commands]
    # the last one regenerates the table from the others' store
    assert parsed[-1].report_only and parsed[-1].write == Path("BENCHMARKS.md")
    assert {p.store for p in parsed} == {parsed[-1].store} and parsed[-1].store is not None
