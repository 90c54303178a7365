"""Small helpers shared by the entry points: seeding and run metadata."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import random
import subprocess

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and CUDA) from one integer."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def git_commit(cwd: str | os.PathLike[str] | None = None) -> str:
    """The current git commit of ``cwd`` (with ``-dirty`` when modified), or ``"unknown"``."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def package_versions() -> dict[str, str]:
    """Versions of Python and of the packages a result depends on."""
    out = {"python": platform.python_version()}
    for name in (
        "graphssl",
        "torch",
        "torch-geometric",
        "hydra-core",
        "mlflow",
        "numpy",
        "scikit-learn",
        "timm",
        "gensim",
    ):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def tensor_hash(t: torch.Tensor) -> str:
    """SHA-256 of a tensor's bytes (dtype and shape included)."""
    h = hashlib.sha256()
    h.update(f"{t.dtype}:{tuple(t.shape)}".encode())
    h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()
