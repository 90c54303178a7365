"""Checkpoints: state dicts, optimizer, RNG states, epoch and config hash.

Written atomically (temporary file + rename) and read with ``torch.load(weights_only=True)``,
so a checkpoint can never execute code (design.md §3). Everything in it is a tensor, a number, a
string or a container of those.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

FORMAT_VERSION = 1


def capture_rng() -> dict[str, Any]:
    """The states of Python's, NumPy's and torch's global generators."""
    version, state, gauss = random.getstate()
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()  # type: ignore[misc]
    out: dict[str, Any] = {
        "python": [version, list(state), gauss],
        "numpy": [
            np_name,
            torch.from_numpy(np.asarray(np_keys).copy()),
            int(np_pos),
            int(np_has_gauss),
            float(np_gauss),
        ],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def restore_rng(state: dict[str, Any]) -> None:
    """Restore what :func:`capture_rng` captured."""
    version, values, gauss = state["python"]
    random.setstate((version, tuple(values), gauss))
    name, keys, pos, has_gauss, gauss_np = state["numpy"]
    np.random.set_state((name, keys.numpy(), pos, has_gauss, gauss_np))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: str | os.PathLike[str], payload: dict[str, Any]) -> Path:
    """Write ``payload`` (plus the format version) to ``path`` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save({"format_version": FORMAT_VERSION, **payload}, tmp)
    os.replace(tmp, path)
    return path


def load_checkpoint(path: str | os.PathLike[str], config_hash: str | None = None) -> dict[str, Any]:
    """Read a checkpoint with ``weights_only=True``; check its config hash when given.

    Raises:
        FileNotFoundError: no checkpoint at ``path``.
        ValueError: the checkpoint belongs to another configuration or format.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"no checkpoint at {path}; expected one written by a run "
            f"of the same configuration with trainer.checkpoint_every set"
        )
    state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    if state.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"checkpoint {path} has format version {state.get('format_version')}; "
            f"expected {FORMAT_VERSION}"
        )
    if config_hash is not None and state.get("config_hash") != config_hash:
        raise ValueError(
            f"checkpoint {path} was written by a different configuration (hash "
            f"{state.get('config_hash')}, expected {config_hash}); refusing to resume from it"
        )
    return state
