"""Names kept for one release after a rename, each use with a :class:`DeprecationWarning`."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = ["old_names", "renamed"]


def renamed(old_module: str, name: str, module: ModuleType, classes: dict[str, str]) -> Any:
    """``module``'s attribute for ``name`` looked up in ``old_module`` (a renamed module, or a
    module whose class was renamed): warns, then returns the current object.

    Raises:
        AttributeError: neither the new module nor the renamed classes have ``name``.
    """
    new = classes.get(name, name)
    if name.startswith("__") or not hasattr(module, new):
        raise AttributeError(f"module {old_module!r} has no attribute {name!r}")
    where = f"{module.__name__}.{new}"
    if f"{old_module}.{name}" != where:
        warnings.warn(
            f"{old_module}.{name} is deprecated and will be removed in the next release; use "
            f"{where}",
            DeprecationWarning,
            stacklevel=3,
        )
    return getattr(module, new)


def old_names(module_name: str, classes: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``module_name`` that answers the old class names in
    ``classes`` (``old -> new``), each use with a :class:`DeprecationWarning`."""

    def __getattr__(name: str) -> Any:
        if name not in classes:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        return renamed(module_name, name, sys.modules[module_name], classes)

    return __getattr__
