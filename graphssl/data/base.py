"""DataModule base class: the interface training and evaluation rely on.

A DataModule owns one dataset, its seeded splits and its loaders. Evaluation only touches
``data``, ``is_graph_level``, ``eval_dataloader()``, ``neighbor_loader()`` and ``splits()``.
A node-level DataModule also keeps the CSC index its neighbour loaders sample from
(:meth:`DataModule.sampler_index`), so that the training loader and the extraction loader over
its graph share one.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor
from torch_geometric.data import Data

if TYPE_CHECKING:
    from graphssl.data.sampler import SamplerIndex


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
        # (graph, its edge_index, the sampler index built from them): see sampler_index()
        self._sampler_index: tuple[Data, Tensor, SamplerIndex] | None = None

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
        pure-PyTorch backend otherwise. Over :attr:`data` itself (``data`` not given, or
        :attr:`data` given), graphssl's sampler reads the index of :meth:`sampler_index`, built
        on the first such call, instead of converting the graph for every loader; a prepared
        copy (another graph object) is converted for its own loader.
        """
        from graphssl.data.sampler import make_neighbor_loader, uses_torch_sampler

        self._require_setup()
        if self.is_graph_level:
            raise ValueError(
                f"dataset {self.name!r} is graph-level; neighbor_loader() needs a "
                f"node-level dataset"
            )
        own = self.data
        graph = own if data is None else data
        index = None
        if graph is own and uses_torch_sampler() and graph.edge_index is not None:
            index = self._index_of(own, share_memory=False)
        return make_neighbor_loader(
            graph,
            num_neighbors=[-1, -1] if num_neighbors is None else list(num_neighbors),
            batch_size=batch_size,
            input_nodes=input_nodes,
            shuffle=shuffle,
            seed=self.seed,
            index=index,
        )

    def sampler_index(self, *, share_memory: bool = False) -> SamplerIndex:
        """The CSC index of :attr:`data` that neighbour sampling reads, built on the first call
        and kept: every later :meth:`neighbor_loader` over :attr:`data` uses it.

        The kept index belongs to the graph object it was built from (and that graph's
        ``edge_index`` tensor): if :attr:`data` is another object, or its ``edge_index`` was
        replaced, a new index is built.

        Args:
            share_memory: have the index's tensors in shared memory (a kept index is moved
                there), so that processes it is handed to map the same pages instead of
                copying them (default: ``False``).

        Raises:
            ValueError: for a graph-level dataset, or a graph without ``edge_index``.
        """
        self._require_setup()
        if self.is_graph_level:
            raise ValueError(
                f"dataset {self.name!r} is graph-level; sampler_index() needs a node-level dataset"
            )
        return self._index_of(self.data, share_memory=share_memory)

    def set_sampler_index(self, index: SamplerIndex) -> None:
        """Use ``index`` as the CSC index of :attr:`data` from now on (e.g. the index another
        process built over the same graph and handed over in shared memory), so that no loader
        over :attr:`data` converts the graph.

        Raises:
            TypeError/ValueError: ``index`` is not a
                :class:`~graphssl.data.sampler.SamplerIndex` whose sizes fit :attr:`data`.
        """
        from graphssl.data.sampler import check_sampler_index

        self._require_setup()
        data = self.data
        check_sampler_index(index, data)
        self._sampler_index = (data, data.edge_index, index)

    def _index_of(self, data: Data, *, share_memory: bool) -> SamplerIndex:
        """The kept index when it was built from ``data`` as it is now, else a new one (kept)."""
        from graphssl.data.sampler import build_sampler_index

        kept = getattr(self, "_sampler_index", None)
        if kept is not None and kept[0] is data and kept[1] is data.edge_index:
            index = kept[2]
            if share_memory:
                for t in index:
                    if t is not None:
                        t.share_memory_()
            return index
        self._sampler_index = None  # the old index is freed before the new one is built
        index = build_sampler_index(data, share_memory=share_memory)
        self._sampler_index = (data, data.edge_index, index)
        return index

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
