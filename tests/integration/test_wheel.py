"""The published artifact: a wheel built from this checkout carries the package, the config
tree and the embedded Cora copy, and its console script trains the default experiment from a
fresh virtual environment, outside the source tree, with an empty data folder, offline.

The wheel is built without build isolation (the build backend of this environment, no
download), installed with ``--no-deps --no-index`` into a new virtual environment that has no
access to this checkout; the dependencies come from this environment's site-packages, listed
after the new environment's own in a ``.pth`` file (a plain path: the editable install of this
checkout, which needs its own ``.pth`` processed, stays invisible)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
PIP = [sys.executable, "-m", "pip"]


def _run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kwargs)  # type: ignore[call-overload]
    assert res.returncode == 0, f"{cmd}\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}"
    return res


def test_the_wheel_installs_and_trains_from_outside_the_checkout(tmp_path: Path) -> None:
    # the sources a build reads, copied, so the build writes nothing into the checkout
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "graphssl", src / "graphssl", ignore=ignore)
    shutil.copytree(REPO / "conf", src / "conf", ignore=ignore)
    dist = tmp_path / "dist"
    _run(
        [
            *PIP,
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(dist),
            str(src),
        ],
        cwd=tmp_path,
    )
    (wheel,) = dist.glob("graphssl_lab-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "graphssl/cli.py" in names
    assert "graphssl/data/_embedded/cora.npz" in names
    conf = {p.relative_to(REPO).as_posix() for p in (REPO / "conf").rglob("*.yaml")}
    assert {f"graphssl/{p}" for p in conf} <= names, "the wheel misses configs"
    metadata = zipfile.ZipFile(wheel).read(
        next(n for n in names if n.endswith(".dist-info/METADATA"))
    )
    assert b"Name: graphssl-lab" in metadata and b"License-Expression: MIT" in metadata

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    _run([*PIP, "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)])
    purelib = _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
    ).stdout.strip()
    (Path(purelib) / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    run_dir, data, outputs = tmp_path / "run", tmp_path / "empty-data", tmp_path / "outputs"
    for folder in (run_dir, data):
        folder.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MLFLOW_TRACKING_URI")}
    env.update(
        GRAPHSSL_DATA_DIR=str(data),
        GRAPHSSL_OUTPUTS=str(outputs),
        GRAPHSSL_DOWNLOAD="false",
        MLFLOW_DISABLE_TELEMETRY="true",
        OMP_NUM_THREADS="1",
    )
    where = _run(
        [str(python), "-c", "import graphssl.cli as c; print(c.__file__); print(c.CONFIG_PATH)"],
        cwd=run_dir,
        env=env,
    ).stdout.split()
    assert all(p.startswith(str(venv)) for p in where[-2:]), where
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    shown = _run([str(venv / "bin" / "graphssl"), "--version"], cwd=run_dir, env=env).stdout
    assert shown == f"graphssl {version}\n"
    res = _run(
        [str(venv / "bin" / "graphssl"), "debug=fast", "num_threads=1"], cwd=run_dir, env=env
    )
    assert "dgi-Cora" in res.stdout and "probe/logreg/test_acc" in res.stdout
    assert "using the copy of its public split packaged with graphssl" in res.stdout + res.stderr
    assert list(data.iterdir()) == [] and list(run_dir.iterdir()) == []
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{outputs / 'debug' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("debug")
    assert exp is not None
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.status == "FINISHED" and "probe/logreg/test_acc" in run.data.metrics
