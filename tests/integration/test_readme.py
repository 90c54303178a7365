"""The README's quick commands run as shown, and its error examples print what it shows.

A fenced block right after a ``<!-- quick -->`` line is run here:

- ``bash``: every command (``\\``-continued lines joined, comments skipped) must exit 0;
  ``.venv/bin/<script>`` runs this interpreter's console script, ``make run ARGS="..."`` runs
  ``graphssl ...``;
- ``python``: the snippet runs as a script and must exit 0;
- ``console``: ``$ <command>`` lines are run, and every other line (``...`` stands for any
  text) must appear in what the command printed; its exit status is not checked (these show
  errors).

Every command runs in a temporary folder, against a temporary outputs folder
(``GRAPHSSL_OUTPUTS``) whose MLflow stores are already migrated.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
SCRIPTS = {
    "graphssl": "main",
    "graphssl-evaluate": "evaluate_main",
    "graphssl-compare": "compare_main",
    "graphssl-report": "report_main",
    "graphssl-stability": "stability_main",
}


def quick_blocks(text: str) -> list[tuple[int, str, str]]:
    """``(line number, language, body)`` of every fenced block marked ``<!-- quick -->``."""
    pattern = re.compile(r"^<!-- quick -->\s*\n+```(\w+)\n(.*?)^```", re.M | re.S)
    return [(text[: m.start()].count("\n") + 1, m[1], m[2]) for m in pattern.finditer(text)]


def commands(body: str) -> list[str]:
    """The commands of a bash block: continuation lines joined, comment lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", body)
    return [
        line.strip() for line in joined.splitlines() if line.strip() and not line.startswith("#")
    ]


def shell(command: str) -> str:
    command = command.replace(".venv/bin/", "")
    make = re.match(r'^make run ARGS="(.*)"(.*)$', command)
    return f"graphssl {make[1]}{make[2]}" if make else command


BLOCKS = quick_blocks(README.read_text())


def test_readme_marks_quick_blocks() -> None:
    assert {lang for _, lang, _ in BLOCKS} == {"bash", "python", "console"}, BLOCKS


@pytest.fixture
def shim_env(cli_env: dict[str, str], outputs_dir: Path, tmp_path: Path) -> dict[str, str]:
    """``cli_env`` with ``graphssl*`` and ``python`` on PATH running this interpreter."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, entry in SCRIPTS.items():
        code = f"from graphssl.cli import {entry}; {entry}()"
        (bin_dir / name).write_text(f'#!/bin/sh\nexec "{sys.executable}" -c "{code}" "$@"\n')
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    (outputs_dir / "debug").mkdir()
    shutil.copyfile(outputs_dir / "mlflow.db", outputs_dir / "debug" / "mlflow.db")
    return dict(cli_env, PATH=f"{bin_dir}{os.pathsep}{cli_env.get('PATH', '')}")


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize(("line", "lang", "body"), BLOCKS, ids=[f"L{b[0]}" for b in BLOCKS])
def test_quick_block_runs_as_shown(
    line: int, lang: str, body: str, shim_env: dict[str, str], data_dir: Path, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    if lang == "python":
        script = work / "snippet.py"
        script.write_text(body)
        res = _run([sys.executable, str(script)], shim_env, work)
        assert res.returncode == 0, f"README line {line}:\n{res.stderr[-3000:]}"
        return
    if lang == "bash":
        for command in commands(body):
            res = _run(["bash", "-c", shell(command)], shim_env, work)
            assert res.returncode == 0, f"README line {line}: {command}\n{res.stderr[-3000:]}"
        return
    assert lang == "console", lang
    for chunk in re.split(r"^\$ ", body, flags=re.M)[1:]:
        command, *expected = chunk.splitlines()
        res = _run(["bash", "-c", shell(command)], shim_env, work)
        printed = " ".join((res.stdout + res.stderr).split())
        for want in filter(None, (" ".join(e.split()) for e in expected)):
            pieces = [p.strip() for p in want.split("...") if p.strip()]
            assert all(p in printed for p in pieces), (
                f"README line {line}: `{command}` did not print {want!r}:\n{printed[-3000:]}"
            )
