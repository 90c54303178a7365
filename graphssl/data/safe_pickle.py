"""Read raw dataset files that are pickles by format without running code from them.

Planetoid's raw files (``ind.cora.x``, ``ind.cora.graph``, ...) are Python pickles of NumPy arrays,
SciPy sparse matrices and a ``defaultdict``, and PyG reads them with ``pickle.load``, which would
call whatever a damaged or malicious file names. :func:`restricted_pickles` makes a module's
``pickle.load`` rebuild only the classes such files hold (:data:`ALLOWED`); any other name is
refused with :class:`pickle.UnpicklingError` naming it.

Other PyG dataset classes (``dataset=pyg``) unpickle their raw files through ``pickle.load``,
``numpy.load(allow_pickle=True)`` or ``pandas.read_pickle`` from inside their ``process()``;
:func:`no_code_from_raw_files` puts the same restriction on all three process-wide while such a
dataset is built.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import os
import pickle
from collections.abc import Iterator
from types import ModuleType, SimpleNamespace
from typing import IO, Any

import numpy as np

__all__ = [
    "ALLOWED",
    "RefusedGlobalError",
    "RestrictedUnpickler",
    "no_code_from_raw_files",
    "restricted_pickles",
]

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
            raise RefusedGlobalError(
                f"the pickle names {module}.{name}, which is not a data container, NumPy array "
                f"or SciPy sparse matrix; graphssl reads raw dataset pickles without running "
                f"code and refuses it",
                f"{module}.{name}",
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


# ------------------------------------------------------------------ any PyG dataset class
class RefusedGlobalError(pickle.UnpicklingError):
    """A pickle named a global outside :data:`ALLOWED`; ``name`` is ``module.name``."""

    def __init__(self, message: str, name: str) -> None:
        super().__init__(message)
        self.name = name


def _file_name(file: Any) -> str:
    if isinstance(file, (str, os.PathLike)):
        return os.fspath(file)  # type: ignore[return-value]
    name = getattr(file, "name", None) or getattr(file, "path", None)
    return str(name) if name else "a raw file"


class _CheckedNpz(np.lib.npyio.NpzFile):
    """An ``.npz`` opened without unpickling whose members name the file when refused."""

    __slots__ = ()

    def __getitem__(self, key: str) -> Any:
        try:
            return super().__getitem__(key)
        except ValueError as err:
            if "allow_pickle" not in str(err):
                raise
            raise _unsafe(
                self._graphssl_path,  # type: ignore[attr-defined]
                self._graphssl_expected,  # type: ignore[attr-defined]
                f"its member {key!r} is an array of Python objects",
            ) from None


def _unsafe(path: str, expected: str, detail: str) -> Exception:
    from graphssl.utils import UnsafeFileError

    return UnsafeFileError(path, expected, detail)


@contextlib.contextmanager
def no_code_from_raw_files(dataset: str) -> Iterator[None]:
    """While the block runs, no raw dataset file can run code when it is read.

    PyG's dataset classes read their raw files in ``process()`` with ``pickle.load`` (ZINC,
    MixHopSyntheticDataset, AQSOL, ...), ``numpy.load(..., allow_pickle=True)`` (LastFMAsia,
    Twitch, GitHub, FacebookPagePage, DeezerEurope, ...) or ``pandas.read_pickle``, any of
    which would run what a damaged or malicious file names. For the duration of the block,
    process-wide (a dataset is built before the MLflow run opens and before graphssl starts
    other threads):

    * ``pickle.load``/``pickle.loads`` rebuild only the classes of :data:`ALLOWED`;
    * ``numpy.load`` never unpickles an array of Python objects (``allow_pickle=False``), also
      for the members of an ``.npz`` read after it returned;
    * ``pandas.read_pickle`` is refused.

    ``torch.load`` is weights-only meanwhile as well
    (:func:`graphssl.data.cache.weights_only_loads`, around every dataset load). A file that
    needs more raises
    :class:`~graphssl.utils.UnsafeFileError` naming it, what was expected and how to convert it,
    before any of its code runs.

    Args:
        dataset: the dataset as the error names it (``torch_geometric.datasets.LastFMAsia``).
    """
    expected = (
        f"the raw files of {dataset} holding numbers, strings and plain containers only (NumPy "
        f"arrays, SciPy sparse matrices, lists, dicts)"
    )

    def load(file: IO[bytes], **kwargs: Any) -> Any:
        try:
            return RestrictedUnpickler(file, **kwargs).load()
        except RefusedGlobalError as err:
            raise _unsafe(_file_name(file), expected, f"its pickle names {err.name}") from None

    def loads(data: bytes, /, **kwargs: Any) -> Any:
        try:
            return RestrictedUnpickler(io.BytesIO(data), **kwargs).load()
        except RefusedGlobalError as err:
            raise _unsafe("a raw pickle", expected, f"it names {err.name}") from None

    np_load = np.load
    signature = inspect.signature(np_load)

    def numpy_load(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.arguments["allow_pickle"] = False
        file = bound.arguments["file"]
        try:
            result = np_load(*bound.args, **bound.kwargs)
        except ValueError as err:
            if "allow_pickle" not in str(err):
                raise
            raise _unsafe(_file_name(file), expected, "an array of Python objects") from None
        if isinstance(result, np.lib.npyio.NpzFile):
            result.__class__ = _CheckedNpz
            result._graphssl_path = _file_name(file)  # type: ignore[attr-defined]
            result._graphssl_expected = expected  # type: ignore[attr-defined]
        return result

    def read_pickle(file: Any, *args: Any, **kwargs: Any) -> Any:
        raise _unsafe(_file_name(file), expected, "pandas.read_pickle unpickles any object")

    try:
        import pandas
    except ImportError:  # pragma: no cover - pandas comes with MLflow
        pandas = None
    saved = (pickle.load, pickle.loads, np.load, getattr(pandas, "read_pickle", None))
    pickle.load, pickle.loads = load, loads  # type: ignore[assignment]
    np.load = numpy_load
    if pandas is not None:
        pandas.read_pickle = read_pickle
    try:
        yield
    finally:
        pickle.load, pickle.loads, np.load = saved[0], saved[1], saved[2]  # type: ignore[assignment]
        if pandas is not None:
            pandas.read_pickle = saved[3]
