"""Names kept for one release after a rename, each use with a :class:`DeprecationWarning`."""

from __future__ import annotations

import warnings
from types import ModuleType
from typing import Any

__all__ = ["renamed"]


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
