"""Checkpoints: state dicts, optimizer, RNG states, epoch and config hash.

Written atomically (temporary file + rename) and read with ``torch.load(weights_only=True)``,
so a checkpoint can never execute code. Everything in it is a tensor, a number, a
string or a container of those.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from graphssl.utils import capture_rng, restore_rng

__all__ = ["capture_rng", "load_checkpoint", "restore_rng", "save_checkpoint"]

FORMAT_VERSION = 1


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
