"""graphssl-compare and graphssl-report end to end on small synthetic MLflow stores.

Runs are created directly with ``MlflowClient`` in the pre-migrated ``outputs_dir`` store, so no
model is trained: compare gets 4 embedders that are noisy views of one latent (less noise = more
informative = higher logged accuracy); report gets a sweep with planted correlations. The tasks
run in-process; the ``graphssl-report`` command runs in this process too (the ``commands``
fixture), to see what it prints, its exit code and the run it logs.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig

from graphssl.tasks.compare import run_compare
from graphssl.tasks.report import run_report
from graphssl.utils import tensor_hash

pytestmark = pytest.mark.integration

CONF = Path(__file__).resolve().parents[2] / "conf"
SEEN = (1, 3, 5, 8)  # embedder k sees the first SEEN[k] of 8 latent dims; accuracy rises with k
FAST = [
    "emir.n_epochs=5",
    "emir.n_epochs_marg=5",
    "emir.lr=1e-2",
    "emir.margin_lr=1e-2",
    "cross_encoder.epochs=1",
    "cross_encoder.hidden=32",
    "cross_encoder.batch_size=64",
    "progress=false",
]


def _client(outputs: Path) -> MlflowClient:
    return MlflowClient(tracking_uri=f"sqlite:///{outputs / 'mlflow.db'}")


def _experiment(client: MlflowClient, outputs: Path, name: str = "graphssl") -> str:
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return str(exp.experiment_id)
    return str(client.create_experiment(name, artifact_location=(outputs / "mlartifacts").as_uri()))


def _log_embedder(
    client: MlflowClient,
    exp_id: str,
    tmp: Path,
    name: str,
    z: torch.Tensor,
    ids: torch.Tensor,
    acc: float,
    parent: str | None = None,
) -> str:
    tags = {"mlflow.parentRunId": parent} if parent else {}
    run = client.create_run(exp_id, run_name=name, tags=tags)
    rid = run.info.run_id
    path = tmp / rid / "embeddings.pt"
    path.parent.mkdir(parents=True)
    torch.save({"embeddings": z, "ids": ids, "labels": None, "sha256": tensor_hash(z)}, path)
    client.log_artifact(rid, str(path))
    client.log_metric(rid, "probe/logreg/test_acc", acc)
    client.log_param(rid, "dataset.name", "synthetic")
    client.set_terminated(rid, "FINISHED")
    return rid


def _embedder_sweep(outputs: Path, tmp: Path, n: int = 600) -> tuple[str, list[str]]:
    """A sweep parent with 4 children: noisy 8-d linear views of more and more of one latent."""
    client = _client(outputs)
    exp_id = _experiment(client, outputs)
    parent = client.create_run(exp_id, run_name="sweep", tags={"graphssl.role": "sweep"})
    gen = torch.Generator().manual_seed(0)
    latent = torch.randn(n, 8, generator=gen)
    ids = torch.arange(n)
    run_ids = []
    for k, m in enumerate(SEEN):
        z = latent[:, :m] @ torch.randn(m, 8, generator=gen) + 0.3 * torch.randn(
            n, 8, generator=gen
        )
        perm = torch.randperm(n, generator=gen)  # rows in a different order per run: align on ids
        run_ids.append(
            _log_embedder(
                client,
                exp_id,
                tmp,
                f"emb{k}",
                z[perm],
                ids[perm],
                0.5 + 0.1 * k,
                parent.info.run_id,
            )
        )
    client.set_terminated(parent.info.run_id, "FINISHED")
    return parent.info.run_id, run_ids


def _cfg(name: str, outputs: Path, tmp: Path, *overrides: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(
            config_name=name,
            overrides=[f"paths.outputs_dir={outputs}", f"output_dir={tmp / 'out'}", *overrides],
        )


@pytest.fixture
def local_store(monkeypatch: pytest.MonkeyPatch, outputs_dir: Path) -> Iterator[Path]:
    """The ``outputs_dir`` store as the default one; one torch thread (tiny matrices on a
    shared 2-core machine) restored afterwards."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield outputs_dir
    torch.set_num_threads(threads)


def test_compare_ranks_informative_embedders_first(local_store: Path, tmp_path: Path) -> None:
    parent, run_ids = _embedder_sweep(local_store, tmp_path)
    result = run_compare(_cfg("compare", local_store, tmp_path, f"parent_run_id={parent}", *FAST))
    assert result.names == ["emb0", "emb1", "emb2", "emb3"]
    assert result.correlations["emir/spearman_informativeness"] > 0.5
    assert result.informativeness["emb3"] > result.informativeness["emb0"]
    client = _client(local_store)
    run = client.get_run(result.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["graphssl.role"] == "compare"
    assert run.data.tags["graphssl.compare.input_run_ids"] == ",".join(run_ids)
    metrics = run.data.metrics
    for key in (
        "emir/informativeness/emb3",
        "emir/spearman_informativeness",
        "emir/kendall_informativeness",
        "emir/spearman_cross_encoder",
        "emir/cross_encoder/emb0",
    ):
        assert key in metrics, key
    logged = {a.path for a in client.list_artifacts(result.run_id)}
    assert {"matrix.csv", "ranking.csv", "heatmap.png", "graph.png"} <= logged
    rows = list(csv.reader((tmp_path / "out" / "matrix.csv").open()))
    assert rows[0][1:] == result.names and len(rows) == 5
    assert rows[1][1] == ""  # diagonal left empty


def test_compare_row_mismatch_fails_clearly(local_store: Path, tmp_path: Path) -> None:
    client = _client(local_store)
    exp_id = _experiment(client, local_store)
    a = _log_embedder(client, exp_id, tmp_path, "full", torch.randn(50, 4), torch.arange(50), 0.7)
    b = _log_embedder(client, exp_id, tmp_path, "half", torch.randn(40, 4), torch.arange(40), 0.6)
    with pytest.raises(
        ValueError,
        match=r"row mismatch: 'full' \(run .*\) has 50 rows but "
        r"'half' \(run .*\) has 40",
    ):
        run_compare(_cfg("compare", local_store, tmp_path, f"run_ids=[{a},{b}]", *FAST))
    failed = client.search_runs([exp_id], filter_string="tags.`graphssl.role` = 'compare'")
    assert [r.info.status for r in failed] == ["FAILED"]
    assert "row mismatch" in failed[0].data.tags["error"]


def test_compare_needs_runs_and_embeddings(local_store: Path, tmp_path: Path) -> None:
    client = _client(local_store)
    exp_id = _experiment(client, local_store)
    with pytest.raises(ValueError, match="no FINISHED run selected by experiment_name"):
        run_compare(_cfg("compare", local_store, tmp_path, "experiment_name=graphssl", *FAST))
    assert client.search_runs([exp_id]) == [], "an empty selection creates no compare run"
    bare = client.create_run(exp_id, run_name="no-embeddings").info.run_id
    client.set_terminated(bare, "FINISHED")
    with pytest.raises(FileNotFoundError, match=r"has no embeddings\.pt"):
        run_compare(_cfg("compare", local_store, tmp_path, "experiment_name=graphssl", *FAST))
    one = _log_embedder(client, exp_id, tmp_path, "one", torch.randn(30, 3), torch.arange(30), 0.5)
    with pytest.raises(ValueError, match="at least 2 embedders"):
        run_compare(_cfg("compare", local_store, tmp_path, f"run_ids=[{one}]", *FAST))
    compares = client.search_runs([exp_id], filter_string="tags.`graphssl.role` = 'compare'")
    assert sorted(r.info.status for r in compares) == ["FAILED"] * 2


def _planted_sweep(outputs: Path, n: int = 8) -> tuple[str, list[float]]:
    """A sweep parent with ``n`` children on two datasets: ``diag/a`` ~ accuracy,
    ``diag/b`` = -accuracy, ``diag/c`` random, ``diag/const`` constant."""
    client = _client(outputs)
    exp_id = _experiment(client, outputs)
    parent = client.create_run(exp_id, run_name="sweep", tags={"graphssl.role": "sweep"})
    gen = torch.Generator().manual_seed(1)
    accs = []
    for i in range(n):
        acc = 0.5 + 0.05 * i
        accs.append(acc)
        rid = client.create_run(
            exp_id, run_name=f"job{i}", tags={"mlflow.parentRunId": parent.info.run_id}
        ).info.run_id
        client.log_param(rid, "dataset.name", "cora" if i % 2 else "citeseer")
        for key, value in {
            "probe/logreg/test_acc": acc,
            "diag/a": acc + 0.001 * float(torch.randn(1, generator=gen)),
            "diag/b": -acc,
            "diag/c": float(torch.rand(1, generator=gen)),
            "diag/const": 3.0,
        }.items():
            client.log_metric(rid, key, value)
        client.set_terminated(rid, "FINISHED")
    client.set_terminated(parent.info.run_id, "FINISHED")
    return parent.info.run_id, accs


def test_report_recovers_planted_correlations(local_store: Path, tmp_path: Path) -> None:
    parent, _ = _planted_sweep(local_store)
    report = run_report(_cfg("report", local_store, tmp_path, f"parent_run_id={parent}"))
    assert report.group_keys == ["params.dataset.name"]  # no run has dataset.corruption
    assert report.groups == ["citeseer", "cora"] and report.n_runs == 8
    for group in report.groups:
        assert report.cell(group, "diag/a") == pytest.approx(1.0)
        assert report.cell(group, "diag/b") == pytest.approx(-1.0)
        assert report.cell(group, "diag/a", "kendall") == pytest.approx(1.0)
        assert abs(report.cell(group, "diag/c")) <= 1.0
        assert report.cell(group, "diag/const") != report.cell(group, "diag/const")  # NaN
    rows, cols, vals = report.table4()
    assert rows == ["mean"] and vals[0, cols.index("diag/b")] == pytest.approx(-1.0)
    client = _client(local_store)
    logged = {a.path for a in client.list_artifacts(parent, "report")}
    assert {
        "report/table3_spearman.csv",
        "report/table4_spearman.csv",
        "report/report.md",
        "report/scatter.png",
        "report/correlations.csv",
    } <= logged
    metrics = client.get_run(parent).data.metrics
    assert metrics["report/spearman/diag/a/cora"] == pytest.approx(1.0)
    assert metrics["report/mean_spearman/diag/b"] == pytest.approx(-1.0)
    md = (tmp_path / "out" / "report.md").read_text()
    assert "diag/const" in md and "constant" in md  # NaN cell explained


def test_report_cli_logs_a_report_run(local_store: Path, commands) -> None:
    _planted_sweep(local_store)
    res = commands.run("graphssl-report", "experiment_name=graphssl", "group_by=[]")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "| diag/b | -1.00 |" in res.stdout  # Table 3, one group "all"
    client = _client(local_store)
    exp_id = _experiment(client, local_store)
    runs = client.search_runs([exp_id], filter_string="tags.`graphssl.role` = 'report'")
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert runs[0].data.metrics["report/spearman/diag/b/all"] == pytest.approx(-1.0)
    assert "scatter.png" in {a.path for a in client.list_artifacts(runs[0].info.run_id)}


def _zoo(outputs: Path, tmp: Path, n: int = 300) -> tuple[str, dict[str, int]]:
    """A model zoo as a Hydra multirun leaves it: a sweep parent and 4 members of widths 8 and
    12, each with its architecture, epochs, embedding shape and two downstream scores; then a
    study run (tagged ``graphssl.study``) that a zoo look-up must skip."""
    client = _client(outputs)
    exp_id = _experiment(client, outputs, "emir_zoo")
    sweep_tags = {"graphssl.role": "sweep", "graphssl.sweep_dir": str(tmp / "multirun")}
    parent = client.create_run(exp_id, run_name="zoo", tags=sweep_tags).info.run_id
    gen = torch.Generator().manual_seed(2)
    latent = torch.randn(n, 8, generator=gen)
    widths: dict[str, int] = {}
    for k, (arch, epochs) in enumerate([("lcnet", 0), ("lcnet", 4), ("resnet", 0), ("resnet", 4)]):
        d = 8 if arch == "lcnet" else 12
        z = latent[:, : SEEN[k]] @ torch.randn(SEEN[k], d, generator=gen)
        z = z + 0.3 * torch.randn(n, d, generator=gen)
        rid = _log_embedder(
            client, exp_id, tmp, f"zoo-{arch}-e{epochs}[x]", z, torch.arange(n), 0.5, parent
        )
        client.log_param(rid, "encoder.name", arch)
        client.log_param(rid, "trainer.epochs", str(epochs))
        client.log_metric(rid, "supervised/test_acc", 0.6 + 0.1 * k)
        client.set_tag(rid, "embeddings.shape", f"{n}x{d}")
        widths[rid] = d
    client.set_terminated(parent, "FINISHED")
    study = {**sweep_tags, "graphssl.study": "emir_zoo"}
    client.set_terminated(client.create_run(exp_id, run_name="study", tags=study).info.run_id)
    return parent, widths


def test_zoo_study_reads_its_members_through_the_compare_run(
    local_store: Path, tmp_path: Path
) -> None:
    """What benchmarks/emir_zoo.py composes: find the zoo, compare it with max_dims, read the
    members back from the compare run, then tabulate and correlate."""
    from graphssl.evaluation.emir.study import RANKINGS, zoo_correlations, zoo_table
    from graphssl.tracking import artifacts
    from graphssl.tracking.inputs import newest_sweep_parent, zoo_members
    from graphssl.tracking.store import TrackingStore

    store = TrackingStore(f"sqlite:///{local_store / 'mlflow.db'}", "emir_zoo")
    assert newest_sweep_parent(store, "emir_zoo") is None  # no such experiment yet
    parent, widths = _zoo(local_store, tmp_path)
    zoo = newest_sweep_parent(store, "emir_zoo")
    assert zoo is not None and zoo.run_id == parent  # the study run is skipped

    cfg = _cfg(
        "compare",
        local_store,
        tmp_path,
        f"parent_run_id={parent}",
        "downstream=supervised/test_acc",
        "max_dims=4",
        *FAST,
    )
    result = run_compare(cfg)
    compare = artifacts.get_run(store, result.run_id)
    assert compare.params["max_dims"] == "4"
    assert compare.tags["graphssl.compare.parent_run_id"] == parent
    assert set(compare.tags["graphssl.compare.input_run_ids"].split(",")) == set(widths)
    for i in range(len(widths)):
        name, _, source = compare.tags[f"graphssl.compare.input.{i}"].partition("=")
        assert compare.metrics[f"emir/original_dim/{name}"] == widths[source[len("run ") :]]
        assert compare.metrics[f"emir/informativeness/{name}"] == pytest.approx(
            result.informativeness[name]
        )

    study = store.client.create_run(artifacts.experiment_id_of(store, "emir_zoo") or "0")
    artifacts.set_parent(store, result.run_id, study.info.run_id)
    assert artifacts.get_run(store, result.run_id).tags["mlflow.parentRunId"] == study.info.run_id

    members = zoo_members(store, result)
    assert [m.name for m in members] == result.names
    runs = {r.run_id: r for r in artifacts.select_runs(store, parent_run_id=parent)}
    for m in members:
        run = runs[m.run_id]
        assert m.label == run.run_name.split("[")[0]
        assert (m.architecture, m.epochs) == (run.params["encoder.name"], 4 * ("e4" in m.label))
        assert m.dim == widths[m.run_id]  # the width before the projection
        assert m.supervised == pytest.approx(run.metrics["supervised/test_acc"])
        assert m.probe == pytest.approx(run.metrics["probe/logreg/test_acc"])
    table = [line for line in zoo_table(members, result).splitlines() if line.startswith("| zoo-")]
    assert sorted(line.split("|")[1].strip() for line in table) == sorted(m.label for m in members)
    downstreams = {"supervised": "supervised/test_acc", "probe": "probe/logreg/test_acc"}
    rows = zoo_correlations(members, result, downstreams)
    defined = [r for r in rows if r["downstream"] == "supervised/test_acc"]
    assert len(defined) == len(RANKINGS) and all(r["n"] == 4 for r in defined)
    assert all(-1 <= r["spearman"] <= 1 for r in defined)
    # every member logged the same probe accuracy: constant, so NaN with the reason
    assert all("constant" in r["note"] for r in rows if r["downstream"] == downstreams["probe"])


def test_newest_named_run_matches_name_and_params(local_store: Path, tmp_path: Path) -> None:
    from graphssl.tracking.inputs import newest_named_run
    from graphssl.tracking.store import TrackingStore

    client = _client(local_store)
    exp_id = _experiment(client, local_store, "emir_molecules")
    made = []
    for size in ("300", "300", "500"):
        rid = client.create_run(exp_id, run_name="ig-h16").info.run_id
        client.log_param(rid, "dataset.max_molecules", size)
        client.set_terminated(rid, "FINISHED")
        made.append(rid)
    store = TrackingStore(f"sqlite:///{local_store / 'mlflow.db'}", "emir_molecules")
    found = newest_named_run(store, "emir_molecules", "ig-h16", {"dataset.max_molecules": "300"})
    assert found is not None and found.run_id == made[1]  # the newer of the two 300s
    assert (
        newest_named_run(store, "emir_molecules", "ig-h16", {"dataset.max_molecules": "9"}) is None
    )
    assert newest_named_run(store, "emir_molecules", "other", {}) is None
    assert newest_named_run(store, "no-such-experiment", "ig-h16", {}) is None


def test_a_filter_selecting_nothing_names_the_logged_values(local_store, tmp_path, capsys):
    """The docs' filter with the wrong case: one paragraph listing the values the runs logged,
    and no compare run (nothing is marked FAILED)."""
    from graphssl.cli import LOOKUP_ERRORS, _run_task

    client = _client(local_store)
    exp_id = _experiment(client, local_store)
    for name in ("a", "b"):
        rid = _log_embedder(client, exp_id, tmp_path, name, torch.randn(9, 2), torch.arange(9), 0)
        client.log_param(rid, "dataset.label", "Cora")
    cfg = _cfg(
        "compare",
        local_store,
        tmp_path,
        "experiment_name=graphssl",
        "filter=\"params.`dataset.label` = 'cora'\"",
        *FAST,
    )
    with pytest.raises(SystemExit):
        _run_task("graphssl-compare", run_compare, cfg, LOOKUP_ERRORS)
    err = capsys.readouterr().err
    assert "graphssl-compare: error: ValueError: no FINISHED run selected" in err
    assert "(2 without the filter; params.dataset.label is one of ['Cora']" in err
    assert _one_paragraph(err), err
    roles = [r.data.tags.get("graphssl.role") for r in client.search_runs([exp_id])]
    assert "compare" not in roles


def _one_paragraph(text: str) -> bool:
    return bool(text.strip()) and "\n\n" not in text.strip() and "Traceback" not in text


@pytest.mark.parametrize("command", ["report", "compare", "stability"])
def test_a_missing_experiment_is_one_paragraph(local_store: Path, tmp_path, capsys, command):
    """Each command that reads stored runs refuses an unknown experiment (or run) in one
    paragraph naming it (what the console script prints)."""
    from graphssl.cli import LOOKUP_ERRORS, _run_task
    from graphssl.tasks.stability import run_stability

    task = {"report": run_report, "compare": run_compare, "stability": run_stability}[command]
    missing = {"stability": "stability.sources=[run:sparsification]"}
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            config_name=command,
            overrides=[
                f"paths.outputs_dir={local_store}",
                missing.get(command, "experiment_name=sparsification"),
                *([] if command == "stability" else [f"output_dir={tmp_path / 'out'}"]),
            ],
        )
    with pytest.raises(SystemExit) as stop:
        _run_task(f"graphssl-{command}", task, cfg, LOOKUP_ERRORS)
    assert stop.value.code == 1
    err = capsys.readouterr().err
    assert f"graphssl-{command}: error: " in err and "'sparsification'" in err, err
    assert _one_paragraph(err), err


def test_an_instantiation_error_is_one_paragraph(tasks, capsys) -> None:
    """A config key a dataset does not take: Hydra's multi-line InstantiationException becomes
    the target's own error, one paragraph naming the config key and the class."""
    from graphssl.cli import USER_ERRORS, _run_task
    from graphssl.tasks.train import train

    cfg = tasks.compose("train", "dataset=karate", "+dataset.bogus=1")
    with pytest.raises(SystemExit) as stop:
        _run_task("graphssl", train, cfg, USER_ERRORS)
    assert stop.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("graphssl: error: TypeError: KarateClubDataModule got unknown argument")
    assert "(while building config key dataset, graphssl.data.node.KarateClubDataModule)" in err
    assert _one_paragraph(err) and "Error in call to target" not in err
    assert tasks.runs() == []


def test_report_cli_names_a_missing_experiment(local_store: Path, commands) -> None:
    """``graphssl-report experiment_name=<missing>`` as the command: one paragraph, exit 1."""
    res = commands.run("graphssl-report", "experiment_name=sparsification")
    assert res.returncode == 1, res.stderr[-3000:]
    assert "graphssl-report: error: LookupError: MLflow experiment 'sparsification'" in res.stderr
    assert _one_paragraph(res.stderr), res.stderr
