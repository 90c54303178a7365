"""Where the installed package keeps its configuration, and which distribution installed it.

The import name is ``graphssl``; the distribution on PyPI is ``graphssl-lab`` (the name
``graphssl`` belongs to another project). Both helpers import nothing heavy, so ``--version``
answers before PyTorch is imported.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

__all__ = ["DISTRIBUTION", "config_dir", "distribution_version"]

#: the distribution name graphssl is published and installed under
DISTRIBUTION = "graphssl-lab"


def config_dir() -> Path:
    """The folder of ``train.yaml`` and the config groups (Hydra's ``config_path``):
    ``graphssl/conf`` inside an installed wheel (``setup.py`` copies ``conf/`` there), else
    ``conf/`` beside the package in a source checkout (editable installs included)."""
    packaged = Path(__file__).resolve().parent / "conf"
    if (packaged / "train.yaml").is_file():
        return packaged
    return Path(__file__).resolve().parent.parent / "conf"


def distribution_version() -> str:
    """The installed version of the distribution that provides ``graphssl`` (``graphssl-lab``;
    an environment installed before the rename has ``graphssl``), ``0+unknown`` when none is."""
    found = importlib.metadata.packages_distributions().get("graphssl") or []
    for name in dict.fromkeys([*found, DISTRIBUTION, "graphssl"]):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "0+unknown"
