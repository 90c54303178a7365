"""Shared fixtures: where the real datasets are, a pre-migrated MLflow store, and the tasks run
in-process on the real config.

Real data comes from ``$GRAPHSSL_DATA_DIR`` or ``../shared/data`` beside the repository; tests
that need it skip with a clear reason when neither exists. A fresh SQLite MLflow store costs
7–9 s of schema migration, so one is migrated per session and copied per test.

``tasks`` (an :class:`InProcess`) composes ``conf/`` with Hydra's compose API, as the
``graphssl*`` commands do, and calls the task functions (``train(cfg)``, ``evaluate(cfg)``, ...)
in the test's process against ``outputs_dir``: no interpreter start, no imports again. Tests
start a ``graphssl`` process (``cli_env`` + ``graphssl_cmd``) only where the process is what
they test: signals, kills, ports, launchers, servers and the CLI's own output (docs/testing.md).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import pytest

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"

# The suite never touches the network: configs (and CLI subprocesses, which inherit the
# environment) see paths.download=false unless a test turns it on against a local server.
os.environ.setdefault("GRAPHSSL_DOWNLOAD", "false")

# Under pytest-xdist (make test) each worker is one of several processes sharing the cores: one
# intra-op thread each, inherited by the processes they start, unless the caller chose a count.
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def shared_data_dir() -> Path | None:
    """The offline dataset folder, or ``None`` when this machine has none."""
    candidates = [
        os.environ.get("GRAPHSSL_DATA_DIR"),
        os.environ.get("GRAPHSSL_SHARED_DATA"),
        str(REPO.parent / "shared" / "data"),
    ]
    for c in candidates:
        if c and (Path(c) / "Planetoid").is_dir():
            return Path(c)
    return None


@pytest.fixture(autouse=True)
def _no_hydra_state_left() -> Iterator[None]:
    """Hydra keeps the job's config and its initialisation in process-wide singletons; a test
    that sets them (a rerun, an in-process multirun) must not change what the next test in the
    same worker sees (``HydraConfig.initialized()`` in the train task)."""
    yield
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    HydraConfig.instance().cfg = None  # type: ignore[assignment]
    GlobalHydra.instance().clear()


@pytest.fixture(scope="session")
def load_benchmark() -> Iterator[Callable[[str], ModuleType]]:
    """``load_benchmark(name)`` imports ``benchmarks/<name>.py`` as the module ``name``,
    registered in ``sys.modules`` (dataclasses resolve their module by name) until the session
    ends."""
    loaded: list[str] = []

    def load(name: str) -> ModuleType:
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        loaded.append(name)
        spec.loader.exec_module(module)
        return module

    yield load
    for name in loaded:
        sys.modules.pop(name, None)


@pytest.fixture
def graphmae_errors(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Each GraphMAE loss's per-row errors, in order (``scaled_cosine_error_terms`` recorded)."""
    import graphssl.methods.graphmae as graphmae

    recorded: list[Any] = []
    terms = graphmae.scaled_cosine_error_terms

    def record(x_rec: Any, x: Any, gamma: float = 2.0) -> Any:
        recorded.append(terms(x_rec, x, gamma).detach())
        return recorded[-1]

    monkeypatch.setattr(graphmae, "scaled_cosine_error_terms", record)
    return recorded


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The real offline datasets (skips the test when they are absent)."""
    found = shared_data_dir()
    if found is None:
        pytest.skip(
            "real datasets not found: set GRAPHSSL_DATA_DIR to a folder laid out as "
            "../shared/data (Planetoid/, WebKB/, ...)"
        )
    return found


@pytest.fixture(scope="session")
def _mlflow_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    from mlflow.tracking import MlflowClient

    folder = tmp_path_factory.mktemp("mlflow-template")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    MlflowClient(tracking_uri=uri).search_experiments()  # creates and migrates the schema
    return folder / "mlflow.db"


@pytest.fixture
def outputs_dir(tmp_path: Path, _mlflow_template: Path) -> Path:
    """A fresh outputs folder whose ``mlflow.db`` is an already-migrated empty store."""
    out = tmp_path / "outputs"
    out.mkdir()
    shutil.copyfile(_mlflow_template, out / "mlflow.db")
    return out


@pytest.fixture
def cli_env(outputs_dir: Path) -> dict[str, str]:
    """Environment for running the CLI in a subprocess against ``outputs_dir``."""
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["GRAPHSSL_OUTPUTS"] = str(outputs_dir)
    env["MLFLOW_DISABLE_TELEMETRY"] = "true"
    env["PYTHONUNBUFFERED"] = "1"
    found = shared_data_dir()
    if found is not None:
        env["GRAPHSSL_DATA_DIR"] = str(found)
    return env


@pytest.fixture
def graphssl_cmd() -> list[str]:
    return [sys.executable, "-m", "graphssl"]


def compose_config(config_name: str, *overrides: str) -> Any:
    """``conf/<config_name>.yaml`` composed with ``overrides``, as the command line would."""
    from hydra import compose, initialize_config_dir

    import graphssl.cli  # noqa: F401  (installs the config-file checks the commands have)

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name=config_name, overrides=list(overrides))


class InProcess:
    """The graphssl tasks called in this process on the composed real config.

    The environment is the one ``cli_env`` gives a subprocess (``GRAPHSSL_OUTPUTS``, the data
    folder, no ``MLFLOW_TRACKING_URI``), so ``paths`` and the store resolve as they would for
    ``graphssl <overrides>``. Hydra's runtime is not initialised: no run folder, no
    ``.hydra/`` artifact and no ``graphssl.overrides`` tag (the CLI smoke tests check those).
    """

    def __init__(self, outputs: Path) -> None:
        self.outputs = outputs

    def compose(self, config_name: str, *overrides: str) -> Any:
        return compose_config(config_name, *overrides)

    def train(self, *overrides: str) -> dict[str, float]:
        from graphssl.tasks.train import train

        return train(self.compose("train", *overrides))

    def rerun(self, run_id: str) -> dict[str, float]:
        from graphssl.tasks.rerun import rerun

        return rerun(self.compose("train", f"rerun={run_id}"))

    def evaluate(self, *overrides: str) -> Any:
        from graphssl.tasks.evaluate import evaluate

        return evaluate(self.compose("evaluate", *overrides))

    def stability(self, *overrides: str) -> Any:
        from graphssl.tasks.stability import run_stability

        return run_stability(self.compose("stability", *overrides))

    def client(self, db: Path | None = None) -> Any:
        """An MLflow client on ``db`` (default: the outputs folder's ``mlflow.db``)."""
        from mlflow.tracking import MlflowClient

        return MlflowClient(tracking_uri=f"sqlite:///{db or self.outputs / 'mlflow.db'}")

    def runs(self, experiment: str = "graphssl", db: Path | None = None) -> list[Any]:
        """The runs of ``experiment`` in ``db``, oldest first ([] without the experiment)."""
        client = self.client(db)
        exp = client.get_experiment_by_name(experiment)
        if exp is None:
            return []
        order = ["attributes.start_time ASC"]
        return list(client.search_runs([exp.experiment_id], max_results=1000, order_by=order))

    def statuses(self, experiment: str = "graphssl", db: Path | None = None) -> list[str]:
        return [r.info.status for r in self.runs(experiment, db)]


class Commands:
    """The ``graphssl*`` console commands run in this process, as a user's shell would run them.

    ``run("graphssl", "model=grace", ...)`` calls the console script's entry (``--version``,
    Hydra's command-line parsing and config checks, the task, graphssl's one-paragraph errors
    and exit codes) with ``sys.argv``, the environment and the working folder set for the call,
    and returns what :func:`subprocess.run` would: exit code, stdout and stderr. Everything the
    command changes in the process (environment, folder, signal handlers, logging, warning
    filters, torch threads) is put back afterwards. A process is started only where the process
    is the point: signals, kills, ports, launchers and servers.
    """

    ENTRIES: ClassVar[dict[str, str]] = {
        "graphssl": "main",
        "graphssl-evaluate": "evaluate_main",
        "graphssl-compare": "compare_main",
        "graphssl-report": "report_main",
        "graphssl-stability": "stability_main",
    }

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.env = env
        self.cwd = cwd

    def run(
        self, prog: str, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        import contextlib
        import io
        import logging
        import signal
        import traceback
        import warnings

        import torch

        import graphssl.cli

        entry = getattr(graphssl.cli, self.ENTRIES[prog])
        saved_env, saved_cwd, saved_argv = dict(os.environ), os.getcwd(), sys.argv
        saved_signals = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        loggers = [
            logging.getLogger(),
            *map(logging.getLogger, list(logging.root.manager.loggerDict)),
        ]
        saved_logging = [
            (lg, lg.level, lg.handlers[:], lg.disabled, lg.propagate) for lg in loggers
        ]
        # the console layer's warning hooks: its one-line format, and logging's record of the
        # hook it replaced (while that is set, captureWarnings(True) does nothing)
        saved_warning_hooks = (warnings.formatwarning, logging._warnings_showwarning)  # type: ignore[attr-defined]
        saved_threads = torch.get_num_threads()
        out, err = io.StringIO(), io.StringIO()
        code: int = 0
        try:
            os.environ.clear()
            os.environ.update(self.env if env is None else env)
            os.chdir(cwd or self.cwd)
            sys.argv = [prog, *args]
            with (
                warnings.catch_warnings(),
                contextlib.redirect_stdout(out),
                contextlib.redirect_stderr(err),
            ):
                try:
                    entry()
                except SystemExit as stop:
                    if isinstance(stop.code, int) or stop.code is None:
                        code = stop.code or 0
                    else:  # sys.exit("message"): printed, exit code 1
                        print(stop.code, file=sys.stderr)
                        code = 1
                except BaseException:  # what the interpreter would print before exiting 1
                    traceback.print_exc(file=sys.stderr)
                    code = 1
        finally:
            os.environ.clear()
            os.environ.update(saved_env)
            os.chdir(saved_cwd)
            sys.argv = saved_argv
            for s, handler in saved_signals.items():
                signal.signal(s, handler)
            for lg, level, handlers, disabled, propagate in saved_logging:
                lg.setLevel(level)
                for added in set(lg.handlers) - set(handlers):  # e.g. the run folder's cli.log
                    added.close()
                lg.handlers[:] = handlers
                lg.disabled, lg.propagate = disabled, propagate
            warnings.formatwarning, logging._warnings_showwarning = saved_warning_hooks  # type: ignore[attr-defined]
            torch.set_num_threads(saved_threads)
        return subprocess.CompletedProcess([prog, *args], code, out.getvalue(), err.getvalue())


@pytest.fixture
def commands(cli_env: dict[str, str], tmp_path: Path) -> Commands:
    """The console commands in-process, in ``cli_env`` (``GRAPHSSL_OUTPUTS=outputs_dir``) and
    ``tmp_path`` as the working folder (:class:`Commands`)."""
    return Commands(cli_env, tmp_path)


@pytest.fixture
def tasks(outputs_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InProcess]:
    """The tasks in-process against ``outputs_dir`` (one torch thread, restored after)."""
    import torch

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("GRAPHSSL_OUTPUTS", str(outputs_dir))
    found = shared_data_dir()
    if found is not None:
        monkeypatch.setenv("GRAPHSSL_DATA_DIR", str(found))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield InProcess(outputs_dir)
    finally:
        torch.set_num_threads(threads)


@pytest.fixture
def largest_tensor() -> Callable[[], Any]:
    """A factory of context managers that record the most elements of any tensor an operation
    made while they were on (``with largest_tensor() as seen: ...; seen.numel``): what a test
    of memory that grows as ``N``, not ``N²``, reads instead of the process's peak."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class LargestTensor(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.numel = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            import torch

            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, tuple | list) else (out,):
                if isinstance(t, torch.Tensor):
                    self.numel = max(self.numel, t.numel())
            return out

    return LargestTensor
