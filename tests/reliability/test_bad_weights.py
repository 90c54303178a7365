"""``ckpt_path=`` a file that holds no weights — truncated, empty, text, an ``.npz``, a torch
file of a tensor or a list, a dict of non-tensors — fails with one paragraph naming the file and
what was expected (a run's ``model/weights.pt`` or a trainer checkpoint ``last.pt``), as a
``ValueError`` the command line prints without a traceback."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from graphssl.cli import _run_task
from graphssl.tracking.models import WeightsFileError, initial_state, load_state


def _weights(path: Path) -> Path:
    torch.save({"encoder.weight": torch.ones(3, 2), "encoder.bias": torch.zeros(3)}, path)
    return path


def bad_file(kind: str, folder: Path) -> Path:
    path = folder / f"{kind}.pt"
    if kind == "truncated":
        data = _weights(folder / "whole.pt").read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "text":
        path.write_text("encoder.weight: [1, 2, 3]\n")
    elif kind == "npz":
        path = folder / "weights.npz"
        np.savez(path, w=np.ones(3))
    elif kind == "tensor":
        torch.save(torch.ones(3), path)
    elif kind == "list":
        torch.save([torch.ones(3)], path)
    elif kind == "dict_of_numbers":
        torch.save({"lr": 0.1, "epoch": 3}, path)
    elif kind == "empty_dict":
        torch.save({}, path)
    return path


KINDS = ["truncated", "empty", "text", "npz", "tensor", "list", "dict_of_numbers", "empty_dict"]


@pytest.mark.parametrize("kind", KINDS)
def test_ckpt_path_that_holds_no_weights(tmp_path, kind) -> None:
    path = bad_file(kind, tmp_path)
    with pytest.raises(WeightsFileError) as err:
        load_state(path)
    text = str(err.value)
    assert str(path) in text and "model/weights.pt" in text and "last.pt" in text, text
    assert "\n" not in text and len(text) < 700  # one paragraph


def test_weights_and_checkpoints_load(tmp_path) -> None:
    state = load_state(_weights(tmp_path / "weights.pt"))
    assert sorted(state) == ["encoder.bias", "encoder.weight"]
    torch.save({"format_version": 1, "model": state, "epoch": 2}, tmp_path / "last.pt")
    assert sorted(load_state(tmp_path / "last.pt")) == sorted(state)


def test_the_command_line_prints_one_paragraph(tmp_path, capsys) -> None:
    path = bad_file("truncated", tmp_path)
    cfg = OmegaConf.create({"ckpt_path": str(path), "from_run": None})
    with pytest.raises(SystemExit) as exit_:
        _run_task("graphssl", lambda c: initial_state(None, c.ckpt_path, c.get("from_run")), cfg)  # type: ignore[arg-type]
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert f"graphssl: error: WeightsFileError: ckpt_path={str(path)!r}" in err
    assert "Traceback" not in err and len(err.splitlines()) == 2
