"""Secrets are masked exactly: URL passwords with any character, secret query parameters,
``Authorization``/``Bearer`` credentials and secret-named keys, in params, tags, ``config.yaml``
and the run folder's ``.hydra/`` files (``config.pickle`` rebuilt from the masked files). Only
the secret value (or the secret part of a URL or header) is replaced: a short secret never
turns into holes in other values or keys, the masked YAML parses to the same keys, and
``graphssl rerun=<id>`` reads it back."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.conf import HydraConf
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import _save_config
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from graphssl.tasks.components import resolve_config
from graphssl.tasks.rerun import rerun_config
from graphssl.tracking.run import log_run_config
from graphssl.tracking.secrets import MASK, Masker, mask_hydra_dir
from graphssl.tracking.store import TrackingStore
from graphssl.tracking.sweep import SaveJobConfig

CONF = Path(__file__).resolve().parents[2] / "conf"
DSN = "postgresql://u:pear/71@db/x"
SECRETS = [
    "+db.password=data",  # short, and a substring of paths.data_dir and the key `dataset`
    f"+db.dsn={DSN}",
    "+svc.url='https://api.example.org/v1?access_token=TOKQ-1&page=2'",
    "+svc.header='Authorization: Bearer BEARER-77'",
    "+svc.token=TOKVAL-88",
]
LEAKS = ["pear/71", "TOKQ-1", "BEARER-77", "TOKVAL-88"]


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        (DSN, "postgresql://u:***@db/x"),
        # as Hydra escapes a multirun job's overrides
        (r"+db.dsn=postgresql\://u\:pear/71@db/x", r"+db.dsn=postgresql\://u\:***@db/x"),
        ("redis://:p:w/x?y@cache:6379/0", "redis://:***@cache:6379/0"),
        ("mysql://u:p%40ss@h:3306/d", "mysql://u:***@h:3306/d"),
        ("https://h.org/a?access_token=abc123&x=1", "https://h.org/a?access_token=***&x=1"),
        ("https://h.org/a?x=1&token=T1&key=K2", "https://h.org/a?x=1&token=***&key=***"),
        (
            "s3://b/k?X-Amz-Signature=ab12&X-Amz-Credential=AK/2",
            "s3://b/k?X-Amz-Signature=***&X-Amz-Credential=***",
        ),
        ("Authorization: Bearer abc.def-1", "Authorization: Bearer ***"),
        ("Authorization: Basic dXNlcjpw", "Authorization: Basic ***"),
        ("curl -H 'Authorization: Basic dXNlcjpw' u", "curl -H 'Authorization: Basic ***' u"),
        ("Bearer eyJhbGciOi.J9", "Bearer ***"),
        # not secrets: a port before an @ in a query, a plain URL, ordinary text
        ("http://example.org:8080/p?to=a@b.org", "http://example.org:8080/p?to=a@b.org"),
        ("https://example.org/data?page=2", "https://example.org/data?page=2"),
        ("Basic settings", "Basic settings"),
    ],
)
def test_secret_parts_of_values(text: str, masked: str) -> None:
    assert Masker().value("svc.url", text) == masked


@pytest.mark.parametrize(
    "key", ["db.password", "logger.api_key", "svc.token", "aws.secret_access_key", "x.key"]
)
def test_secret_named_keys(key: str) -> None:
    assert Masker().mapping({key: "v4lue!", "trainer.epochs": 5}) == {
        key: MASK,
        "trainer.epochs": 5,
    }


def test_a_short_secret_leaves_other_values_and_keys_alone() -> None:
    cfg = {
        "db": {"password": "data"},
        "dataset": {"name": "Cora", "root": "data"},
        "paths": {"data_dir": "/work/shared/data", "cache_dir": "/tmp/data-cache"},
    }
    m = Masker.from_config(cfg)
    text = yaml.safe_dump(cfg, sort_keys=False)
    out = m.yaml_text(text)
    back = yaml.safe_load(out)
    assert back["db"]["password"] == MASK
    assert back["paths"] == cfg["paths"] and list(back) == ["db", "dataset", "paths"]
    assert back["dataset"]["root"] == MASK  # a whole value equal to the secret
    overrides = "+db.password=data paths.data_dir=/work/shared/data dataset=cora"
    assert m.text(overrides) == "+db.password=*** paths.data_dir=/work/shared/data dataset=cora"
    assert m.mapping({"paths.data_dir": "/work/shared/data"}) == {
        "paths.data_dir": "/work/shared/data"
    }


def test_quoted_override_values_are_masked_whole() -> None:
    out = Masker().text("+svc.token='two words' x=1,+db.pass=\"a b\"")
    assert out == "+svc.token=*** x=1,+db.pass=***"


class _Tracker:
    """What :func:`log_run_config` logs, kept in memory."""

    def __init__(self) -> None:
        self.params: dict[str, Any] = {}
        self.texts: dict[str, str] = {}
        self.files: dict[str, bytes] = {}

    def log_params(self, params: dict[str, Any]) -> None:
        self.params.update(params)

    def log_text(self, text: str, name: str) -> None:
        self.texts[name] = text

    def log_artifacts(self, folder: str | Path, dest: str) -> None:
        for p in Path(folder).rglob("*"):
            if p.is_file():
                self.files[f"{dest}/{p.relative_to(folder)}"] = p.read_bytes()


def _job(tmp_path: Path, *overrides: str) -> tuple[DictConfig, Path]:
    """A composed train job as Hydra starts it: its ``.hydra/`` files written, unmasked."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            config_name="train",
            # a data folder ending in .../data: the short secret "data" must leave it alone
            overrides=[
                *SECRETS,
                "dataset=sbm",
                f"paths.data_dir={tmp_path}/shared/data",
                *overrides,
            ],
            return_hydra_config=True,
        )
    folder = tmp_path / "run" / ".hydra"
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(tmp_path / "run")
        cfg.hydra.output_subdir = ".hydra"
    HydraConfig.instance().set_config(cfg)
    task = OmegaConf.masked_copy(cfg, [str(k) for k in cfg if k != "hydra"])
    _save_config(task, "config.yaml", folder)
    _save_config(OmegaConf.masked_copy(cfg, ["hydra"]), "hydra.yaml", folder)
    _save_config(cfg.hydra.overrides.task, "overrides.yaml", folder)
    assert "TOKVAL-88" in (folder / "overrides.yaml").read_text()
    return cfg, folder


@pytest.fixture(autouse=True)
def _no_hydra_job() -> Any:
    """Each test leaves no Hydra job config behind (``_job`` sets one, as a job has)."""
    yield
    HydraConfig.instance().cfg = None  # type: ignore[assignment]


def _assert_clean(folder: Path, cfg: DictConfig) -> None:
    for path in sorted(folder.iterdir()):
        data = path.read_bytes()
        for leak in LEAKS:
            assert leak.encode() not in data, f"{leak} left in {path.name}"
        if path.suffix == ".yaml":
            assert b"/***" not in data and b"***set" not in data, path.name
    task = yaml.safe_load((folder / "config.yaml").read_text())
    assert task["db"]["password"] == MASK and task["db"]["dsn"] == "postgresql://u:***@db/x"
    assert task["paths"] == OmegaConf.to_container(cfg.paths) and "dataset" in task


def test_the_run_folder_is_masked_at_job_start(tmp_path) -> None:
    cfg, folder = _job(tmp_path)
    SaveJobConfig().on_job_start(config=cfg)
    _assert_clean(folder, cfg)
    with open(folder / "config.pickle", "rb") as f:  # our own file: Hydra's rerun reads it
        job = pickle.load(f)
    assert job.db.password == MASK and job.hydra.runtime.output_dir == str(tmp_path / "run")
    assert job.dataset._target_ == cfg.dataset._target_
    # typed as Hydra's own node: `graphssl --experimental-rerun <it>` accepts it
    assert OmegaConf.get_type(job, "hydra") is HydraConf


def test_logged_config_and_run_folder_are_masked(tmp_path) -> None:
    cfg, folder = _job(tmp_path)
    with open(folder / "config.pickle", "wb") as f:  # as Hydra's own callback writes it
        pickle.dump(cfg, f, protocol=4)
    resolved = resolve_config(cfg)
    masker = Masker.from_config(resolved)
    tracker = _Tracker()
    params = {"db.password": "data", "db.dsn": DSN, "paths.data_dir": str(resolved.paths.data_dir)}
    log_run_config(tracker, masker, params, OmegaConf.to_yaml(resolved), folder)  # type: ignore[arg-type]
    assert tracker.params["db.password"] == MASK
    assert tracker.params["paths.data_dir"] == str(resolved.paths.data_dir)
    assert tracker.params["db.dsn"] == "postgresql://u:***@db/x"
    _assert_clean(folder, cfg)
    assert sorted(tracker.files) == [
        ".hydra/config.yaml",
        ".hydra/hydra.yaml",
        ".hydra/overrides.yaml",
    ]
    logged = "\n".join([*tracker.texts.values(), *(b.decode() for b in tracker.files.values())])
    assert all(leak not in logged for leak in LEAKS)
    assert mask_hydra_dir(folder, masker) is False  # already masked: nothing left to change


def test_rerun_reads_the_masked_config(tmp_path, outputs_dir) -> None:
    cfg, folder = _job(tmp_path, f"paths.outputs_dir={outputs_dir}")
    resolved = resolve_config(cfg)
    store = TrackingStore.from_config(resolved)
    masker = Masker.from_config(resolved)
    tags = masker.mapping({"graphssl.overrides": " ".join(cfg.hydra.overrides.task)})
    with store.start_run("masked", tags=tags) as tracker:
        log_run_config(tracker, masker, {}, OmegaConf.to_yaml(resolved), folder)
        run_id = tracker.run_id
    HydraConfig.instance().cfg = None  # type: ignore[assignment]  # the rerun is a new command
    run = MlflowClient(store.tracking_uri).get_run(run_id)
    assert all(leak not in run.data.tags["graphssl.overrides"] for leak in LEAKS)
    assert "+db.password=*** " in run.data.tags["graphssl.overrides"]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        again = compose(
            config_name="train", overrides=[f"rerun={run_id}", f"paths.outputs_dir={outputs_dir}"]
        )
    stored, _ = rerun_config(again)
    assert stored.db.password == MASK and stored.db.dsn == "postgresql://u:***@db/x"
    assert stored.paths.data_dir == resolved.paths.data_dir
    assert OmegaConf.to_container(stored.dataset) == OmegaConf.to_container(resolved.dataset)
    assert OmegaConf.to_container(stored.model) == OmegaConf.to_container(resolved.model)


def test_a_sweep_keeps_no_secret(tmp_path, outputs_dir) -> None:
    from hydra.types import RunMode

    from graphssl.tracking.sweep import MLflowSweepCallback

    cfg, folder = _job(tmp_path, f"paths.outputs_dir={outputs_dir}")
    escaped = r"+db.dsn=postgresql\://u\:pear/71@db/x"  # as Hydra writes a job's overrides
    (folder / "overrides.yaml").write_text(f"- +svc.token=TOKVAL-88\n- '{escaped}'\n")
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text((folder / "hydra.yaml").read_text())
    with read_write(cfg.hydra), open_dict(cfg):
        cfg.hydra.mode = RunMode.MULTIRUN
        cfg.hydra.sweep.dir = str(sweep)
    callback = MLflowSweepCallback()
    callback.on_multirun_start(config=cfg)
    callback.on_multirun_end(config=cfg)
    SaveJobConfig().on_job_start(config=cfg)
    _assert_clean(folder, cfg)
    assert all(leak.encode() not in (sweep / "multirun.yaml").read_bytes() for leak in LEAKS)
    overrides = yaml.safe_load((folder / "overrides.yaml").read_text())
    assert overrides == ["+svc.token=***", r"+db.dsn=postgresql\://u\:***@db/x"]
    client = MlflowClient(f"sqlite:///{outputs_dir / 'mlflow.db'}")
    (parent,) = client.search_runs([client.get_experiment_by_name("graphssl").experiment_id])
    assert "+db.password=*** " in parent.data.tags["graphssl.overrides"]
    assert all(leak not in parent.data.tags["graphssl.overrides"] for leak in LEAKS)


def test_a_sweep_child_is_named_with_its_swept_secret_masked(tasks, tmp_path) -> None:
    """``graphssl -m +db.password=a,b seed=0,1``: each child run's name shows its swept values,
    the secret one masked as its param is (``...[db.password=***,seed=1]``)."""
    import dataclasses
    import json

    from graphssl.tasks.components import resolve_config, run_identity
    from graphssl.tracking import Launch, open_run
    from graphssl.tracking.sweep import PARENT_FILE

    overrides = ("+db.password=hunter2-pw", "seed=1", "dataset=sbm")
    cfg = resolve_config(tasks.compose("train", *overrides))
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    store = TrackingStore.from_config(cfg)
    with store.start_run("sweep-parent", tags={"graphssl.role": "sweep"}) as parent:
        (sweep / PARENT_FILE).write_text(
            json.dumps({"run_id": parent.run_id, "swept": ["db.password", "seed"]})
        )
        launch = Launch(
            overrides=overrides, output_dir=str(tmp_path / "0"), multirun=True, sweep_dir=str(sweep)
        )
        identity = dataclasses.replace(run_identity(cfg), launch=launch)
        with open_run(cfg.logger, identity, OmegaConf.to_container(cfg)) as run:
            run_id = run.run_id
    child = tasks.client().get_run(run_id)
    assert child.info.run_name.endswith("[db.password=***,seed=1]"), child.info.run_name
    assert child.data.params["db.password"] == MASK
    assert child.data.tags["mlflow.parentRunId"] == parent.run_id
    stored = json.dumps([child.info.run_name, child.data.tags, child.data.params])
    assert "hunter2-pw" not in stored
