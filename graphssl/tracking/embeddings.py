"""The ``embeddings.pt`` artifact: the one place that writes and reads its format.

A graphssl run stores its final embeddings as ``embeddings.pt``, a ``torch.save`` of
``dict(embeddings [N, D], ids [N], labels [N] | None, sha256)``, and tags the run with
``embeddings.sha256`` and ``embeddings.shape``. The evaluate, compare and stability tasks read it
back (from a run or from a file with the same payload), checked against its content hash.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from graphssl.tracking import artifacts
from graphssl.utils import tensor_hash

if TYPE_CHECKING:
    from graphssl.tracking.artifacts import RunRecord
    from graphssl.tracking.run import RunTracker
    from graphssl.tracking.store import TrackingStore

__all__ = [
    "EMBEDDINGS_ARTIFACT",
    "HASH_TAG",
    "Embeddings",
    "download_embeddings",
    "fetch_embeddings",
    "load_payload",
    "log_embeddings",
    "read_embeddings",
]

EMBEDDINGS_ARTIFACT = "embeddings.pt"
#: run tag holding the content hash of the stored embeddings
HASH_TAG = "embeddings.sha256"


@dataclass(frozen=True)
class Embeddings:
    """A read ``embeddings.pt`` payload.

    Attributes:
        embeddings: ``[N, D]`` embeddings.
        ids: ``[N]`` row ids (node / graph / image index; ``arange(N)`` when absent).
        labels: ``[N]`` labels the run was evaluated with, or ``None``.
        sha256: the content hash stored with them (``""`` when absent).
    """

    embeddings: Tensor
    ids: Tensor
    labels: Tensor | None
    sha256: str


def log_embeddings(tracker: RunTracker, z: Tensor, y: Tensor | None) -> None:
    """Store the final embeddings with their row ids and a content hash (``embeddings.pt``)."""
    payload = {
        "embeddings": z.cpu(),
        "ids": torch.arange(z.shape[0]),
        "labels": None if y is None else y.cpu(),
        "sha256": tensor_hash(z),
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / EMBEDDINGS_ARTIFACT
        torch.save(payload, path)
        tracker.log_artifact(path)
    tracker.set_tags(
        {HASH_TAG: payload["sha256"], "embeddings.shape": f"{z.shape[0]}x{z.shape[1]}"}
    )


def read_embeddings(path: str | Path, *, source: str | None = None) -> Embeddings:
    """Read an ``embeddings.pt`` payload (or a bare ``[N, D]`` tensor).

    Raises:
        ValueError: not a graphssl payload, ids of the wrong length or with duplicates, or a
            content hash that does not match the embeddings.
    """
    where = source or str(path)
    payload = _load(path, where)
    if isinstance(payload, Tensor):
        payload = {"embeddings": payload}
    if not isinstance(payload, Mapping) or "embeddings" not in payload:
        raise ValueError(
            f"{where}: expected a dict with 'embeddings' [N, D] (and 'ids' [N]), as graphssl "
            f"runs log in {EMBEDDINGS_ARTIFACT}; got {type(payload).__name__}"
        )
    z = payload["embeddings"]
    if not isinstance(z, Tensor) or z.ndim != 2:
        shape = tuple(z.shape) if isinstance(z, Tensor) else type(z).__name__
        raise ValueError(f"{where}: 'embeddings' must be a 2-D tensor [N, D], got {shape}")
    expected = payload.get("sha256")
    if expected and tensor_hash(z) != expected:
        raise ValueError(f"{where}: embeddings do not match their sha256 (corrupted download?)")
    ids = _integer_ids(payload.get("ids"), z.shape[0], where)
    if ids.shape[0] != z.shape[0]:
        raise ValueError(
            f"{where}: {ids.shape[0]} ids for {z.shape[0]} embedding rows; expected one id per row"
        )
    if torch.unique(ids).numel() != ids.numel():
        raise ValueError(
            f"{where}: ids contain {ids.numel() - torch.unique(ids).numel()} "
            "duplicates; expected one row per input"
        )
    labels = payload.get("labels")
    if labels is not None and not isinstance(labels, Tensor):
        try:
            labels = torch.as_tensor(labels)
        except (TypeError, ValueError, RuntimeError) as err:
            raise ValueError(
                f"{where}: 'labels' must be a tensor or a list of numbers, one per row, got "
                f"{type(labels).__name__} ({err})"
            ) from err
    return Embeddings(z, ids, labels, str(expected or ""))


#: what a readable embeddings file holds, for error messages
_EXPECTED = (
    f"expected a torch.save file of dict(embeddings [N, D] float tensor, ids [N] integer "
    f"tensor, labels [N] | None, sha256), as graphssl runs log in {EMBEDDINGS_ARTIFACT}"
)


def _load(path: str | Path, where: str) -> object:
    """``torch.load(path, weights_only=True)``; an unreadable file raises one ``ValueError``
    naming it (truncated, empty, not a torch file, or holding objects other than tensors)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{where}: no embeddings file at {path}; {_EXPECTED}")
    size = path.stat().st_size
    if size == 0:
        raise ValueError(f"{where}: the embeddings file {path} is empty (0 bytes); {_EXPECTED}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # EOFError, UnpicklingError, UnicodeDecodeError, RuntimeError, ...
        first = " ".join(str(err).split())[:200]
        raise ValueError(
            f"{where}: the embeddings file {path} ({size} bytes) cannot be read as a torch "
            f"payload ({type(err).__name__}: {first}) — truncated, or not written by "
            f"torch.save; {_EXPECTED}"
        ) from err


def _integer_ids(ids: object, rows: int, where: str) -> Tensor:
    """The ``ids`` entry as a ``[N]`` long tensor (``arange(N)`` when absent)."""
    if ids is None:
        return torch.arange(rows)
    try:
        t = torch.as_tensor(ids)
    except (TypeError, ValueError, RuntimeError) as err:
        kind = type(ids).__name__
        if isinstance(ids, list | tuple) and ids:
            kind += f" of {type(ids[0]).__name__}"
        raise ValueError(
            f"{where}: 'ids' must be integers, one per row, got {kind}; {_EXPECTED}"
        ) from err
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise ValueError(f"{where}: 'ids' must be integers, one per row, got dtype {t.dtype}")
    return t.reshape(-1).long()


def load_payload(path: str | Path, *, source: str | None = None) -> tuple[Tensor, Tensor]:
    """``(embeddings [N, D], ids [N])`` of an ``embeddings.pt`` payload
    (:func:`read_embeddings`)."""
    emb = read_embeddings(path, source=source)
    return emb.embeddings, emb.ids


def download_embeddings(store: TrackingStore, run: RunRecord, dest: str | Path) -> Path:
    """Download the run's ``embeddings.pt`` artifact into ``dest``; returns the local path.

    Raises:
        FileNotFoundError: the run has no ``embeddings.pt`` (e.g. ``logger.log_embeddings=false``
            or a failed run); the message names the run and what it does have.
    """
    names = artifacts.artifact_names(store, run)
    if EMBEDDINGS_ARTIFACT not in names:
        raise FileNotFoundError(
            f"run {run.run_name or '?'!r} ({run.run_id}, status {run.status}) has no "
            f"{EMBEDDINGS_ARTIFACT} artifact (it has {sorted(names)}); expected the final "
            "embeddings a graphssl run logs when logger.log_embeddings=true"
        )
    return artifacts.download_artifact(store, run, EMBEDDINGS_ARTIFACT, dest)


def fetch_embeddings(store: TrackingStore, run: RunRecord) -> Embeddings:
    """Download and read the run's ``embeddings.pt`` (:func:`download_embeddings`)."""
    with tempfile.TemporaryDirectory(prefix="graphssl-embeddings-") as tmp:
        return read_embeddings(download_embeddings(store, run, tmp), source=f"run {run.run_id}")
