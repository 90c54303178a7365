"""Bring-your-own-graph DataModules: any PyG dataset class by name, or a graph in a file.

* :class:`PyGDataModule` (``dataset=pyg``) builds ``torch_geometric.datasets.<cls>`` with
  keyword arguments from the config, under ``<data_dir>/<cls>``; with downloads off, a
  missing raw file fails with the files the class expects.
* :class:`GraphFileDataModule` (``dataset=graph_file``) reads one graph from a file: a PyG
  ``Data`` (or a dict of tensors) saved with ``torch.save``, or an ``.npz`` with
  ``edge_index`` ``[2, E]``, ``x`` ``[N, F]`` and optionally ``y`` ``[N]`` and
  ``train_mask``/``val_mask``/``test_mask`` (``[N]`` or ``[N, K]`` for ``K`` splits).

Both use the dataset's own masks when it has them (``split="public"``) and a seeded random
split otherwise.
"""

from __future__ import annotations

import copy
import inspect
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected as _to_undirected

from graphssl.data.base import Split
from graphssl.data.cache import processed_root
from graphssl.data.node import NodeDataModule
from graphssl.data.paths import (
    DatasetNotFoundError,
    GraphFileError,
    inside_root,
    require_raw_files,
)
from graphssl.data.safe_pickle import no_code_from_raw_files
from graphssl.utils import UnsafeFileError, allowed_globals, load_weights_only

__all__ = ["GraphFileDataModule", "GraphFileError", "PyGDataModule", "load_graph_file"]

_MASKS = ("train_mask", "val_mask", "test_mask")


def _pyg_class(name: str) -> type:
    import torch_geometric.datasets as datasets

    cls = getattr(datasets, name, None)
    if not isinstance(cls, type):
        choices = sorted(n for n in datasets.__all__ if isinstance(getattr(datasets, n), type))
        raise ValueError(
            f"torch_geometric.datasets has no dataset class {name!r}; expected one of "
            f"{', '.join(choices[:40])}, ..."
        )
    return cls


class PyGDataModule(NodeDataModule):
    """Any node-level dataset of ``torch_geometric.datasets``, by class name.

    The dataset is built as ``cls(root=<copy of data_dir/cls>, **kwargs)`` (bundled datasets
    without a ``root``, such as ``KarateClub``, as ``cls(**kwargs)``) and its one graph is
    used. The root is a copy in ``cache_dir`` of ``<data_dir>/<cls>``'s raw files, so PyG's
    ``processed/`` files and downloads never land in the data folder.
    ``dataset=pyg dataset.cls=Amazon +dataset.kwargs.name=Photo`` loads Amazon Photo (its raw
    file read from ``<data_dir>/Amazon/Photo/raw``).

    Args:
        cls: the class name in ``torch_geometric.datasets`` (e.g. ``"Amazon"``, ``"WikiCS"``).
        kwargs: keyword arguments of the class besides ``root`` (default: none).
        name: dataset name in logs (default: ``kwargs["name"]`` or ``cls``).
        to_undirected: add the reverse of every edge (default: ``False``).
        **node_kwargs: :class:`~graphssl.data.node.NodeDataModule` arguments.
    """

    def __init__(
        self,
        cls: str,
        kwargs: dict[str, Any] | None = None,
        name: str | None = None,
        to_undirected: bool = False,
        **node_kwargs: Any,
    ) -> None:
        self.cls_name = str(cls)
        self.kwargs = dict(kwargs or {})
        if "root" in self.kwargs:
            raise ValueError(
                "dataset.kwargs.root is set by graphssl (<paths.data_dir>/<cls>); move the "
                "files there or set paths.data_dir instead"
            )
        label = name or str(self.kwargs.get("name", self.cls_name))
        super().__init__(label, **node_kwargs)
        self.to_undirected = bool(to_undirected)

    def _check_names(self) -> None:
        """PyG joins the class name and string keywords to its root (Planetoid:
        ``<root>/<name>/raw``) and creates those folders: each must stay inside the data and
        cache folders, checked before any folder exists."""
        for root in (self.data_dir, self.cache_dir):
            inside_root(root, self.cls_name, "dataset.cls")
            for key, value in self.kwargs.items():
                if isinstance(value, str):
                    inside_root(root / self.cls_name, value, f"dataset.kwargs.{key}")

    def load(self) -> Data:
        self._check_names()
        cls = _pyg_class(self.cls_name)
        takes_root = "root" in inspect.signature(cls).parameters
        # the class's process() may unpickle its raw files: data classes only, for any class
        guard = no_code_from_raw_files(f"torch_geometric.datasets.{self.cls_name}")
        if not takes_root:
            with guard:
                dataset = cls(**self.kwargs)
        else:
            # The data folder is only read: PyG gets a cached copy of <data_dir>/<cls> (an empty
            # one when that folder is missing), keyed by the raw files' digest, and writes its
            # processed/ files, and any download, there.
            source = self.data_dir / self.cls_name
            root = processed_root(source, self.cache_dir)
            if self.downloads.enabled:
                self.downloads.expect(
                    source, f"the URL of torch_geometric.datasets.{self.cls_name}"
                )
                klass = cls
            else:
                klass = _refusing_download(cls, self.name, root, source)
            with guard:
                dataset = klass(root=str(root), **self.kwargs)
        if len(dataset) != 1:
            raise ValueError(
                f"dataset {self.name!r} ({self.cls_name}) has {len(dataset)} graphs; "
                f"dataset=pyg loads node-level datasets of one graph"
            )
        data = dataset[0]
        if self.to_undirected:
            data.edge_index = _to_undirected(data.edge_index, num_nodes=data.num_nodes)
        return data


def _refusing_download(cls: type, dataset: str, root: Path, shown: Path) -> type:
    """A subclass of PyG dataset ``cls`` whose ``download`` fails with the raw files it misses
    (relative to ``root``, reported under ``shown``) instead of fetching them."""

    def download(self: Any) -> None:
        files = [str(Path(p).relative_to(root)) for p in self.raw_paths]
        require_raw_files(dataset, shown, files)

    return type(cls.__name__, (cls,), {"download": download, "__module__": cls.__module__})


# ---------------------------------------------------------------------------- graph files
#: what a graph file holds, for error messages
_EXPECTED = (
    "expected a .npz (numpy.savez) or a .pt (torch.save of a torch_geometric Data or of a dict "
    "of tensors) with edge_index [2, E] integer node ids, x [N, F] finite features, and "
    "optionally y [N] integer labels >= 0 and train_mask/val_mask/test_mask [N] or [N, K]"
)
#: the last graph read by :func:`load_graph_file`: (file, mtime, size) and the checked graph,
#: so the config check before a run and the run's datamodule read a large file once (the next
#: read of the same unchanged file takes it out of the cache)
_LAST: tuple[tuple[str, int, int], Data] | None = None


def _array(value: Any, key: str, path: Path) -> np.ndarray | Tensor:
    """``value`` as a tensor, or as a numpy array when torch cannot hold its dtype (strings)."""
    if isinstance(value, Tensor):
        return value.detach().cpu()
    arr = np.asarray(value)
    if arr.dtype.kind in "biuf":
        return torch.as_tensor(arr)
    if arr.dtype.kind in "USO":
        return arr
    raise GraphFileError(
        f"graph file {path}: {key!r} is not a numeric array ({type(value).__name__} of dtype "
        f"{arr.dtype}); {_EXPECTED}"
    )


def _numeric(t: np.ndarray | Tensor, key: str, path: Path, expected: str) -> Tensor:
    if isinstance(t, Tensor):
        return t
    sample = ", ".join(repr(v) for v in t.reshape(-1)[:3].tolist())
    raise GraphFileError(
        f"graph file {path}: {key!r} holds {t.dtype.name} values ({sample}, ...); expected "
        f"{expected}"
    )


def _integral(t: Tensor, key: str, path: Path, expected: str) -> Tensor:
    """``t`` as int64, refusing NaN/inf and fractional values (naming the first one) instead of
    truncating them."""
    if t.dtype == torch.bool:
        raise GraphFileError(f"graph file {path}: {key!r} is boolean; expected {expected}")
    if t.is_floating_point():
        bad = ~torch.isfinite(t) | (t != t.round())
        if bool(bad.any()):
            where = bad.nonzero()[0].tolist()
            at = ", ".join(map(str, where))
            raise GraphFileError(
                f"graph file {path}: {key}[{at}] is {t[tuple(where)].item()!r} "
                f"({int(bad.sum())} non-integer value(s) of {t.numel()}); expected {expected}, "
                f"not rounded or truncated — fix the file"
            )
    return t.long()


def _read_fields(path: Path) -> dict[str, Any]:
    """The arrays of a graph file, read without running code from it."""
    if path.suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as f:
                return {k: f[k] for k in f.files}
        except ValueError as err:
            if "allow_pickle" not in str(err):
                raise GraphFileError(
                    f"graph file {path} cannot be read ({err}); {_EXPECTED}"
                ) from err
            raise GraphFileError(
                f"graph file {path} holds an array of Python objects (dtype object), which "
                f"numpy can only load by unpickling it, and unpickling runs code named by the "
                f"file, so graphssl never does it; {_EXPECTED}. Save numeric arrays instead "
                f"(e.g. numpy.savez(path, x=x.astype('float32'), ...))"
            ) from None
        except (OSError, EOFError, zipfile.BadZipFile) as err:
            raise GraphFileError(
                f"graph file {path} is not a readable .npz ({type(err).__name__}: {err}); "
                f"{_EXPECTED}"
            ) from err
    if path.suffix in (".pt", ".pth"):
        obj = _torch_load(path)
        if isinstance(obj, Data):
            return {k: v for k, v in obj.to_dict().items() if v is not None}
        if not isinstance(obj, dict):
            raise GraphFileError(
                f"graph file {path} holds a {type(obj).__name__}; expected a torch_geometric "
                f"Data or a dict of tensors (edge_index, x, ...)"
            )
        return dict(obj)
    raise GraphFileError(f"graph file {path} must end in .pt, .pth or .npz, got {path.suffix!r}")


def load_graph_file(path: str | Path) -> Data:
    """Read one graph from ``path`` (``.pt``/``.pth``: ``torch.save`` of a ``Data`` or of a
    dict of tensors, read with ``weights_only=True``; ``.npz``: arrays ``edge_index``, ``x``,
    optional ``y`` and masks) and check its values.

    Raises:
        DatasetNotFoundError: no file at ``path``.
        UnsafeFileError: a ``.pt`` that only full unpickling could read (refused, not loaded).
        GraphFileError: the file cannot be read or holds values graphssl cannot use; the
            message names the file, the array, the offending value and what was expected.
    """
    global _LAST
    path = Path(path)
    if not path.is_file():
        raise DatasetNotFoundError(
            f"graph file {path} not found; set dataset.path to a .pt (torch.save of a PyG "
            f"Data) or .npz (edge_index, x, optional y and train_mask/val_mask/test_mask) file"
        )
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    if _LAST is not None and _LAST[0] == key:
        data, _LAST = _LAST[1], None  # read twice at most: the cache holds no graph after that
        return copy.copy(data)
    fields = _read_fields(path)
    for name in ("edge_index", "x"):
        if fields.get(name) is None:
            raise GraphFileError(
                f"graph file {path} has no {name!r} array; found {sorted(fields)}; {_EXPECTED}"
            )
    data = _checked({k: _array(v, k, path) for k, v in fields.items() if v is not None}, path)
    _LAST = (key, data)
    return copy.copy(data)


def _torch_load(path: Path) -> Any:
    """``torch.load(weights_only=True)`` with PyG's ``Data`` classes allowed; a file that would
    need full unpickling is refused (:class:`~graphssl.utils.UnsafeFileError`)."""
    from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
    from torch_geometric.data.storage import EdgeStorage, GlobalStorage, NodeStorage

    safe = [Data, DataEdgeAttr, DataTensorAttr, GlobalStorage, NodeStorage, EdgeStorage]
    if path.stat().st_size == 0:
        raise GraphFileError(f"graph file {path} is empty (0 bytes); {_EXPECTED}")
    try:
        with allowed_globals(safe):
            return load_weights_only(path, "a torch_geometric Data or a dict of tensors")
    except UnsafeFileError:
        raise
    except Exception as err:  # truncated, not a torch file: EOFError, RuntimeError, KeyError
        first = " ".join(str(err).split())[:160]
        raise GraphFileError(
            f"graph file {path} cannot be read as a torch file ({type(err).__name__}: {first}); "
            f"{_EXPECTED}"
        ) from err


def _checked(fields: dict[str, np.ndarray | Tensor], path: Path) -> Data:
    """Check and cast a graph file's arrays, naming the file, the array and the value."""
    x = _numeric(fields["x"], "x", path, "x [N, F] numeric node features")
    if x.ndim == 1:
        x = x.view(-1, 1)
    if x.ndim != 2:
        raise GraphFileError(
            f"graph file {path}: x has shape {tuple(x.shape)}; expected [N, F] node features"
        )
    n, f = x.shape
    if n == 0 or f == 0:
        raise GraphFileError(
            f"graph file {path}: x has shape {tuple(x.shape)}; expected at least one node (row) "
            f"and one feature column"
        )
    x = x.float()
    bad_rows = (~torch.isfinite(x)).any(dim=1)
    if bool(bad_rows.any()):
        row = int(bad_rows.nonzero()[0])
        col = int((~torch.isfinite(x[row])).nonzero()[0])
        raise GraphFileError(
            f"graph file {path}: x row {row} holds {x[row, col].item()} (column {col}); "
            f"{int(bad_rows.sum())} of {n} rows hold NaN or inf; expected finite features — "
            f"impute or drop those values"
        )

    raw_ei = _numeric(fields["edge_index"], "edge_index", path, "integer node ids")
    if raw_ei.ndim == 2 and raw_ei.size(0) != 2 and raw_ei.size(1) == 2:
        raw_ei = raw_ei.t()
    if raw_ei.ndim != 2 or raw_ei.size(0) != 2:
        raise GraphFileError(
            f"graph file {path}: edge_index must have shape [2, E] (source and target node "
            f"ids), got {tuple(raw_ei.shape)}"
        )
    if raw_ei.size(1) == 0:
        raise GraphFileError(
            f"graph file {path}: edge_index has no edges (shape {tuple(raw_ei.shape)}); expected "
            f"at least one edge"
        )
    ei = _integral(raw_ei, "edge_index", path, "integer node ids in [0, N)")
    outside = (ei < 0) | (ei >= n)
    if bool(outside.any()):
        row, col = outside.nonzero()[0].tolist()
        raise GraphFileError(
            f"graph file {path}: edge_index[{row}, {col}] refers to node {int(ei[row, col])} "
            f"but x has {n} rows; expected node ids in [0, {n})"
        )
    out: dict[str, Any] = {k: v for k, v in fields.items() if k not in ("x", "edge_index", "y")}
    for k, v in out.items():
        if isinstance(v, np.ndarray):
            raise GraphFileError(
                f"graph file {path}: {k!r} holds {v.dtype.name} values; expected numeric arrays"
            )
    data = Data(x=x, edge_index=ei.contiguous(), **out)
    data.num_nodes = n

    y = fields.get("y")
    if y is not None:
        if isinstance(y, np.ndarray):
            sample = ", ".join(repr(v) for v in y.reshape(-1)[:3].tolist())
            raise GraphFileError(
                f"graph file {path}: the labels y are strings ({sample}, ...); expected integer "
                f"class ids 0..C-1 — map them first, e.g. "
                f"y = numpy.unique(names, return_inverse=True)[1]"
            )
        if y.size(0) != n:
            raise GraphFileError(f"graph file {path}: y has {y.size(0)} rows but x has {n}")
        if y.ndim == 1 or (y.ndim == 2 and y.size(-1) == 1):
            y = _integral(y.reshape(-1), "y", path, "integer class ids >= 0")
            if bool((y < 0).any()):
                row = int((y < 0).nonzero()[0])
                raise GraphFileError(
                    f"graph file {path}: y row {row} is {int(y[row])}; expected integer class "
                    f"ids >= 0"
                )
        data.y = y

    present = [k for k in _MASKS if fields.get(k) is not None]
    if present and len(present) != 3:
        raise GraphFileError(
            f"graph file {path}: has {present} but not all of {list(_MASKS)}; give all three "
            f"or none"
        )
    for k in present:
        mask = getattr(data, k)
        odd = (mask != 0) & (mask != 1)
        if mask.dtype != torch.bool and bool(odd.any()):
            at = odd.nonzero()[0].tolist()
            raise GraphFileError(
                f"graph file {path}: {k} holds {mask[tuple(at)].item()!r} at row {at[0]}; "
                f"expected a boolean (or 0/1) mask"
            )
        if mask.size(0) != n:
            raise GraphFileError(f"graph file {path}: {k} has {mask.size(0)} rows but x has {n}")
        setattr(data, k, mask.bool())
    if present:
        train, val, test = (tuple(getattr(data, k).shape) for k in _MASKS)
        if train != val or test not in (train, (n,)):
            raise GraphFileError(
                f"graph file {path}: the masks have shapes train {train}, val {val}, test "
                f"{test}; expected [N] for all three, or [N, K] for K splits (test [N, K] or [N])"
            )
    return data


class GraphFileDataModule(NodeDataModule):
    """One graph read from a file (:func:`load_graph_file`): the way to bring one's own graph.

    The file is checked when it is loaded, before any training: integer node ids, finite
    features, at least one node, feature column and edge, integer labels >= 0, and non-empty,
    disjoint train/validation/test splits.

    Args:
        path: the ``.pt``/``.pth`` or ``.npz`` file.
        name: dataset name in logs (default: the file's stem).
        to_undirected: add the reverse of every edge (default: ``False``).
        allow_overlap: accept masks whose train/validation/test nodes overlap (default:
            ``False``: overlapping masks are refused, naming the masks and a shared node).
        **kwargs: :class:`~graphssl.data.node.NodeDataModule` arguments (``split="public"``
            uses the file's masks when it has them, else a seeded random split).
    """

    def __init__(
        self,
        path: str | Path,
        name: str | None = None,
        to_undirected: bool = False,
        allow_overlap: bool = False,
        **kwargs: Any,
    ) -> None:
        self.path = Path(path)
        super().__init__(name or self.path.stem, **kwargs)
        self.to_undirected = bool(to_undirected)
        self.allow_overlap = bool(allow_overlap)

    def load(self) -> Data:
        try:
            data = load_graph_file(self.path)
        except (DatasetNotFoundError, GraphFileError, UnsafeFileError):
            raise
        except Exception as err:  # anything unforeseen still names the user's file
            raise GraphFileError(
                f"graph file {self.path} cannot be used ({type(err).__name__}: {err}); {_EXPECTED}"
            ) from err
        if self.to_undirected:
            data.edge_index = _to_undirected(data.edge_index, num_nodes=data.num_nodes)
        return data

    def _make_splits(self, data: Data) -> list[Split]:
        splits = super()._make_splits(data)
        from_file = self.split != "random" and all(
            getattr(data, k, None) is not None for k in _MASKS
        )
        how = (
            "the file's masks"
            if from_file
            else f"a random split with dataset.train_frac={self.train_frac}, "
            f"dataset.val_frac={self.val_frac} of {int(data.num_nodes)} nodes"
        )
        for i, split in enumerate(splits):
            which = f"split {i if self.split_index is None else self.split_index}"
            for part in ("train", "val", "test"):
                if getattr(split, part).numel() == 0:
                    raise GraphFileError(
                        f"graph file {self.path}: the {part} set of {which} is empty ({how}); "
                        f"expected at least one node in each of train, val and test"
                    )
            if self.allow_overlap:
                continue
            parts = [("train", split.train), ("val", split.val), ("test", split.test)]
            for a, (name_a, idx_a) in enumerate(parts):
                for name_b, idx_b in parts[a + 1 :]:
                    shared = idx_a[torch.isin(idx_a, idx_b)]
                    if shared.numel():
                        raise GraphFileError(
                            f"graph file {self.path}: {name_a}_mask and {name_b}_mask of "
                            f"{which} share {shared.numel()} node(s) (first: node "
                            f"{int(shared[0])}); expected disjoint train/val/test masks — fix "
                            f"the masks, or set dataset.allow_overlap=true to evaluate on "
                            f"overlapping sets on purpose"
                        )
        return splits
