"""Checkpoints: state dicts, optimizer, RNG states, epoch and config hash.

Written atomically (temporary file + rename) and read with ``torch.load(weights_only=True)``,
so a checkpoint can never execute code. Everything in it is a tensor, a number, a
string or a container of those.
"""

from __future__ import annotations

import errno
import io
import os
from pathlib import Path
from typing import Any

import torch

from graphssl.utils import UnsafeFileError, capture_rng, load_weights_only, restore_rng

__all__ = [
    "CheckpointUnreadable",
    "CheckpointWriteError",
    "capture_rng",
    "load_checkpoint",
    "restore_rng",
    "save_checkpoint",
]

FORMAT_VERSION = 1


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (a full disk, an unwritable folder); the previous
    checkpoint at the same path, if any, is intact."""


class CheckpointUnreadable(ValueError):
    """A checkpoint file that cannot be read: truncated, empty, or not a graphssl checkpoint."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(
            f"checkpoint {path} is unreadable ({reason}); expected a torch.save file of a "
            f"graphssl checkpoint (a dict with format_version {FORMAT_VERSION}, config_hash, "
            f"model and optimizer state)"
        )
        self.path = path


def save_checkpoint(path: str | os.PathLike[str], payload: dict[str, Any]) -> Path:
    """Write ``payload`` (plus the format version) to ``path`` atomically.

    The payload is serialised in memory, written to ``<path>.tmp``, flushed to disk and renamed
    over ``path``, so a kill or a full disk never leaves a partial ``path``.

    Raises:
        CheckpointWriteError: the file could not be written (the temporary file is removed).
    """
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    buf = io.BytesIO()
    torch.save({"format_version": FORMAT_VERSION, **payload}, buf)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as fh:
            fh.write(buf.getbuffer())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        reason = "the disk is full" if err.errno == errno.ENOSPC else (err.strerror or str(err))
        previous = (
            f"the previous checkpoint {path} is intact (epoch {payload.get('epoch', '?')} "
            f"is not in it)"
            if path.is_file()
            else "no earlier checkpoint exists"
        )
        raise CheckpointWriteError(
            err.errno or errno.EIO,
            f"cannot write checkpoint {path} ({reason}); {previous} — free space (or fix the "
            f"folder) and run the same command with resume=true to continue",
        ) from err
    return path


def load_checkpoint(path: str | os.PathLike[str], config_hash: str | None = None) -> dict[str, Any]:
    """Read a checkpoint with ``weights_only=True``; check its config hash when given.

    Raises:
        FileNotFoundError: no checkpoint at ``path``.
        CheckpointUnreadable: the file cannot be read (truncated, empty, not a checkpoint).
        UnsafeFileError: the file needs full unpickling (refused without running it).
        ValueError: the checkpoint belongs to another configuration or format.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"no checkpoint at {path}; expected one written by a run "
            f"of the same configuration with trainer.checkpoint_every set"
        )
    if path.stat().st_size == 0:
        raise CheckpointUnreadable(path, "an empty file, 0 bytes")
    try:
        state = load_weights_only(path, "a graphssl checkpoint (tensors, numbers and strings)")
    except UnsafeFileError:
        raise
    except Exception as err:  # EOFError, OSError, RuntimeError (zip), UnpicklingError, ...
        raise CheckpointUnreadable(
            path, f"{type(err).__name__}: {' '.join(str(err).split())[:160]}"
        ) from err
    if not isinstance(state, dict):
        raise CheckpointUnreadable(path, f"it holds a {type(state).__name__}, not a dict")
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
