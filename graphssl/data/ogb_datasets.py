"""Open Graph Benchmark datasets (Hu et al., NeurIPS 2020) through the ``ogb`` package.

``ogbn-*`` node property prediction (``ogbn-arxiv``, ``ogbn-products``, ...) loads with OGB's
``PygNodePropPredDataset`` and ``ogbg-*`` graph property prediction (``ogbg-molhiv``, ...)
with ``PygGraphPropPredDataset``; both keep OGB's official split (time for arxiv, sales rank
for products, scaffold for the molecules). :meth:`ogb_evaluator` returns OGB's own
``Evaluator`` as a ``(y_true, y_pred) -> float`` callable, so a run can report OGB's metric
(:attr:`ogb_metric`: ``"acc"`` or ``"rocauc"``) next to graphssl's probes.

Files live in ``<data_dir>/OGB/<name with underscores>/`` (``raw/``, ``split/``,
``RELEASE_v<k>.txt``), as OGB's downloader leaves them. OGB asks on the terminal before a
download over 1 GB and before replacing a folder of another release; graphssl answers those
questions itself (download: yes, when downloads are on; replace: no), so runs never block on
standard input.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch_geometric.data import Data
from torch_geometric.utils import index_to_mask, to_undirected

from graphssl.data.base import Split
from graphssl.data.graph import GraphDataModule, GraphSplitName
from graphssl.data.node import NodeDataModule
from graphssl.data.paths import DatasetNotFoundError, missing_files
from graphssl.utils import allowed_globals

__all__ = ["OGBGraphDataModule", "OGBNodeDataModule", "ogb_meta"]

#: a ``(y_true, y_pred) -> score`` callable built from OGB's ``Evaluator``
OGBEvaluator = Callable[[Any, Any], float]


def require_ogb(dataset: str) -> None:
    """Import ``ogb`` without its version check: on import, ogb asks PyPI for its latest
    version in a background thread (through the ``outdated`` package, without a timeout),
    which an offline run must not wait for."""
    if "ogb" in sys.modules:
        return
    try:
        import outdated
    except ImportError:
        outdated = None
    saved = getattr(outdated, "check_outdated", None)
    if outdated is not None:
        outdated.check_outdated = lambda package, version, *args, **kwargs: (False, version)
    try:
        import ogb  # noqa: F401
    except ImportError as err:
        raise ImportError(
            f"dataset {dataset!r} needs the `ogb` package, which is not installed: run "
            f"`pip install ogb` (or `pip install -e '.[ogb]'`)"
        ) from err
    finally:
        if outdated is not None:
            outdated.check_outdated = saved


def ogb_meta(kind: str, name: str) -> dict[str, str]:
    """OGB's ``master.csv`` row of dataset ``name`` (``kind``: ``nodeproppred`` or
    ``graphproppred``), as strings."""
    import importlib

    import pandas as pd

    module = importlib.import_module(f"ogb.{kind}.dataset_pyg")
    master = pd.read_csv(
        Path(str(module.__file__)).with_name("master.csv"), index_col=0, keep_default_na=False
    )
    if name not in master:
        prefix = "ogbn-" if kind == "nodeproppred" else "ogbg-"
        choices = sorted(c for c in master.columns if c.startswith(prefix))
        raise ValueError(f"unknown OGB dataset {name!r}; expected one of {choices}")
    return {k: str(v) for k, v in master[name].items()}


@contextmanager
def _non_interactive(module: ModuleType) -> Iterator[None]:
    """Answer OGB's terminal questions (download, even over 1 GB: yes; replace a folder: no),
    and let OGB's ``torch.load`` of the file it processed itself read PyG's storage classes
    while keeping ``weights_only`` loading (the default of recent PyTorch)."""
    from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
    from torch_geometric.data.storage import EdgeStorage, GlobalStorage, NodeStorage

    saved = module.decide_download
    module.decide_download = lambda url: True  # type: ignore[attr-defined]
    module.input = lambda *args: "n"  # type: ignore[attr-defined]
    safe = [Data, DataEdgeAttr, DataTensorAttr, GlobalStorage, NodeStorage, EdgeStorage]
    try:
        with allowed_globals(safe):
            yield
    finally:
        module.decide_download = saved  # type: ignore[attr-defined]
        del module.input  # type: ignore[attr-defined]


def _files(meta: dict[str, str], graph_level: bool) -> list[str]:
    """Files of an OGB dataset folder that its PyG class reads."""
    raw = ["edge"]
    if meta["has_node_attr"] == "True":
        raw.append("node-feat")
    if meta["has_edge_attr"] == "True":
        raw.append("edge-feat")
    if graph_level:
        raw += ["graph-label", "num-node-list", "num-edge-list"]
    else:
        raw.append("node-label")
        extra = meta["additional node files"]
        raw += [] if extra == "None" else extra.split(",")
    split = [f"split/{meta['split']}/{p}.csv.gz" for p in ("train", "valid", "test")]
    return [f"raw/{f}.csv.gz" for f in raw] + split + [f"RELEASE_v{meta['version']}.txt"]


def _evaluator(kind: str, name: str) -> tuple[OGBEvaluator, str]:
    import importlib

    evaluator = importlib.import_module(f"ogb.{kind}").Evaluator(name)
    metric = str(evaluator.eval_metric)

    def evaluate(y_true: Any, y_pred: Any) -> float:
        yt = torch.as_tensor(y_true)
        yp = torch.as_tensor(y_pred)
        yt = yt.view(-1, 1) if yt.ndim == 1 else yt
        yp = yp.view(-1, 1) if yp.ndim == 1 else yp
        return float(evaluator.eval({"y_true": yt, "y_pred": yp})[metric])

    return evaluate, metric


class _OGBFolder:
    """Shared by the node and graph DataModules: the dataset folder and its download."""

    name: str
    data_dir: Path
    cache_dir: Path
    downloads: Any

    def _ogb_root(self, meta: dict[str, str], graph_level: bool) -> Path:
        """The root to pass to OGB's dataset class (the parent of the dataset folder)."""
        folder = self.data_dir / "OGB" / self.name.replace("-", "_")
        files = _files(meta, graph_level)
        if (
            self.downloads.enabled
            and folder.is_dir()
            and any(folder.iterdir())
            and missing_files(folder, files)
        ):
            shown = ", ".join(missing_files(folder, files)[:4])
            raise DatasetNotFoundError(
                f"dataset {self.name!r}: {folder} is incomplete (missing {shown}) and OGB's "
                f"downloader would replace the whole folder; complete it or move it away so "
                f"the dataset downloads afresh"
            )
        self.downloads.cache_dir = self.cache_dir / "OGB"
        return Path(self.downloads.root(folder, files, meta["url"])).parent


class OGBNodeDataModule(_OGBFolder, NodeDataModule):
    """An ``ogbn-*`` node property prediction dataset with its official split.

    Labels become a vector ``[N]``; the official train/valid/test indices become the masks of
    ``split="public"`` (``"random"`` draws seeded fractions instead).

    Args:
        name: OGB name, e.g. ``"ogbn-arxiv"`` or ``"ogbn-products"``.
        to_undirected: add the reverse of every edge (arxiv's citations are directed; products
            is undirected already) (default: ``True``).
        **kwargs: :class:`~graphssl.data.node.NodeDataModule` arguments.
    """

    def __init__(self, name: str = "ogbn-arxiv", to_undirected: bool = True, **kwargs: Any):
        if not name.startswith("ogbn-"):
            raise ValueError(f"OGBNodeDataModule loads ogbn-* datasets, got {name!r}")
        super().__init__(name, **kwargs)
        self.to_undirected = bool(to_undirected)

    def load(self) -> Data:
        require_ogb(self.name)
        from ogb.nodeproppred import dataset_pyg

        meta = ogb_meta("nodeproppred", self.name)
        if meta["is hetero"] == "True":
            raise ValueError(f"{self.name!r} is heterogeneous; graphssl loads homogeneous graphs")
        root = self._ogb_root(meta, graph_level=False)
        with _non_interactive(dataset_pyg):
            dataset = dataset_pyg.PygNodePropPredDataset(self.name, root=str(root))
        data = dataset[0]
        split = dataset.get_idx_split()
        n = int(data.num_nodes)
        data.y = data.y.view(-1)
        data.train_mask = index_to_mask(split["train"], n)
        data.val_mask = index_to_mask(split["valid"], n)
        data.test_mask = index_to_mask(split["test"], n)
        if self.to_undirected:
            data.edge_index = to_undirected(data.edge_index, num_nodes=n)
        return data

    @property
    def ogb_metric(self) -> str:
        """OGB's metric for this dataset (``"acc"`` for ogbn-arxiv and ogbn-products)."""
        require_ogb(self.name)
        return _evaluator("nodeproppred", self.name)[1]

    def ogb_evaluator(self) -> OGBEvaluator:
        """OGB's ``Evaluator`` as ``(y_true, y_pred) -> score``: class ids ``[n]`` or
        ``[n, 1]`` (tensors or arrays) of the rows to score, e.g. the test split."""
        require_ogb(self.name)
        return _evaluator("nodeproppred", self.name)[0]


class OGBGraphDataModule(_OGBFolder, GraphDataModule):
    """An ``ogbg-*`` graph property prediction dataset (e.g. ``ogbg-molhiv``).

    ``split="scaffold"`` (the default) is OGB's official split (its ``split/<type>`` folder,
    scaffold for the molecules); ``"kfold"`` and ``"random"`` are graphssl's seeded ones.
    Integer atom features are cast to float. Binary tasks are ``"classification"``, several
    tasks with missing labels ``"multilabel"``, real targets ``"regression"``.

    Args:
        name: OGB name, e.g. ``"ogbg-molhiv"``.
        split: ``"scaffold"`` (official), ``"kfold"`` or ``"random"`` (default:
            ``"scaffold"``).
        **kwargs: :class:`~graphssl.data.graph.GraphDataModule` arguments.
    """

    def __init__(self, name: str = "ogbg-molhiv", split: str = "scaffold", **kwargs: Any):
        if not name.startswith("ogbg-"):
            raise ValueError(f"OGBGraphDataModule loads ogbg-* datasets, got {name!r}")
        if split not in ("scaffold", "kfold", "random"):
            raise ValueError(f"split must be 'scaffold', 'kfold' or 'random', got {split!r}")
        own: GraphSplitName = "kfold" if split == "kfold" else "random"
        super().__init__(name, split=own, **kwargs)
        self.official = split == "scaffold"
        self._official: Split | None = None
        self._meta: dict[str, str] | None = None

    def _task_of(self, meta: dict[str, str]) -> None:
        if meta["task type"] == "regression":
            self.task = "regression"
        elif int(meta["num tasks"]) > 1:
            self.task = "multilabel"
        else:
            self.task = "classification"

    def load(self) -> Sequence[Data]:
        require_ogb(self.name)
        from ogb.graphproppred import dataset_pyg

        meta = ogb_meta("graphproppred", self.name)
        self._task_of(meta)
        root = self._ogb_root(meta, graph_level=True)
        with _non_interactive(dataset_pyg):
            dataset = dataset_pyg.PygGraphPropPredDataset(self.name, root=str(root))
        split = dataset.get_idx_split()
        self._official = Split(
            train=split["train"].long().sort().values,
            val=split["valid"].long().sort().values,
            test=split["test"].long().sort().values,
        )
        return [dataset[i] for i in range(len(dataset))]

    def _make_splits(self) -> list[Split]:
        if self.official and self._official is not None:
            return [self._official]
        return super()._make_splits()

    @property
    def ogb_metric(self) -> str:
        """OGB's metric for this dataset (``"rocauc"`` for ogbg-molhiv)."""
        require_ogb(self.name)
        return _evaluator("graphproppred", self.name)[1]

    def ogb_evaluator(self) -> OGBEvaluator:
        """OGB's ``Evaluator`` as ``(y_true, y_pred) -> score``; for ROC-AUC ``y_pred`` holds
        scores (e.g. the probability of the positive class), ``[n]`` or ``[n, tasks]``."""
        require_ogb(self.name)
        return _evaluator("graphproppred", self.name)[0]
