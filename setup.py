"""Build hook: the wheel carries the configuration tree ``conf/`` as ``graphssl/conf``.

Hydra reads configs from a folder (``graphssl.package.config_dir``); an installed package has no
repository checkout beside it, so ``conf/`` goes inside the package when it is built. Everything
else about the build is declared in ``pyproject.toml``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildWithConfigs(build_py):
    """``build_py`` that also copies every YAML file of ``conf/`` to ``graphssl/conf/``."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads conf/ where it is
            return
        target = Path(self.build_lib) / "graphssl" / "conf"
        for src in sorted((ROOT / "conf").rglob("*.yaml")):
            dst = target / src.relative_to(ROOT / "conf")
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)


setup(cmdclass={"build_py": BuildWithConfigs})
