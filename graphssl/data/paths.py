"""Where datasets live, and how read-only sources become a writable PyG root.

graphssl never downloads at run time: a DataModule names the raw files it needs, and a missing
file fails at once with the dataset, the folder searched and the files expected (design.md §3).
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path

DATA_ENV = "GRAPHSSL_DATA_DIR"


class DatasetNotFoundError(FileNotFoundError):
    """Raw files of a dataset are missing and cannot be downloaded here."""


class DatasetCorruptError(ValueError):
    """Raw files exist but cannot be read."""


def default_data_dir() -> Path:
    """``$GRAPHSSL_DATA_DIR`` if set, else ``data/`` in the current working directory."""
    env = os.environ.get(DATA_ENV)
    return Path(env) if env else Path.cwd() / "data"


def require_raw_files(dataset: str, folder: Path, files: Sequence[str]) -> None:
    """Raise :class:`DatasetNotFoundError` unless every file in ``files`` exists in ``folder``."""
    missing = [f for f in files if not (folder / f).is_file()]
    if missing:
        shown = ", ".join(missing[:8]) + (" ..." if len(missing) > 8 else "")
        raise DatasetNotFoundError(
            f"dataset {dataset!r}: raw files not found in {folder} (missing {len(missing)} of "
            f"{len(files)}: {shown}). graphssl does not download data at run time: put the "
            f"files there, or point {DATA_ENV} (config key paths.data_dir) at a folder that "
            f"has them (see README, 'Data')."
        )


def _writable(folder: Path) -> bool:
    """Writable by us *and* meant to be: root ignores permissions, so the owner's write bit
    is checked too (CI's shared/ copy has no write bits and must stay untouched)."""
    return os.access(folder, os.W_OK) and bool(folder.stat().st_mode & stat.S_IWUSR)


def writable_root(source: Path, cache_dir: Path) -> Path:
    """A PyG root holding ``source``'s files that PyG may write ``processed/`` into.

    A writable ``source`` is used in place. A read-only one (``../shared/data`` in CI) is copied
    once into ``cache_dir/<source name>``; later calls reuse the copy when its raw files have the
    same sizes. ``processed/`` folders are never copied: PyG rebuilds them from the raw files.
    """
    if _writable(source) and all(_writable(p) for p in source.rglob("*") if p.is_dir()):
        return source
    target = cache_dir / source.name
    for src in source.rglob("*"):
        if src.is_file() and "processed" not in src.relative_to(source).parts:
            dst = target / src.relative_to(source)
            if not dst.is_file() or dst.stat().st_size != src.stat().st_size:
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dst)
    return target
