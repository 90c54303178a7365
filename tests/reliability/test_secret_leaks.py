"""Secrets given on the command line appear nowhere in the store: not in params, tags (the
override string), ``config.yaml`` or ``.hydra/*.yaml``; nothing from the environment is logged.

The ``graphssl`` command runs in this process (the ``commands`` fixture): what is tested is what
it leaves in the store, not the interpreter around it."""

from __future__ import annotations

from pathlib import Path

from faultkit import run_statuses
from mlflow.tracking import MlflowClient

FAST = ["dataset=sbm", "trainer.epochs=2", "eval.figures=false", "logger.log_embeddings=false"]
SECRETS = {
    "+logger.api_key": "KEYVAL-1234",
    "+credentials.pass": "PASSVAL-5678",
    "+db.auth_header": "Bearer HEADERVAL-42",
    "+token": "TOKVAL-77",
    "+secret": "SECVAL-88",
    "+password": "PWVAL-99",
    "+svc.myid": "MYID-1234",  # secret only through logger.secret_patterns
}
DSN_PASSWORD = "DSNPASS-55"
ENV_SECRET = "ENVSECRET-9f3a"


def stored_text(outputs: Path, dest: Path) -> str:
    """Every param, tag and artifact byte of the one run, as text."""
    client = MlflowClient(tracking_uri=f"sqlite:///{outputs / 'mlflow.db'}")
    exp = client.get_experiment_by_name("graphssl")
    assert exp is not None
    (run,) = client.search_runs([exp.experiment_id])
    parts = [f"{k}={v}" for k, v in {**run.data.params, **run.data.tags}.items()]
    local = Path(client.download_artifacts(run.info.run_id, "", str(dest)))
    files = sorted(p for p in local.rglob("*") if p.is_file())
    assert {"config.yaml", "overrides.yaml", "hydra.yaml"} <= {p.name for p in files}
    parts += [p.read_bytes().decode("utf-8", "replace") for p in files]
    return "\n".join(parts)


def test_no_secret_reaches_the_store(commands, cli_env, outputs_dir, tmp_path) -> None:
    env = dict(cli_env, GRAPHSSL_TEST_SECRET=ENV_SECRET, MLFLOW_TRACKING_TOKEN=ENV_SECRET)
    args = [f"{k}={v}" if " " not in v else f"{k}='{v}'" for k, v in SECRETS.items()]
    args += [
        f"+db.dsn=postgresql://bob:{DSN_PASSWORD}@db.example:5432/graphs",
        "logger.secret_patterns=[myid]",
    ]
    res = commands.run("graphssl", *FAST, *args, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    assert run_statuses(outputs_dir / "mlflow.db") == ["FINISHED"]
    text = stored_text(outputs_dir, tmp_path / "artifacts")
    for secret in [*SECRETS.values(), "HEADERVAL-42", DSN_PASSWORD, ENV_SECRET]:
        assert secret not in text, f"{secret!r} reached the store"
    # what is masked stays recognisable: the key and the URL without its password
    assert "postgresql://bob:***@db.example:5432/graphs" in text
    assert "logger.api_key=***" in text and "+credentials.pass=***" in text
