"""Tracking helpers: flattening, secret masking, URIs, and run status on success/failure."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from graphssl.tracking import mlflow_store
from graphssl.tracking.run import RunTracker


def test_flatten_nested_config() -> None:
    flat = mlflow_store.flatten({"a": {"b": 1, "c": {"d": [1, 2]}}, "e": None})
    assert flat == {"a.b": 1, "a.c.d": [1, 2], "e": None}


@pytest.mark.parametrize(
    "key",
    ["logger.password", "db.token", "aws.secret_access", "api_key", "service.key", "x.API-KEY"],
)
def test_secret_looking_values_are_masked(key: str) -> None:
    assert mlflow_store.safe_params({key: "hunter2"})[key] == "***"


def test_ordinary_values_are_kept_and_long_ones_cut() -> None:
    out = mlflow_store.safe_params(
        {"trainer.epochs": 3, "monkey": "x", "keyboard": "y", "long": "z" * 7000}
    )
    assert out["trainer.epochs"] == "3" and out["monkey"] == "x" and out["keyboard"] == "y"
    assert len(out["long"]) == mlflow_store.MAX_PARAM_CHARS and out["long"].endswith("...")


def test_default_uri_is_absolute_sqlite(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = mlflow_store.resolve_tracking_uri(None, tmp_path / "out")
    assert uri == f"sqlite:///{(tmp_path / 'out').absolute()}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    assert mlflow_store.resolve_tracking_uri(None, tmp_path) == "http://127.0.0.1:5000"
    assert mlflow_store.resolve_tracking_uri("sqlite:////x.db", tmp_path) == "sqlite:////x.db"


def test_run_status_follows_the_block(outputs_dir: Path) -> None:
    uri = f"sqlite:///{outputs_dir / 'mlflow.db'}"
    with RunTracker(uri, "unit") as ok:
        ok.log_params({"a.password": "s3cret", "a.b": 1})
        ok.log_metrics({"probe/x/test_acc": 0.5})
    with pytest.raises(RuntimeError), RunTracker(uri, "unit") as bad:
        raise RuntimeError("boom")
    client = ok.client
    good_run, bad_run = client.get_run(ok.run_id), client.get_run(bad.run_id)
    assert good_run.info.status == "FINISHED"
    assert good_run.data.params == {"a.password": "***", "a.b": "1"}
    assert bad_run.info.status == "FAILED"
    assert bad_run.data.tags["error"] == "RuntimeError: boom"
    assert "error.txt" in {a.path for a in client.list_artifacts(bad.run_id)}


def test_tags_are_set_in_one_store_call_per_hundred(outputs_dir: Path, monkeypatch) -> None:
    uri = f"sqlite:///{outputs_dir / 'mlflow.db'}"
    with RunTracker(uri, "unit") as run:
        calls: list[int] = []
        log_batch = run.client.log_batch

        def counted(run_id: str, **kwargs) -> None:
            calls.append(len(kwargs.get("tags", ())))
            log_batch(run_id, **kwargs)

        monkeypatch.setattr(run.client, "log_batch", counted)
        monkeypatch.setattr(run.client, "set_tag", None)  # one call per tag: refused
        tags = {f"probe/p{i}/weight_decay": i / 10 for i in range(130)}
        run.set_tags({**tags, "mlflow.runName": "renamed"})
    assert calls == [100, 31]
    got = run.client.get_run(run.run_id)
    assert got.data.tags["probe/p129/weight_decay"] == "12.9"
    assert got.info.run_name == "renamed"  # MLflow's run-name tag still renames the run


def test_ctrl_c_inside_a_store_write_lands_after_it(outputs_dir: Path, monkeypatch) -> None:
    # a KeyboardInterrupt raised inside a SQLite write can leave its transaction open, and the
    # database locked while the run is being marked KILLED: the write finishes first
    uri = f"sqlite:///{outputs_dir / 'mlflow.db'}"
    order: list[str] = []

    def on_sigint(signum: int, frame: object) -> None:
        order.append("interrupt")
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        with pytest.raises(KeyboardInterrupt), RunTracker(uri, "unit") as run:
            log_batch = run.client.log_batch

            def ctrl_c_then_write(run_id: str, **kwargs) -> None:
                os.kill(os.getpid(), signal.SIGINT)  # pending from the next bytecode on
                order.append("write started")
                log_batch(run_id, **kwargs)
                order.append("write finished")

            monkeypatch.setattr(run.client, "log_batch", ctrl_c_then_write)
            run.log_metrics({"train/loss": 0.5}, step=3)
            order.append("after the write")  # never reached: Ctrl-C ends the block here
        assert signal.getsignal(signal.SIGINT) is on_sigint
    finally:
        signal.signal(signal.SIGINT, previous)
    assert order == ["write started", "write finished", "interrupt"]
    got = run.client.get_run(run.run_id)
    assert got.info.status == "KILLED"
    assert got.data.metrics == {"train/loss": 0.5}


def test_interrupt_deferred_nests_and_delivers_once() -> None:
    got: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    try:
        with mlflow_store.interrupt_deferred():
            with mlflow_store.interrupt_deferred():
                os.kill(os.getpid(), signal.SIGINT)
                assert got == []
            assert got == []  # held until the outermost block ends
        assert got == [signal.SIGINT]
        with mlflow_store.interrupt_deferred():
            pass
        assert got == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_pressed_again_during_a_held_write_interrupts_it() -> None:
    # a write that hangs (a store that stopped answering) must not keep Ctrl-C from working
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    steps: list[str] = []
    try:
        # nested, as retry_store around log_batch
        with (
            pytest.raises(KeyboardInterrupt),
            mlflow_store.interrupt_deferred(),
            mlflow_store.interrupt_deferred(),
        ):
            os.kill(os.getpid(), signal.SIGINT)
            steps.append("held")
            os.kill(os.getpid(), signal.SIGINT)
            steps.append("never")
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)
    assert steps == ["held"]


def test_dataset_logged_by_two_jobs_at_once_is_linked_on_retry(
    outputs_dir: Path, monkeypatch
) -> None:
    """A concurrent job inserting the same dataset first makes the store refuse the insert
    (a unique-key violation); the run still gets its dataset input."""
    uri = f"sqlite:///{outputs_dir / 'mlflow.db'}"
    with RunTracker(uri, "unit") as run:
        real = run.client.log_inputs
        calls: list[int] = []

        def racing(run_id, datasets=None, **kw):
            calls.append(1)
            if len(calls) == 1:
                raise RuntimeError(
                    "BAD_REQUEST: (psycopg2.errors.UniqueViolation) duplicate key value "
                    'violates unique constraint "dataset_pk"'
                )
            return real(run_id, datasets=datasets, **kw)

        monkeypatch.setattr(run.client, "log_inputs", racing)
        digest = run.log_dataset("SBM", {"n": 1}, {"data/num_nodes": 10.0})
        inputs = run.client.get_run(run.run_id).inputs.dataset_inputs
    assert len(calls) == 2
    assert [d.dataset.digest for d in inputs] == [digest]


def test_dataset_logging_does_not_retry_other_errors(outputs_dir: Path, monkeypatch) -> None:
    uri = f"sqlite:///{outputs_dir / 'mlflow.db'}"
    with RunTracker(uri, "unit") as run:
        calls: list[int] = []

        def broken(run_id, datasets=None, **kw):
            calls.append(1)
            raise RuntimeError("BAD_REQUEST: schema too long")

        monkeypatch.setattr(run.client, "log_inputs", broken)
        with pytest.raises(RuntimeError, match="schema too long"):
            run.log_dataset("SBM", {"n": 1}, {"data/num_nodes": 10.0})
    assert calls == [1]


def test_experiments_open_in_the_model_training_view(outputs_dir: Path) -> None:
    """graphssl's experiments carry MLflow's kind tag, so the UI opens their Runs table (not
    the GenAI view); one created without it gets it, one with another kind keeps its own."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{outputs_dir / 'mlflow.db'}")
    kind = "mlflow.experimentKind"
    fresh = mlflow_store.ensure_experiment(client, "graphssl")
    assert client.get_experiment(fresh).tags[kind] == "custom_model_development"
    older = client.create_experiment("older")
    assert kind not in client.get_experiment(older).tags
    assert mlflow_store.ensure_experiment(client, "older") == older
    assert client.get_experiment(older).tags[kind] == "custom_model_development"
    chosen = client.create_experiment("chosen", tags={kind: "genai_development"})
    mlflow_store.ensure_experiment(client, "chosen")
    assert client.get_experiment(chosen).tags[kind] == "genai_development"


def _closed_port() -> int:
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return int(port)


def test_an_unreachable_server_is_named_at_the_first_contact(tasks, monkeypatch, caplog) -> None:
    """``MLFLOW_TRACKING_URI`` at a port nothing listens on: one connection attempt, then one
    paragraph naming the server; no urllib3 retries or warnings, whatever
    ``logger.store_wait_s`` (its default 120 s) says."""
    import socket

    from graphssl.cli import USER_ERRORS, _is_user_error

    port = _closed_port()
    uri = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("no_proxy", "*")
    monkeypatch.delenv(mlflow_store.ANSWERED_ENV, raising=False)
    attempts: list[object] = []
    connect = socket.socket.connect

    def counting(self: socket.socket, address: object) -> None:
        if isinstance(address, tuple) and address[1] == port:
            attempts.append(address)
        connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", counting)
    with pytest.raises(ConnectionError) as err:
        tasks.train("dataset=karate", "trainer.epochs=1", "eval.figures=false")
    assert attempts == [("127.0.0.1", port)]
    message = str(err.value)
    assert f"MLflow tracking server at {uri} is unreachable" in message
    assert "ConnectionRefusedError" in message and "\n" not in message
    assert _is_user_error(err.value, USER_ERRORS)
    assert not [r for r in caplog.records if r.name.startswith("urllib3")]


def test_a_server_that_answered_keeps_its_retries(monkeypatch) -> None:
    """Once a server accepted a connection, a later outage is left to the retries
    (``logger.store_wait_s``) of this process and of the sweep workers it starts."""
    import http.server
    import threading

    monkeypatch.setenv("no_proxy", "*")
    monkeypatch.delenv(mlflow_store.ANSWERED_ENV, raising=False)
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    uri = f"http://127.0.0.1:{server.server_address[1]}"
    mlflow_store.check_server(uri)
    server.shutdown()
    server.server_close()
    mlflow_store.check_server(uri)  # the server is gone: no refusal at this point
    with pytest.raises(ConnectionError, match="unreachable"):
        mlflow_store.check_server(f"http://127.0.0.1:{_closed_port()}")
    mlflow_store.check_server("sqlite:////nowhere/mlflow.db")  # not a server: nothing checked
