"""The documents' quick commands run as shown, and their error examples print what they show.

The documents are ``README.md`` and the reference pages ``docs/*.md``. A fenced block right
after a ``<!-- quick -->`` line is run here:

- ``bash``: every command (``\\``-continued lines joined, comments skipped) must exit 0;
  ``.venv/bin/<script>`` runs this interpreter's console script, ``make run ARGS="..."`` runs
  ``graphssl ...``;
- ``python``: the snippet runs as a script and must exit 0;
- ``console``: ``$ <command>`` lines are run, and every other line (``...`` stands for any
  text) must appear in what the command printed; its exit status is not checked (these show
  errors).

Every command runs in a temporary folder, against a temporary outputs folder
(``GRAPHSSL_OUTPUTS``) whose MLflow stores are already migrated. A plain ``graphssl* <args>``
command runs its console entry in this process, as the shell would run it; the rest runs in bash.

Every other ``graphssl`` command the documents show (in ``bash`` blocks, one that needs no
placeholder such as ``<run id>`` or ``$SWEEP``) composes here, in this process, as the CLI would
compose it: its overrides (the first value of a swept one; ``hydra`` settings aside) give a
config that resolves and, for training, passes the checks made before any work. Relative links
between the documents point at headings that exist.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCUMENTS = [README, *sorted((REPO / "docs").glob("*.md"))]
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


def block_commands(body: str) -> list[str]:
    """The commands of a bash block: continuation lines joined, comment lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", body)
    return [
        line.strip() for line in joined.splitlines() if line.strip() and not line.startswith("#")
    ]


def shell(command: str) -> str:
    command = command.replace(".venv/bin/", "")
    make = re.match(r'^make run ARGS="(.*)"(.*)$', command)
    return f"graphssl {make[1]}{make[2]}" if make else command


def _name(path: Path) -> str:
    return str(path.relative_to(REPO))


BLOCKS = [
    (_name(doc), line, lang, body)
    for doc in DOCUMENTS
    for line, lang, body in quick_blocks(doc.read_text())
]


def test_documents_mark_quick_blocks() -> None:
    assert {lang for *_, lang, _ in BLOCKS} == {"bash", "python", "console"}, BLOCKS
    assert any(doc == "README.md" and lang == "bash" for doc, _, lang, _ in BLOCKS), BLOCKS


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


def _run_shown(
    command: str, env: dict[str, str], cwd: Path, commands: Any
) -> subprocess.CompletedProcess[str]:
    """A shown command: a plain ``graphssl* <args>`` runs its console entry in this process
    (the ``commands`` fixture), anything that needs a shell (pipes, redirections, variables,
    ``python``, ``--help``) runs in bash with the shims on PATH."""
    line = shell(command)
    argv = shlex.split(line, comments=True) if not re.search(r"[|&;<>$`]", line) else []
    if argv and argv[0] in SCRIPTS and not {"--help", "-h"} & set(argv):
        return commands.run(argv[0], *argv[1:], env=env, cwd=cwd)
    return _run(["bash", "-c", line], env, cwd)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize(
    ("doc", "line", "lang", "body"), BLOCKS, ids=[f"{b[0]}:L{b[1]}" for b in BLOCKS]
)
def test_quick_block_runs_as_shown(
    doc: str,
    line: int,
    lang: str,
    body: str,
    shim_env: dict[str, str],
    data_dir: Path,
    tmp_path: Path,
    commands: Any,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    if lang == "python":
        script = work / "snippet.py"
        script.write_text(body)
        res = _run([sys.executable, str(script)], shim_env, work)
        assert res.returncode == 0, f"{doc} line {line}:\n{res.stderr[-3000:]}"
        return
    if lang == "bash":
        for command in block_commands(body):
            res = _run_shown(command, shim_env, work, commands)
            assert res.returncode == 0, f"{doc} line {line}: {command}\n{res.stderr[-3000:]}"
        return
    assert lang == "console", lang
    for chunk in re.split(r"^\$ ", body, flags=re.M)[1:]:
        command, *expected = chunk.splitlines()
        res = _run_shown(command, shim_env, work, commands)
        printed = " ".join((res.stdout + res.stderr).split())
        for want in filter(None, (" ".join(e.split()) for e in expected)):
            pieces = [p.strip() for p in want.split("...") if p.strip()]
            assert all(p in printed for p in pieces), (
                f"{doc} line {line}: `{command}` did not print {want!r}:\n{printed[-3000:]}"
            )


#: console script -> the config it composes (``graphssl-ui`` takes no Hydra overrides)
CONFIGS = {
    "graphssl": "train",
    "graphssl-evaluate": "evaluate",
    "graphssl-compare": "compare",
    "graphssl-report": "report",
    "graphssl-stability": "stability",
}
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def shown_commands() -> list[tuple[str, str, list[str]]]:
    """``(document, command, overrides)`` of every ``graphssl*`` command in a ``bash`` block
    that needs no placeholder; a swept override keeps its first value, ``hydra`` ones are
    dropped (the launcher or sweeper, not the job's config)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    found = []
    for doc in DOCUMENTS:
        for m in FENCE.finditer(doc.read_text()):
            if m[1] != "bash":
                continue
            for command in block_commands(m[2]):
                if any(mark in command for mark in ("<", "$", "--experimental-rerun")):
                    continue
                words = shlex.split(shell(command), comments=True)
                while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
                    words.pop(0)  # VAR=value before the command
                if words[:3] == ["python", "-m", "graphssl"]:
                    words = ["graphssl", *words[3:]]
                script = Path(words[0]).name if words else ""
                if script not in CONFIGS:
                    continue
                overrides = [
                    w
                    for w in words[1:]
                    if "=" in w and not w.startswith("-") and not w.lstrip("+").startswith("hydra")
                ]
                first = []
                for o in parser.parse_overrides(overrides):
                    if o.is_sweep_override():
                        first.append(f"{o.get_key_element()}={next(o.sweep_string_iterator())}")
                    else:
                        first.append(o.input_line)
                found.append((f"{_name(doc)}: {command}", CONFIGS[script], first))
    return found


SHOWN = shown_commands()


def test_documents_show_commands() -> None:
    assert len({cmd.split(":")[0] for cmd, _, _ in SHOWN}) >= 5, SHOWN
    assert {name for _, name, _ in SHOWN} >= {"train", "compare", "report", "stability"}


@pytest.mark.parametrize(("command", "config_name", "overrides"), SHOWN, ids=[s[0] for s in SHOWN])
def test_shown_command_composes(
    command: str,
    config_name: str,
    overrides: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    from graphssl.tasks.components import resolve_config
    from graphssl.tasks.validate import validate_train_config

    # a user's own graph file named in the command: a small valid one stands in for it, since
    # the checks before a run read the file
    monkeypatch.chdir(tmp_path)
    for word in overrides:
        if word.startswith("dataset.path=") and word.endswith(".npz"):
            import numpy as np

            ring = np.arange(400)
            np.savez(
                word.split("=", 1)[1],
                edge_index=np.stack([ring, (ring + 1) % 400]),
                x=np.eye(400, 4, dtype=np.float32) + 0.1,
                y=ring % 2,
            )

    # a command for several machines runs as task 0 of a SLURM job step: its environment
    settings = dict(w.split("=", 1) for w in overrides if w.startswith("trainer."))
    nodes = int(settings.get("trainer.num_nodes", 1))
    if nodes > 1:
        tasks = nodes * int(settings.get("trainer.devices", 1))
        for key, value in {
            "SLURM_JOB_ID": "4242",
            "SLURM_STEP_ID": "0",
            "SLURM_PROCID": "0",
            "SLURM_LOCALID": "0",
            "SLURM_NODEID": "0",
            "SLURM_NTASKS": str(tasks),
            "SLURM_STEP_NODELIST": f"node[1-{nodes}]",
        }.items():
            monkeypatch.setenv(key, value)

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)  # ${hydra:...} resolves as in a run
    try:
        resolved = resolve_config(cfg)
        if config_name == "train":
            validate_train_config(resolved)
    finally:
        HydraConfig.instance().cfg = None


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    return {_slug(m[1]) for m in re.finditer(r"^#+ (.*)$", text, re.M)}


def test_links_point_at_headings() -> None:
    broken = []
    for doc in [*DOCUMENTS, REPO / "BENCHMARKS.md", REPO / "STUDIES.md"]:
        for target in re.findall(r"\]\(([^)\s]+)\)", FENCE.sub("", doc.read_text())):
            if re.match(r"^[a-z]+://", target):
                continue
            file, _, anchor = target.partition("#")
            path = (doc.parent / file).resolve() if file else doc
            if anchor and path.is_file() and anchor not in _anchors(path):
                broken.append(f"{_name(doc)}: {target}")
    assert not broken, broken
