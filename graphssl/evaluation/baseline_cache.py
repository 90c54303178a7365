"""A disk cache of the untrained-encoder baseline, shared by the jobs of a sweep.

The baseline (:meth:`graphssl.evaluation.Evaluation.baseline`) depends only on what builds,
extracts and measures the untrained encoder: the data and its splits, the method's config apart
from its training-only keys, the seed, the evaluation settings, the device, the thread count,
the library versions and graphssl's own code. Every job of a sweep over training
hyperparameters (learning rate, epochs, temperatures) recomputes the same numbers; this cache
computes them once per key.

An entry is ``<folder>/<key>.json``: plain JSON (no pickles, nothing executed on reading), written
to a temporary file in the same folder and renamed into place, so a reader sees a whole entry or
none, and two jobs writing the same key at once leave one whole entry. The key is a SHA-256 of
the canonical JSON of the identity; any change to any part of the identity gives a new key, so
an entry is never stale, only unused.

What is cached are the baseline's own metrics (``probe/<p>/baseline_*``, ``diag_baseline/*``);
``probe/<p>/gain`` depends on the trained run and ``time/baseline_seconds`` on this process,
so both are computed by each run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import platform
import tempfile
from collections.abc import Mapping
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "TRAINING_ONLY_KEYS",
    "BaselineCache",
    "code_digest",
    "data_digest",
    "untrained_model_config",
]

log = logging.getLogger(__name__)

#: version of the entry layout; a new layout never reads an old entry
FORMAT = 1

#: Keys of a method's config that its constructor only stores for training, so the untrained
#: encoder (its weights, drawn after the generators are seeded, and its forward pass) is the
#: same whatever their value. ``"*"``: every method (:class:`~graphssl.methods.base.SSLMethod`
#: keeps ``optimizer`` and ``scheduler`` as factories called by the trainer only); a class path:
#: that method alone (the temperature is read by its loss only). Every other key is part of the
#: cache key, including keys of a user's own method.
TRAINING_ONLY_KEYS: dict[str, tuple[str, ...]] = {
    "*": ("optimizer", "scheduler"),
    "graphssl.methods.grace.GRACE": ("tau",),
    "graphssl.methods.graphcl.GraphCL": ("tau",),
    "graphssl.methods.simclr.SimCLR": ("tau",),
}

#: libraries whose versions are part of the key (initialisation, kernels, solvers)
_LIBRARIES = ("torch", "torch_geometric", "numpy", "scipy", "scikit-learn", "faiss-cpu")


def untrained_model_config(model: Mapping[str, Any]) -> dict[str, Any]:
    """``model`` (a resolved method config as plain values) without the keys that cannot change
    the untrained encoder (:data:`TRAINING_ONLY_KEYS`)."""
    target = str(model.get("_target_", ""))
    dropped = set(TRAINING_ONLY_KEYS["*"]) | set(TRAINING_ONLY_KEYS.get(target, ()))
    return {str(k): v for k, v in model.items() if k not in dropped}


def _update_tensor(h: Any, name: str, t: torch.Tensor) -> None:
    t = t.detach().cpu().contiguous()
    h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
    h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")


def data_digest(datamodule: Any) -> str | None:
    """A SHA-256 of the tensors the baseline reads: the graph's tensors (features, edges,
    labels, masks), the evaluated labels and every split's indices; ``None`` when the
    datamodule has no in-memory graph to hash (then nothing is cached)."""
    try:
        data = datamodule.data
        items = sorted((str(k), v) for k, v in data.items() if isinstance(v, torch.Tensor))
        labels = datamodule.labels
        splits = list(datamodule.splits())
    except Exception as err:  # e.g. a datamodule streaming from disk
        log.info("eval.baseline_cache: no digest of %s's data (%s); not cached", datamodule, err)
        return None
    if not items:
        return None
    h = hashlib.sha256()
    for name, t in items:
        _update_tensor(h, f"data.{name}", t)
    if isinstance(labels, torch.Tensor):
        _update_tensor(h, "labels", labels)
    for i, split in enumerate(splits):
        for part in ("train", "val", "test"):
            _update_tensor(h, f"split{i}.{part}", getattr(split, part))
    return h.hexdigest()


@lru_cache(maxsize=1)
def code_digest() -> str:
    """A SHA-256 of graphssl's own source files (names and bytes): an edit to any of them
    gives new keys."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


@lru_cache(maxsize=1)
def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in _LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def environment() -> dict[str, Any]:
    """What of this process can change the baseline's numbers: the library versions,
    graphssl's code and torch's intra-op thread count (reductions split by threads)."""
    return {"versions": _versions(), "code": code_digest(), "threads": torch.get_num_threads()}


def _encode(value: float) -> float | str:
    """A metric as JSON: finite floats as numbers (``repr`` round-trips exactly), the others as
    the strings ``float()`` reads back (standard JSON has no NaN or infinity)."""
    value = float(value)
    return value if math.isfinite(value) else repr(value)


class BaselineCache:
    """Baseline metrics on disk, one JSON file per key (module docstring).

    Args:
        folder: where the entries live, e.g. ``<outputs>/cache/baseline``; created on the
            first write.
    """

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)

    @staticmethod
    def key(identity: Mapping[str, Any]) -> str:
        """The SHA-256 (hex) of ``identity``'s canonical JSON (sorted keys)."""
        body = json.dumps(
            {"format": FORMAT, **identity}, sort_keys=True, separators=(",", ":"), default=str
        )
        return hashlib.sha256(body.encode()).hexdigest()

    def path(self, key: str) -> Path:
        if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
            raise ValueError(f"a baseline cache key is 64 hex digits, got {key!r}")
        return self.folder / f"{key}.json"

    def get(self, key: str) -> dict[str, float] | None:
        """The metrics stored under ``key``, or ``None`` (no entry, or an unreadable one, which
        is logged and then replaced by the next :meth:`put`)."""
        path = self.path(key)
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as err:
            log.warning("eval.baseline_cache: ignoring unreadable entry %s (%s)", path, err)
            return None
        metrics = entry.get("metrics") if isinstance(entry, dict) else None
        if (
            entry.get("format") != FORMAT
            or entry.get("key") != key
            or not isinstance(metrics, dict)
            or not all(isinstance(v, (int, float, str)) for v in metrics.values())
        ):
            log.warning("eval.baseline_cache: ignoring malformed entry %s", path)
            return None
        try:
            return {str(k): float(v) for k, v in metrics.items()}
        except ValueError:
            log.warning("eval.baseline_cache: ignoring malformed entry %s", path)
            return None

    def put(self, key: str, metrics: Mapping[str, float], identity: Mapping[str, Any]) -> Path:
        """Store ``metrics`` under ``key`` atomically (temporary file, then rename), with the
        ``identity`` it was computed for so an entry can be read and audited by hand."""
        path = self.path(key)
        self.folder.mkdir(parents=True, exist_ok=True)
        entry = {
            "format": FORMAT,
            "key": key,
            "identity": identity,
            "metrics": {str(k): _encode(v) for k, v in sorted(metrics.items())},
        }
        text = json.dumps(entry, sort_keys=True, indent=1, default=str, allow_nan=False)
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}-", suffix=".tmp", dir=self.folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path

    def __repr__(self) -> str:
        return f"BaselineCache({str(self.folder)!r})"
