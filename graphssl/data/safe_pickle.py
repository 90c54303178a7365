"""Read raw dataset files that are pickles by format without running code from them.

Planetoid's raw files (``ind.cora.x``, ``ind.cora.graph``, ...) are Python pickles of NumPy arrays,
SciPy sparse matrices and a ``defaultdict``, and PyG reads them with ``pickle.load``, which would
call whatever a damaged or malicious file names. :func:`restricted_pickles` makes a module's
``pickle.load`` rebuild only the classes such files hold (:data:`ALLOWED`); any other name is
refused with :class:`pickle.UnpicklingError` naming it.
"""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Iterator
from types import ModuleType, SimpleNamespace
from typing import IO, Any

__all__ = ["ALLOWED", "RestrictedUnpickler", "restricted_pickles"]

_CONTAINERS = ("list", "dict", "set", "tuple")
#: (module, name) pairs a raw dataset pickle may name: data containers, never callables with
#: side effects
ALLOWED: frozenset[tuple[str, str]] = frozenset(
    {
        # Python 2 pickles (Planetoid's) name the builtins module __builtin__
        *((module, name) for module in ("builtins", "__builtin__") for name in _CONTAINERS),
        ("collections", "defaultdict"),
        ("collections", "OrderedDict"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        *(
            (module, f"{kind}_matrix")
            for kind in ("csr", "csc", "coo", "lil", "dok")
            for module in (f"scipy.sparse.{kind}", f"scipy.sparse._{kind}")
        ),
    }
)


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that rebuilds only the classes of :data:`ALLOWED`."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ALLOWED:
            raise pickle.UnpicklingError(
                f"the pickle names {module}.{name}, which is not a data container, NumPy array "
                f"or SciPy sparse matrix; graphssl reads raw dataset pickles without running "
                f"code and refuses it"
            )
        return super().find_class(module, name)


def _load(file: IO[bytes], **kwargs: Any) -> Any:
    return RestrictedUnpickler(file, **kwargs).load()


@contextlib.contextmanager
def restricted_pickles(module: ModuleType) -> Iterator[None]:
    """While the block runs, ``module``'s ``pickle.load`` is :class:`RestrictedUnpickler`'s.

    ``module`` must use ``pickle`` as a module attribute (``import pickle``; ``pickle.load``),
    as ``torch_geometric.io.planetoid`` does.
    """
    saved = module.pickle
    module.pickle = SimpleNamespace(load=_load, UnpicklingError=pickle.UnpicklingError)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        module.pickle = saved  # type: ignore[attr-defined]
