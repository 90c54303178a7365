"""Unreadable files give one paragraph naming the file and what was expected: embedding files
given to ``graphssl-compare``, and a checkpoint that ``resume=true`` cannot read (moved aside,
the stale run marked KILLED, the run started again; the next start is not blocked).

``graphssl-compare`` runs in this process (the ``commands`` fixture): what is tested is what it
prints, its exit code and what it leaves in the store, not the interpreter around it."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import torch
from faultkit import run_statuses

FAST = ["dataset=sbm", "eval.figures=false", "logger.log_embeddings=false"]


def _good(path: Path, ids: object = None) -> Path:
    torch.manual_seed(0)
    payload = {"embeddings": torch.randn(40, 4), "ids": torch.arange(40) if ids is None else ids}
    torch.save(payload, path)
    return path


def _bad_file(kind: str, folder: Path) -> Path:
    path = folder / f"{kind}.pt"
    if kind == "truncated":
        data = _good(folder / "whole.pt").read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "latin1":
        path.write_bytes("embeddings: caf\xe9\n".encode("latin-1"))
    elif kind == "random":
        path.write_bytes(os.urandom(4096))
    elif kind == "string_ids":
        _good(path, ids=[f"node-{i}" for i in range(40)])
    return path


@pytest.mark.parametrize("kind", ["truncated", "empty", "latin1", "random", "string_ids"])
def test_compare_names_an_unreadable_embeddings_file(kind, commands, outputs_dir, tmp_path) -> None:
    bad = _bad_file(kind, tmp_path)
    good = _good(tmp_path / "good.pt")
    res = commands.run("graphssl-compare", f"embedding_files=[{good},{bad}]")
    assert res.returncode != 0
    assert str(bad) in res.stderr, res.stderr[-2000:]
    assert "expected a torch.save file of dict(embeddings" in res.stderr
    assert "Traceback" not in res.stderr
    assert "FINISHED" not in run_statuses(outputs_dir / "mlflow.db")
    assert "RUNNING" not in run_statuses(outputs_dir / "mlflow.db")


@pytest.mark.parametrize("damage", ["truncated", "empty"])
def test_unreadable_checkpoint_is_moved_aside(tasks, outputs_dir, damage, caplog) -> None:
    """In-process: the restart after a death is what is tested, not the process that died."""
    args = [*FAST, "trainer.epochs=4", "trainer.checkpoint_every=2"]
    tasks.train(*args)
    (ckpt,) = (outputs_dir / "checkpoints").glob("*/last.pt")
    # the process died mid-run: its run is left RUNNING, its checkpoint damaged
    client = tasks.client()
    (stale,) = tasks.runs()
    client.update_run(stale.info.run_id, status="RUNNING")
    client.set_tag(stale.info.run_id, "graphssl.pid", "999999999")  # a process that is gone
    data = ckpt.read_bytes()
    ckpt.write_bytes(data[: len(data) // 3] if damage == "truncated" else b"")

    with caplog.at_level(logging.WARNING, logger="graphssl"):
        tasks.train(*args, "resume=true")
    assert any(
        str(ckpt) in r.getMessage() and "is unreadable" in r.getMessage() for r in caplog.records
    )
    moved = list(ckpt.parent.glob("last.pt.corrupt-*"))
    damaged = len(data) // 3 if damage == "truncated" else 0
    assert len(moved) == 1 and moved[0].stat().st_size == damaged
    statuses = {r.info.run_id: r.info.status for r in tasks.runs()}
    assert statuses[stale.info.run_id] == "KILLED"
    assert sorted(statuses.values()) == ["FINISHED", "KILLED"]
    # the next start is not blocked: the fresh run wrote a readable checkpoint again
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="graphssl"):
        tasks.train(*args, "resume=true")
    assert not any("is unreadable" in r.getMessage() for r in caplog.records)
    assert len(list(ckpt.parent.glob("last.pt.corrupt-*"))) == 1
