"""Fixtures shared by the integration tests: free TCP ports and a throw-away PostgreSQL cluster.

``postgres_uri`` needs the PostgreSQL server binaries (Debian package ``postgresql``:
``initdb``/``pg_ctl`` under ``/usr/lib/postgresql/<version>/bin``) and ``psycopg2``; it skips
with the reason otherwise. The cluster lives in a temporary folder, listens on a free loopback
port with its unix socket in that folder, and is stopped at the end. PostgreSQL refuses to run
as root: when the tests run as root the cluster is owned and run by the ``postgres`` system user
the Debian package creates (else ``nobody``), through ``subprocess``'s ``user=``.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def postgres_bin() -> Path | None:
    """Folder holding ``initdb`` and ``pg_ctl`` (newest Debian version first), or ``None``."""
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(folder) / "initdb").is_file() and (Path(folder) / "pg_ctl").is_file():
            return Path(folder)
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl"):
        return Path(os.path.realpath(initdb)).parent
    return None


def cluster_user() -> str | None:
    """The user to run PostgreSQL as: ``None`` (this user) unless we are root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    pytest.skip(
        "running as root and neither a 'postgres' nor a 'nobody' user exists; "
        "PostgreSQL refuses to run as root"
    )
    return None


@pytest.fixture
def postgres_uri() -> Iterator[str]:
    """A fresh database in a throw-away PostgreSQL cluster; yields its SQLAlchemy URI."""
    bindir = postgres_bin()
    if bindir is None:
        pytest.skip(
            "PostgreSQL server binaries not found (initdb/pg_ctl under "
            "/usr/lib/postgresql/*/bin); install the Debian package 'postgresql'"
        )
    psycopg2 = pytest.importorskip(
        "psycopg2", reason="psycopg2 not installed (pip install psycopg2-binary)"
    )
    user = cluster_user()
    # not under pytest's tmp_path: its parents are 0700 root-owned, the cluster user can't enter
    root = Path(tempfile.mkdtemp(prefix="graphssl-pg-"))
    if user is not None:
        pw = pwd.getpwnam(user)
        os.chown(root, pw.pw_uid, pw.pw_gid)
    data, log = root / "data", root / "postgres.log"
    port = _free_port()

    def pg(*args: str, timeout: int = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(bindir / args[0]), *args[1:]],
            user=user,
            cwd=root,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={"PATH": os.environ.get("PATH", ""), "LC_ALL": "C"},
        )

    started = False
    try:
        res = pg(
            "initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "--no-locale", "-E", "UTF8"
        )
        assert res.returncode == 0, f"initdb failed:\n{res.stdout}\n{res.stderr}"
        opts = (
            f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off "
            f"-c full_page_writes=off"
        )
        res = pg("pg_ctl", "-D", str(data), "-l", str(log), "-o", opts, "-w", "-t", "60", "start")
        log_text = log.read_text() if log.exists() else ""
        assert res.returncode == 0, f"pg_ctl start failed:\n{res.stderr}\n{log_text}"
        started = True
        conn = psycopg2.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres")
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE mlflow")
        conn.close()
        # +psycopg2: SQLAlchemy 2.1 maps a bare postgresql:// to psycopg 3, not psycopg2
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/mlflow"
    finally:
        if started:
            pg("pg_ctl", "-D", str(data), "-m", "fast", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def free_port() -> Callable[[], int]:
    """A function returning a TCP port free on 127.0.0.1 now."""
    return _free_port
