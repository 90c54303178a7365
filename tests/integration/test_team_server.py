"""One team server under load: 8 sweep jobs from two launchers log to one MLflow server at once.

The server runs on a real PostgreSQL database (the ``postgres_uri`` fixture). Two sweeps start
together — four jobs on joblib (two worker processes) and four on submitit_local (a process
each) — so up to six processes log runs, metric points and artifacts concurrently. What arrived
is counted in the database itself (psycopg2 on MLflow's ``runs``, ``tags``, ``params`` and
``metrics`` tables) and in the server's artifact store: every run, every point and every file,
none twice.

``run_two_sweeps`` takes a ``during`` callable that runs while the jobs log: the test stops the
server in the middle of the sweeps and starts it again. Jobs buffer their metric points on disk
(``metrics.jsonl`` beside the checkpoint) and retry run creation, params and files with backoff,
so the counts of a server that never went away hold: nothing lost, nothing twice. (The same eight
jobs against a server that stays up are a subset of this test: every job starts and logs its
first points concurrently before the server goes away.)
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from test_launchers import FAST

from graphssl.tracking.ui import MlflowServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# two sweeps of four jobs; the 8 (model, epochs) combinations are all different
SWEEPS = {
    "joblib": (
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "model=dgi,grace",
        "trainer.epochs=2,3",
    ),
    "submitit_local": (
        "hydra/launcher=submitit_local",
        "hydra.launcher.timeout_min=10",
        "model=dgi,grace",
        "trainer.epochs=4,5",
    ),
}


def run_two_sweeps(
    graphssl_cmd: list[str],
    env: dict[str, str],
    tmp_path: Path,
    during: Callable[[], None] | None = None,
    timeout: float = 900,
) -> dict[str, subprocess.CompletedProcess[str]]:
    """Start both sweeps at once, call ``during()`` while they run, wait for both."""
    procs = {}
    for name, overrides in SWEEPS.items():
        cwd = tmp_path / name
        cwd.mkdir()
        procs[name] = subprocess.Popen(
            [*graphssl_cmd, "-m", *FAST, *overrides],
            env=env,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    results = {}
    try:
        if during is not None:
            during()
        deadline = time.monotonic() + timeout
        for name, proc in procs.items():
            out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            results[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return results


def query(dsn: str, sql: str, *args: object) -> list[tuple]:
    import psycopg2

    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(sql, args)
            return list(cur.fetchall())
    finally:
        conn.close()


def test_team_server_restarted_mid_sweep(
    postgres_uri, free_port, graphssl_cmd, cli_env, tmp_path
) -> None:
    """The server goes away for 10 s while jobs of both sweeps log, then comes back."""
    pytest.importorskip(
        "hydra_plugins.hydra_joblib_launcher",
        reason="hydra-joblib-launcher not installed (pip install -e '.[joblib]')",
    )
    pytest.importorskip(
        "hydra_plugins.hydra_submitit_launcher",
        reason="hydra-submitit-launcher not installed (pip install -e '.[submitit]')",
    )
    dsn = postgres_uri.replace("postgresql+psycopg2://", "postgresql://")
    artifacts = tmp_path / "mlartifacts"
    server = MlflowServer(
        postgres_uri, str(artifacts), port=free_port(), log_path=tmp_path / "mlflow-server.log"
    )
    restarted: list[int] = []

    def restart_when_jobs_log() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            rows = query(dsn, "SELECT count(DISTINCT run_uuid) FROM metrics")
            if rows[0][0] >= 2:  # two jobs are logging points
                break
            time.sleep(0.5)
        else:
            raise AssertionError("no job logged a metric within 600 s")
        server.stop()
        restarted.append(int(rows[0][0]))
        time.sleep(10)
        server.start(timeout=240)

    with server.start(timeout=240):
        env = dict(cli_env, MLFLOW_TRACKING_URI=server.url)
        results = run_two_sweeps(graphssl_cmd, env, tmp_path, during=restart_when_jobs_log)
        for name, res in results.items():
            assert res.returncode == 0, f"{name} sweep failed:\n{res.stderr[-3000:]}"
        client = MlflowClient(tracking_uri=server.url)
        exp = client.get_experiment_by_name("graphssl")
        assert exp is not None
        api_runs = {r.info.run_id: r for r in client.search_runs([exp.experiment_id])}
    assert restarted, "the server was not restarted"
    assert_everything_arrived(dsn, api_runs, artifacts)


def assert_everything_arrived(dsn: str, api_runs: dict, artifacts: Path) -> None:
    """Every run, metric point and artifact of the two sweeps is in the server, none twice."""
    # --- runs: 2 parents, 8 children, all FINISHED, each combination once -------------------
    runs = query(
        dsn,
        "SELECT r.run_uuid, r.status, t.value FROM runs r "
        "JOIN experiments e ON e.experiment_id = r.experiment_id "
        "LEFT JOIN tags t ON t.run_uuid = r.run_uuid AND t.key = 'graphssl.role' "
        "WHERE e.name = 'graphssl' AND r.lifecycle_stage = 'active'",
    )
    roles = sorted(role or "" for _, _, role in runs)
    assert roles == ["job"] * 8 + ["sweep"] * 2, roles
    assert {status for _, status, _ in runs} == {"FINISHED"}
    assert set(api_runs) == {uuid for uuid, _, _ in runs}
    parents = {uuid for uuid, _, role in runs if role == "sweep"}
    children = query(
        dsn,
        "SELECT t.run_uuid, t.value, pm.value, pe.value FROM tags t "
        "JOIN params pm ON pm.run_uuid = t.run_uuid AND pm.key = 'model._target_' "
        "JOIN params pe ON pe.run_uuid = t.run_uuid AND pe.key = 'trainer.epochs' "
        "WHERE t.key = 'mlflow.parentRunId'",
    )
    assert len(children) == 8
    assert {parent for _, parent, _, _ in children} == parents
    combos = [(model.rsplit(".", 1)[-1], int(epochs)) for _, _, model, epochs in children]
    assert sorted(combos) == sorted((m, e) for m in ("DGI", "GRACE") for e in (2, 3, 4, 5)), (
        "each (model, epochs) exactly once"
    )
    per_parent = {p: sum(1 for _, parent, _, _ in children if parent == p) for p in parents}
    assert sorted(per_parent.values()) == [4, 4]
    for parent in parents:
        assert api_runs[parent].data.tags["children_finished"] == "4"

    # --- metric points: one train/loss per epoch, no (run, key, step) twice -------------------
    epochs_of = {uuid: int(epochs) for uuid, _, _, epochs in children}
    losses = dict(
        query(
            dsn,
            "SELECT run_uuid, count(*) FROM metrics WHERE key = 'train/loss' GROUP BY run_uuid",
        )
    )
    assert losses == epochs_of
    dupes = query(
        dsn,
        "SELECT run_uuid, key, step, count(*) FROM metrics "
        "GROUP BY run_uuid, key, step HAVING count(*) > 1",
    )
    assert dupes == [], f"metric points logged twice: {dupes[:10]}"
    # every metric key has its latest value, and the two tables agree on the keys
    keys = query(
        dsn,
        "SELECT m.run_uuid, count(DISTINCT m.key), "
        "(SELECT count(*) FROM latest_metrics l WHERE l.run_uuid = m.run_uuid) "
        "FROM metrics m GROUP BY m.run_uuid",
    )
    # every job logs points; a sweep parent logs only its summary (``best/<metric>``)
    assert set(epochs_of) <= {uuid for uuid, _, _ in keys} <= set(epochs_of) | parents
    for uuid, distinct, latest in keys:
        assert distinct == latest, f"run {uuid}: {distinct} metric keys, {latest} latest values"
        if uuid in parents:
            assert all(k.startswith("best/") for k in api_runs[uuid].data.metrics), uuid
        else:
            assert "probe/logreg/val_acc" in api_runs[uuid].data.metrics
    # one model logs the same metric keys whichever launcher ran it
    by_model: dict[str, set[int]] = {}
    key_count = {uuid: distinct for uuid, distinct, _ in keys}
    for uuid, _, model, _ in children:
        by_model.setdefault(model, set()).add(key_count[uuid])
    assert all(len(counts) == 1 for counts in by_model.values()), by_model

    # --- artifacts: the same files for every child, all in the server's store ----------------
    listings = {}
    for uuid in epochs_of:
        files = sorted(
            p.relative_to(artifacts).as_posix().split("/artifacts/", 1)[1]
            for p in artifacts.rglob("*")
            if p.is_file() and f"/{uuid}/artifacts/" in p.as_posix()
        )
        assert files, f"run {uuid}: no artifacts in {artifacts}"
        listings[uuid] = files
    reference = next(iter(listings.values()))
    assert "config.yaml" in reference
    assert all(files == reference for files in listings.values()), listings
