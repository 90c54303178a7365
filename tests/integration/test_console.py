"""What a user sees from the CLI: no library noise, epoch lines and the summary in the job log,
and Ctrl-C as one line with exit status 130 and the run marked KILLED."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: fragments of the library output the console layer hides (graphssl/tasks/_console.py)
NOISE = (
    "torch.jit.script",
    "Sparse invariant checks",
    "Sparse CSR tensor support",
    "Creating initial MLflow database tables",
    "Updating database tables",
    "Processing...",
    "Done!",
    "generated new fontManager",
    "PROGRESS:",
    "warnings.warn(",
    "Traceback",
)


def _job_log(outputs: Path) -> str:
    logs = list((outputs / "runs").glob("*/*/*.log"))
    assert len(logs) == 1, logs
    return logs[0].read_text()


def test_a_fresh_run_is_quiet_and_logs_epochs(
    graphssl_cmd, cli_env, data_dir, tmp_path: Path
) -> None:
    """Cora into a fresh store and cache: the schema migration, PyG's processing and the
    sparse-tensor and TorchScript notices all happen, and none of them is printed."""
    outputs = tmp_path / "fresh"  # no pre-migrated store: the migration runs
    env = dict(cli_env, GRAPHSSL_OUTPUTS=str(outputs))
    res = subprocess.run(
        [*graphssl_cmd, "dataset=cora", "trainer.epochs=11", "trainer.patience=null"],
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    printed = res.stdout + res.stderr
    assert [n for n in NOISE if n in printed] == [], printed[-3000:]
    assert "\x1b[" not in printed
    log = _job_log(outputs)
    for line in ("Epoch 001, loss ", "Epoch 010, loss ", "Epoch 011, loss ", "summary"):
        assert line in log, f"{line!r} missing from the job log:\n{log[-2000:]}"
    assert "processing Planetoid" in log  # PyG's processing, as one INFO line
    assert "probe/logreg/test_acc" in log.split("summary", 1)[1]
    epochs_row = [r for r in res.stdout.splitlines() if r.startswith("train/epochs")]
    assert epochs_row and epochs_row[0].split()[1] == "11", epochs_row


def test_ctrl_c_is_one_line_and_exit_130(graphssl_cmd, cli_env, outputs_dir, tmp_path) -> None:
    proc = subprocess.Popen(
        [
            *graphssl_cmd,
            "dataset=sbm",
            "trainer.epochs=1000000",
            "trainer.patience=null",
            "trainer.log_every=1",
        ],
        env=cli_env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a shell's background job (CI) ignores SIGINT, and the child would inherit that
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "Epoch 002" in line:  # training, inside the MLflow run
                proc.send_signal(signal.SIGINT)
                break
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    client = MlflowClient(f"sqlite:///{outputs_dir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("graphssl")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    assert [r.info.status for r in runs] == ["KILLED"]
    assert err.strip().splitlines() == [
        f"graphssl: interrupted; run {runs[0].info.run_id} marked KILLED"
    ], err


def test_gensim_progress_is_quiet(graphssl_cmd, cli_env, tmp_path) -> None:
    res = subprocess.run(
        [*graphssl_cmd, "dataset=sbm", "model=deepwalk", "eval.figures=false"],
        env=cli_env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "PROGRESS" not in res.stdout + res.stderr
    assert "[gensim." not in res.stdout + res.stderr  # no record of gensim's loggers
    assert "probe/logreg/test_acc" in res.stdout  # DeepWalk did fit and was evaluated
