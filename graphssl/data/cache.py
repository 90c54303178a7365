"""graphssl's cache of PyG roots: processed files keyed by the content of the raw files.

PyG writes ``processed/`` beside ``raw/`` and trusts it on every later load. Two failures follow
from that: a ``processed/`` folder left by an earlier run hides a raw file damaged since (the
damage goes unnoticed), and a processed file that a killed process left half-written (0 bytes,
truncated) breaks every later load with an error that blames the intact raw files. So PyG never
processes in the user's data folder: :func:`processed_root` copies the raw files into
``<cache_dir>/<source name>-<digest of the raw files>/`` and checks the processed files there
before PyG reads them; :func:`load_with_processed_repair` serialises loads of one cache entry
across processes and drops the processed files once when a load fails after reading them.

Processed files are read without running code: while a load runs, every ``torch.load`` (PyG's
own, including its fall-back to full unpickling and its ``pre_transform.pt`` check, and OGB's)
is forced to ``weights_only=True`` (``TORCH_FORCE_WEIGHTS_ONLY_LOAD``), so a processed file
holding other Python objects fails to load and is rebuilt from the raw files instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import warnings
import zipfile
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import TypeVar

from filelock import FileLock

T = TypeVar("T")

#: hex digits of the raw-file digest in a cache entry's name.
DIGEST_CHARS = 16
#: seconds to wait for another process loading the same cache entry.
LOCK_TIMEOUT = 900.0

_LOCKS: dict[str, FileLock] = {}
# the locks and roots taken while one load_with_processed_repair call runs (None outside one)
_SCOPE: ContextVar[tuple[contextlib.ExitStack, list[Path]] | None] = ContextVar(
    "graphssl_data_cache_scope", default=None
)


def _lock(path: str) -> FileLock:
    """One reentrant lock object per path in this process: a second ``FileLock`` on the same
    file would wait for the first one forever."""
    if path not in _LOCKS:
        _LOCKS[path] = FileLock(path, timeout=LOCK_TIMEOUT)
    return _LOCKS[path]


def _raw_files(source: Path) -> Iterator[Path]:
    """Files of ``source`` that are inputs: everything but ``processed/`` and hidden entries."""
    for path in source.rglob("*"):
        parts = path.relative_to(source).parts
        if "processed" in parts or any(p.startswith(".") for p in parts):
            continue
        if path.is_file():
            yield path


def raw_digest(source: Path) -> str:
    """A digest of the names and bytes of ``source``'s raw files (``processed/`` excluded)."""
    h = hashlib.sha256()
    for path in sorted(_raw_files(source)):
        h.update(path.relative_to(source).as_posix().encode() + b"\0")
        with open(path, "rb") as f:
            h.update(hashlib.file_digest(f, "sha256").digest())
    return h.hexdigest()[:DIGEST_CHARS]


def _intact(path: Path) -> bool:
    """Whether a ``.pt`` file is a complete torch archive (every member's CRC checks out)."""
    try:
        if path.stat().st_size == 0:
            return False
        with zipfile.ZipFile(path) as archive:
            return archive.testzip() is None
    except (OSError, EOFError, zipfile.BadZipFile):
        return False


def _drop(folder: Path, reason: str) -> None:
    warnings.warn(
        f"dataset cache: {reason}; removed {folder} and processing the raw files again",
        stacklevel=3,
    )
    shutil.rmtree(folder, ignore_errors=True)


def repair_processed(root: Path) -> list[Path]:
    """Remove every ``processed/`` folder under ``root`` holding an unreadable ``.pt`` file.

    Returns:
        The folders removed (PyG re-processes them from the raw files on the next load).
    """
    removed = []
    for folder in sorted(p for p in root.rglob("processed") if p.is_dir()):
        for path in sorted(folder.glob("*.pt")):
            if not _intact(path):
                size = path.stat().st_size if path.exists() else 0
                _drop(
                    folder,
                    f"{path} is unreadable ({size} bytes, not a complete torch archive: a process "
                    f"was probably killed while writing it)",
                )
                removed.append(folder)
                break
    return removed


def _copy_raw(source: Path, base: Path) -> None:
    """Copy ``source``'s raw files to ``base/<source name>``, atomically (temp folder + rename)."""
    for stale in base.parent.glob(f".{base.name}.tmp-*"):  # left by a killed copy
        shutil.rmtree(stale, ignore_errors=True)
    tmp = base.parent / f".{base.name}.tmp-{os.getpid()}"
    for src in _raw_files(source):
        dst = tmp / source.name / src.relative_to(source)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
    (tmp / source.name).mkdir(parents=True, exist_ok=True)
    os.replace(tmp, base)


def processed_root(source: Path, cache_dir: Path) -> Path:
    """A PyG root holding ``source``'s raw files, whose ``processed/`` files PyG may trust.

    The root is ``<cache_dir>/<name>-<digest>/<name>`` with ``<digest>`` from
    :func:`raw_digest`: changed raw files get a fresh entry, so no processed file ever outlives
    the raw files it came from, and ``processed/`` folders in ``source`` are never read. Damaged
    processed files in the entry are removed (with a warning naming them) before PyG reads them.

    Args:
        source: the dataset folder in the user's data folder (read-only is fine).
        cache_dir: graphssl's writable cache folder.
    """
    base = cache_dir / f"{source.name}-{raw_digest(source)}"
    base.parent.mkdir(parents=True, exist_ok=True)
    lock = _lock(f"{base}.lock")
    scope = _SCOPE.get()
    if scope is not None:  # held until the whole load (PyG's processing included) is done
        scope[0].enter_context(lock)
        scope[1].append(base)
    with lock:
        if not base.is_dir():
            _copy_raw(source, base)
        repair_processed(base)
    return base / source.name


#: torch reads these on every ``torch.load``: the first forces ``weights_only=True`` even where a
#: caller passes ``False``; the second (which would do the opposite) must be unset meanwhile
_FORCE_SAFE, _FORCE_UNSAFE = "TORCH_FORCE_WEIGHTS_ONLY_LOAD", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"


@contextlib.contextmanager
def weights_only_loads() -> Iterator[None]:
    """Force every ``torch.load`` in this process to ``weights_only=True`` while the block
    runs (the environment is restored afterwards)."""
    saved = {k: os.environ.get(k) for k in (_FORCE_SAFE, _FORCE_UNSAFE)}
    os.environ[_FORCE_SAFE] = "1"
    os.environ.pop(_FORCE_UNSAFE, None)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def load_with_processed_repair(load: Callable[[], T]) -> T:
    """Run ``load`` (which calls :func:`processed_root`) and return its result.

    Every cache entry ``load`` uses stays locked until it returns, so concurrent runs never read
    a processed file another one is writing. If ``load`` fails and an entry it used holds
    processed files, they are removed (with a warning) and ``load`` runs once more: an error that
    remains comes from the raw files. Every ``torch.load`` meanwhile is weights-only
    (:func:`weights_only_loads`).
    """
    with contextlib.ExitStack() as stack, weights_only_loads():
        bases: list[Path] = []
        token = _SCOPE.set((stack, bases))
        try:
            try:
                return load()
            except Exception as err:
                stale = [
                    p
                    for base in bases
                    for p in base.rglob("processed")
                    if p.is_dir() and any(p.iterdir())
                ]
                if not stale:
                    raise
                for folder in stale:
                    _drop(folder, f"loading failed after reading {folder} ({type(err).__name__})")
                return load()
        finally:
            _SCOPE.reset(token)
