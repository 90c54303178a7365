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

import inspect
import pickle
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected as _to_undirected

from graphssl.data.node import NodeDataModule
from graphssl.data.paths import (
    DatasetNotFoundError,
    download_root,
    require_raw_files,
    writable_root,
)

__all__ = ["GraphFileDataModule", "PyGDataModule", "load_graph_file"]

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

    The dataset is built as ``cls(root=<data_dir>/<cls>, **kwargs)`` (bundled datasets
    without a ``root``, such as ``KarateClub``, as ``cls(**kwargs)``) and its one graph is
    used. ``dataset=pyg dataset.cls=Amazon +dataset.kwargs.name=Photo`` loads Amazon Photo
    (its raw file under ``<data_dir>/Amazon/Photo/raw``).

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

    def load(self) -> Data:
        cls = _pyg_class(self.cls_name)
        source = self.data_dir / self.cls_name
        if self.downloads.enabled:
            root = download_root(source, self.cache_dir)
            self.downloads.expect(source, f"the URL of torch_geometric.datasets.{self.cls_name}")
            klass = cls
        else:
            root = (
                writable_root(source, self.cache_dir)
                if source.is_dir()
                else (self.cache_dir / self.cls_name)
            )
            klass = _refusing_download(cls, self.name, root, source)
        takes_root = "root" in inspect.signature(cls).parameters
        dataset = klass(root=str(root), **self.kwargs) if takes_root else cls(**self.kwargs)
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
def _tensor(value: Any, key: str, path: Path) -> Tensor:
    try:
        return torch.as_tensor(np.asarray(value) if not isinstance(value, Tensor) else value)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{path}: {key!r} is not an array ({type(value).__name__})") from err


def load_graph_file(path: str | Path) -> Data:
    """Read one graph from ``path`` (``.pt``/``.pth``: ``torch.save`` of a ``Data`` or of a
    dict of tensors; ``.npz``: arrays ``edge_index``, ``x``, optional ``y`` and masks) and
    check its shapes."""
    path = Path(path)
    if not path.is_file():
        raise DatasetNotFoundError(
            f"graph file {path} not found; set dataset.path to a .pt (torch.save of a PyG "
            f"Data) or .npz (edge_index, x, optional y and train_mask/val_mask/test_mask) file"
        )
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as f:
            fields: dict[str, Any] = {k: f[k] for k in f.files}
    elif path.suffix in (".pt", ".pth"):
        obj = _torch_load(path)
        if isinstance(obj, Data):
            return _checked(obj, path)
        if not isinstance(obj, dict):
            raise ValueError(
                f"{path} holds a {type(obj).__name__}; expected a torch_geometric Data or a "
                f"dict of tensors (edge_index, x, ...)"
            )
        fields = dict(obj)
    else:
        raise ValueError(f"graph file {path} must end in .pt, .pth or .npz, got {path.suffix!r}")
    for key in ("edge_index", "x"):
        if key not in fields:
            raise ValueError(f"{path} has no {key!r}; found {sorted(fields)}")
    data = Data(**{k: _tensor(v, k, path) for k, v in fields.items()})
    return _checked(data, path)


def _torch_load(path: Path) -> Any:
    """``torch.load`` with ``weights_only`` (PyG's classes allowed); files with other Python
    objects fall back to full unpickling, with a warning: only load files you trust."""
    from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
    from torch_geometric.data.storage import EdgeStorage, GlobalStorage, NodeStorage

    safe = [Data, DataEdgeAttr, DataTensorAttr, GlobalStorage, NodeStorage, EdgeStorage]
    try:
        with torch.serialization.safe_globals(safe):
            return torch.load(path, weights_only=True)
    except pickle.UnpicklingError as err:
        warnings.warn(
            f"{path} holds objects that weights_only loading refuses ({err}); loading it with "
            f"full unpickling, which runs code from the file: use only files you trust",
            stacklevel=3,
        )
        return torch.load(path, weights_only=False)


def _checked(data: Data, path: Path) -> Data:
    """Cast and validate a loaded graph's fields, naming the file and the field."""
    if data.edge_index is None or data.x is None:
        raise ValueError(f"{path}: the graph needs edge_index and x")
    ei = data.edge_index.long()
    if ei.ndim != 2 or ei.size(0) != 2:
        if ei.ndim == 2 and ei.size(1) == 2:
            ei = ei.t()
        else:
            raise ValueError(
                f"{path}: edge_index must have shape [2, E], got {tuple(data.edge_index.shape)}"
            )
    x = data.x.float()
    if x.ndim == 1:
        x = x.view(-1, 1)
    n = x.size(0)
    if ei.numel() and (int(ei.min()) < 0 or int(ei.max()) >= n):
        raise ValueError(
            f"{path}: edge_index refers to node {int(ei.max())} (min {int(ei.min())}) but x "
            f"has {n} rows; expected indices in [0, {n})"
        )
    data.edge_index = ei.contiguous()
    data.x = x
    data.num_nodes = n
    y = getattr(data, "y", None)
    if y is not None:
        if y.size(0) != n:
            raise ValueError(f"{path}: y has {y.size(0)} rows but x has {n}")
        data.y = y.view(-1).long() if y.ndim == 1 or y.size(-1) == 1 else y
    present = [k for k in _MASKS if getattr(data, k, None) is not None]
    if present and len(present) != 3:
        raise ValueError(
            f"{path}: has {present} but not all of {list(_MASKS)}; give all three or none"
        )
    for k in present:
        mask = getattr(data, k).bool()
        if mask.size(0) != n:
            raise ValueError(f"{path}: {k} has {mask.size(0)} rows but x has {n}")
        setattr(data, k, mask)
    return data


class GraphFileDataModule(NodeDataModule):
    """One graph read from a file (:func:`load_graph_file`): the way to bring one's own graph.

    Args:
        path: the ``.pt``/``.pth`` or ``.npz`` file.
        name: dataset name in logs (default: the file's stem).
        to_undirected: add the reverse of every edge (default: ``False``).
        **kwargs: :class:`~graphssl.data.node.NodeDataModule` arguments (``split="public"``
            uses the file's masks when it has them, else a seeded random split).
    """

    def __init__(
        self,
        path: str | Path,
        name: str | None = None,
        to_undirected: bool = False,
        **kwargs: Any,
    ) -> None:
        self.path = Path(path)
        super().__init__(name or self.path.stem, **kwargs)
        self.to_undirected = bool(to_undirected)

    def load(self) -> Data:
        data = load_graph_file(self.path)
        if self.to_undirected:
            data.edge_index = _to_undirected(data.edge_index, num_nodes=data.num_nodes)
        return data
