"""Helpers of the fault suite: a small filesystem that fills up, and MLflow run statuses.

Imported by the test modules (not a conftest, so each module names what it uses).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient


def run_statuses(db: Path) -> list[str]:
    """Statuses of the runs in experiment ``graphssl`` of store ``db`` ([] without a store)."""
    if not db.is_file():
        return []
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    exp = client.get_experiment_by_name("graphssl")
    return [r.info.status for r in client.search_runs([exp.experiment_id])] if exp else []


@contextlib.contextmanager
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs mounted under ``tmp_path`` and unmounted on exit (skips the test where
    mounting is not permitted)."""
    mount = shutil.which("mount")
    if mount is None:
        pytest.skip("no `mount` command: cannot make a small filesystem that fills up")
    where = tmp_path / "small-disk"
    where.mkdir()
    res = subprocess.run(
        [mount, "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        pytest.skip(
            f"cannot mount a 4 MiB tmpfs at {where} ({res.stderr.strip() or res.returncode}): "
            f"mounting needs root or CAP_SYS_ADMIN"
        )
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(disk: Path, leave: int) -> Path:
    """Fill ``disk`` with one file so that about ``leave`` bytes stay free; returns the file."""
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    filler = disk / "filler"
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, free - leave))
    return filler
