"""DataModule base class: the interface training and evaluation rely on.

A DataModule owns one dataset, its seeded splits and its loaders. Evaluation only touches
``data``, ``is_graph_level``, ``eval_dataloader()``, ``neighbor_loader()`` and ``splits()``.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data


@dataclass(frozen=True)
class Split:
    """Index tensors of one train/validation/test split (rows of the evaluated embeddings)."""

    train: Tensor
    val: Tensor
    test: Tensor

    def __post_init__(self) -> None:
        for name in ("train", "val", "test"):
            t = getattr(self, name)
            if t.dtype != torch.long or t.ndim != 1:
                raise ValueError(
                    f"Split.{name} must be a 1-D long index tensor, got "
                    f"{t.dtype} with shape {tuple(t.shape)}"
                )


class DataModule(ABC):
    """Base class of every graphssl DataModule.

    Subclasses load their data lazily in :meth:`setup` (called by the pipeline, idempotent) and
    expose it through :attr:`data` (node-level: the one graph; graph-level: a collated view is
    not needed, use :meth:`eval_dataloader`).

    Args:
        name: dataset name used in logs and error messages.
        seed: seed of every random choice the DataModule makes (splits, shuffling).
    """

    #: ``True`` for datasets of many graphs with one label per graph.
    is_graph_level: bool = False

    def __new__(cls, /, *args: Any, **kwargs: Any) -> DataModule:
        unknown = sorted(set(kwargs) - set(accepted_arguments(cls)))
        if unknown and not _takes_any_keyword(cls):
            raise TypeError(
                f"{cls.__name__} got unknown argument(s) {', '.join(map(repr, unknown))}; it "
                f"accepts {', '.join(accepted_arguments(cls))}. A key left in `dataset` from "
                f"another dataset's config (e.g. after overriding dataset._target_) causes "
                f"this: choose the dataset with `dataset=<name>`, or remove the key with "
                f"`~dataset.<key>`"
            )
        return super().__new__(cls)

    def __init__(self, name: str, seed: int = 0) -> None:
        self.name = name
        self.seed = int(seed)
        self._is_setup = False

    # ------------------------------------------------------------------ lifecycle
    def setup(self) -> None:
        """Load the dataset and compute splits once; later calls do nothing."""
        if not self._is_setup:
            self._setup()
            self._is_setup = True

    @abstractmethod
    def _setup(self) -> None: ...

    def _require_setup(self) -> None:
        if not self._is_setup:
            self.setup()

    # ------------------------------------------------------------------ data
    @property
    @abstractmethod
    def data(self) -> Data:
        """Node-level: the whole graph (``x``, ``edge_index``, ``y``, split masks)."""

    @property
    def num_features(self) -> int:
        self._require_setup()
        return int(self.data.num_node_features)

    @property
    @abstractmethod
    def num_classes(self) -> int: ...

    @property
    def labels(self) -> Tensor | None:
        """One label per evaluated row (node or graph), or ``None``."""
        self._require_setup()
        y = getattr(self.data, "y", None)
        return y

    @abstractmethod
    def splits(self) -> Sequence[Split]:
        """Evaluation splits (one or more, e.g. 10 Geom-GCN splits or k folds)."""

    # ------------------------------------------------------------------ loaders
    @abstractmethod
    def train_dataloader(self) -> Iterable[Data]:
        """Batches for one training epoch (full-batch: the whole graph once)."""

    def eval_dataloader(self) -> Iterable[Data]:
        """Batches for embedding extraction; node-level: the whole graph once."""
        self._require_setup()
        return [self.data]

    def neighbor_loader(
        self,
        num_neighbors: list[int] | None = None,
        batch_size: int = 1024,
        *,
        input_nodes: Tensor | None = None,
        shuffle: bool = False,
        data: Data | None = None,
    ) -> Iterable[Data]:
        """A PyG ``NeighborLoader`` over :attr:`data` (or a prepared copy passed as ``data``).

        Uses PyG's compiled sampler when pyg-lib or torch-sparse is importable and graphssl's
        pure-PyTorch backend otherwise.
        """
        from graphssl.data.sampler import make_neighbor_loader

        self._require_setup()
        if self.is_graph_level:
            raise ValueError(
                f"dataset {self.name!r} is graph-level; neighbor_loader() needs a "
                f"node-level dataset"
            )
        return make_neighbor_loader(
            data if data is not None else self.data,
            num_neighbors=[-1, -1] if num_neighbors is None else list(num_neighbors),
            batch_size=batch_size,
            input_nodes=input_nodes,
            shuffle=shuffle,
            seed=self.seed,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, seed={self.seed})"


def _init_chain(cls: type) -> Iterable[inspect.Signature]:
    """Signatures of ``cls``'s ``__init__`` and, while each passes ``**kwargs`` on, its bases'."""
    for klass in cls.__mro__:
        if "__init__" not in vars(klass) or klass is object:
            continue
        sig = inspect.signature(vars(klass)["__init__"])
        yield sig
        if not any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
            return


def _takes_any_keyword(cls: type) -> bool:
    """``True`` when every ``__init__`` up the chain forwards ``**kwargs`` (nothing to check)."""
    sigs = list(_init_chain(cls))
    return not sigs or all(
        any(p.kind is p.VAR_KEYWORD for p in s.parameters.values()) for s in sigs
    )


def accepted_arguments(cls: type) -> list[str]:
    """Keyword arguments a DataModule class accepts (its ``__init__`` and the bases it forwards
    ``**kwargs`` to), sorted."""
    names: set[str] = set()
    for sig in _init_chain(cls):
        names.update(
            n
            for n, p in sig.parameters.items()
            if n != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        )
    return sorted(names)
