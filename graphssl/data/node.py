"""Node-level DataModules: Planetoid, CitationFull, WebKB, Actor, Amazon, Coauthor, WikiCS,
Flickr, KarateClub and a seeded SBM.

Each loads one graph with PyG from ``data_dir`` (downloading missing raw files only when
``download`` is on), optionally row-normalises the features, and builds its evaluation splits
once from ``seed``, so every run with the same seed evaluates on the same rows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from graphssl.data.base import DataModule, Split
from graphssl.data.cache import load_with_processed_repair
from graphssl.data.embedded import embedded_path, load_embedded
from graphssl.data.paths import (
    DatasetCorruptError,
    DatasetNotFoundError,
    Downloads,
    GraphFileError,
    UnsafePathError,
    default_data_dir,
)
from graphssl.data.safe_pickle import restricted_pickles
from graphssl.utils import UnsafeFileError

SplitName = Literal["public", "geom-gcn", "random"]

log = logging.getLogger(__name__)


def random_split(num_nodes: int, train: float, val: float, generator: torch.Generator) -> Split:
    """A seeded random split of ``num_nodes`` rows into train/val/test fractions."""
    if not (0 < train < 1 and 0 <= val < 1 and train + val < 1):
        raise ValueError(
            f"split fractions must satisfy 0 < train < 1, 0 <= val and train + val < 1, got "
            f"train={train}, val={val}"
        )
    perm = torch.randperm(num_nodes, generator=generator)
    n_train = max(1, round(train * num_nodes))
    n_val = max(1, round(val * num_nodes)) if val > 0 else 0
    return Split(
        train=perm[:n_train].sort().values,
        val=perm[n_train : n_train + n_val].sort().values,
        test=perm[n_train + n_val :].sort().values,
    )


def _mask_to_index(mask: Tensor) -> Tensor:
    return mask.nonzero(as_tuple=False).view(-1)


class NodeDataModule(DataModule):
    """A DataModule of one graph; subclasses implement :meth:`load`.

    Args:
        name: dataset name.
        data_dir: folder holding the raw files (default: ``$GRAPHSSL_DATA_DIR`` or ``data/``).
        cache_dir: writable folder for copies of read-only sources (default: ``outputs/cache``).
        split: ``"public"`` (the dataset's own split), ``"geom-gcn"`` (the 10 Geom-GCN
            60/20/20 splits) or ``"random"`` (seeded fractions) (default: ``"public"``).
        split_index: which of several stored splits to use; ``None`` evaluates all of them
            (default: ``None``).
        train_frac: training fraction for ``split="random"`` (default: ``0.1``).
        val_frac: validation fraction for ``split="random"`` (default: ``0.1``).
        normalize_features: row-normalise node features to sum to one (default: ``False``).
        seed: seed of the random split and loaders (default: ``0``).
        corruption: a transform applied to the loaded graph before the splits are built, e.g.
            :class:`~graphssl.data.corruptions.NaiveSparsify` (config ``dataset.corruption``)
            (default: ``None``).
        download: let PyG download missing raw files from the dataset's URL (config
            ``paths.download``) (default: ``False``).
        download_timeout: seconds for each connect and read of a download (config
            ``paths.download_timeout``) (default: ``10.0``).
    """

    def __init__(
        self,
        name: str,
        data_dir: str | Path | None = None,
        cache_dir: str | Path | None = None,
        split: SplitName = "public",
        split_index: int | None = None,
        train_frac: float = 0.1,
        val_frac: float = 0.1,
        normalize_features: bool = False,
        seed: int = 0,
        corruption: Callable[[Data], Data] | None = None,
        download: bool = False,
        download_timeout: float = 10.0,
    ) -> None:
        super().__init__(name=name, seed=seed)
        self.corruption = corruption
        if split not in ("public", "geom-gcn", "random"):
            raise ValueError(f"split must be one of 'public', 'geom-gcn', 'random', got {split!r}")
        self.data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
        self.cache_dir = Path(cache_dir) if cache_dir is not None else Path("outputs/cache")
        self.split = split
        self.split_index = split_index
        self.train_frac = train_frac
        self.val_frac = val_frac
        self.normalize_features = normalize_features
        self.downloads = Downloads(name, download, download_timeout, self.cache_dir)
        self._data: Data | None = None
        self._splits: list[Split] = []

    # ------------------------------------------------------------------ subclass hook
    def load(self) -> Data:
        """Load the graph (with masks when the dataset has them)."""
        raise NotImplementedError

    def _root(self, folder: str, files: Sequence[str], url: str | None = None) -> Path:
        """Check raw files under ``data_dir/folder`` and return a writable PyG root for it;
        with downloads on, a missing file is fetched from ``url`` by the PyG class."""
        return self.downloads.root(self.data_dir / folder, files, url)

    # ------------------------------------------------------------------ DataModule
    def _setup(self) -> None:
        try:
            with self.downloads.guard():
                data = load_with_processed_repair(self.load)
        except (DatasetNotFoundError, GraphFileError, UnsafeFileError, UnsafePathError):
            raise  # these already name the user's file or value and what was expected
        except ImportError:
            raise
        except Exception as err:  # PyG's readers raise many kinds on damaged files
            raise DatasetCorruptError(
                f"dataset {self.name!r}: could not read its raw files under {self.data_dir} "
                f"({type(err).__name__}: {err}); expected the original files — check them "
                f"against MANIFEST.sha256 or copy them again, and delete {self.cache_dir} if a "
                f"damaged copy was cached"
            ) from err
        if self.normalize_features and data.x is not None:
            x = data.x.float()
            data.x = x / x.sum(dim=1, keepdim=True).clamp_min(1.0)
        if self.corruption is not None:
            data = self.corruption(data)
        self._data = data
        self._splits = self._make_splits(data)

    def _make_splits(self, data: Data) -> list[Split]:
        n = int(data.num_nodes)
        masks = ("train_mask", "val_mask", "test_mask")
        if self.split == "random" or not all(getattr(data, k, None) is not None for k in masks):
            gen = torch.Generator().manual_seed(self.seed)
            return [random_split(n, self.train_frac, self.val_frac, gen)]
        train, val, test = data.train_mask, data.val_mask, data.test_mask
        if train.dim() == 1:
            return [Split(_mask_to_index(train), _mask_to_index(val), _mask_to_index(test))]
        k = train.size(1)
        indices = range(k) if self.split_index is None else [self.split_index]
        out = []
        for i in indices:
            if not 0 <= i < k:
                raise ValueError(f"split_index must be in [0, {k - 1}] for {self.name!r}, got {i}")
            out.append(
                Split(
                    _mask_to_index(train[:, i]),
                    _mask_to_index(val[:, i]),
                    # WikiCS: 20 training/validation masks share one test mask
                    _mask_to_index(test if test.dim() == 1 else test[:, i]),
                )
            )
        return out

    @property
    def data(self) -> Data:
        self._require_setup()
        assert self._data is not None
        return self._data

    @property
    def num_classes(self) -> int:
        y = self.data.y
        return int(y.max()) + 1 if y is not None and y.numel() else 0

    def splits(self) -> Sequence[Split]:
        self._require_setup()
        return self._splits

    def graph_stats(self) -> dict[str, float]:
        """``data/num_nodes``, ``data/num_edges`` (undirected, no self-loops) and
        ``data/avg_degree`` = edges per node (|E|/|V|, the d̄ of Tsitsulin et al., 2023), measured
        after any ``corruption``."""
        from graphssl.data.corruptions import undirected_edge_count

        n = int(self.data.num_nodes)
        m = undirected_edge_count(self.data.edge_index) if self.data.edge_index is not None else 0
        return {
            "data/num_nodes": float(n),
            "data/num_edges": float(m),
            "data/avg_degree": m / n if n else 0.0,
        }

    def train_dataloader(self) -> Iterable[Data]:
        return [self.data]


class InMemoryNodeDataModule(NodeDataModule):
    """A node-level DataModule around a graph already in memory (a PyG ``Data``).

    For programs and notebooks that build or load their graph themselves; from the command line
    ``dataset=graph_file`` loads a saved one. Splits: the graph's ``train_mask``, ``val_mask``
    and ``test_mask`` when it has all three and ``split="public"``, else seeded random
    fractions (``train_frac``, ``val_frac``, the rest for testing).

    Args:
        graph: the graph (``x``, ``edge_index``, optional ``y``, ``edge_weight`` and masks).
        name: dataset name in logs and MLflow (default: ``"in_memory"``).
        **kwargs: the keyword arguments of :class:`NodeDataModule` (``split``, ``train_frac``,
            ``val_frac``, ``seed``, ``normalize_features``, ``corruption``, ...).
    """

    def __init__(self, graph: Data, name: str = "in_memory", **kwargs: Any) -> None:
        if not isinstance(graph, Data):
            raise TypeError(
                f"InMemoryNodeDataModule needs a torch_geometric.data.Data graph, got "
                f"{type(graph).__name__}"
            )
        super().__init__(name, **kwargs)
        self._graph = graph

    def load(self) -> Data:
        return self._graph


class PlanetoidDataModule(NodeDataModule):
    """Planetoid citation graphs (Yang et al., ICML 2016): ``Cora``, ``CiteSeer``, ``PubMed``.

    ``split="public"`` gives the 20-per-class split, ``"geom-gcn"`` the 10 splits of Pei et al.
    (ICLR 2020), ``"random"`` seeded fractions.

    Cora's graph also ships inside the package (:mod:`graphssl.data.embedded`): when its raw
    files are missing and downloads are off or fail, the ``public`` and ``random`` splits load
    that copy (identical to PyG's) and log one warning saying so; ``geom-gcn`` needs the files.
    """

    _RAW = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
    _NAMES: ClassVar[dict[str, str]] = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}

    def __init__(self, name: str, **kwargs: Any) -> None:
        if name.lower() not in self._NAMES:
            raise ValueError(
                f"Planetoid name must be one of {sorted(self._NAMES.values())}, got {name!r}"
            )
        super().__init__(name, **kwargs)

    def load(self) -> Data:
        from torch_geometric.datasets import Planetoid

        key = self.name.lower()
        name = self._NAMES[key]
        files = [f"{name}/raw/ind.{key}.{s}" for s in self._RAW]
        pyg_split = "public"
        if self.split == "geom-gcn":
            files += [f"{name}/geom-gcn/raw/ind.{key}.{s}" for s in self._RAW]
            files += [f"{name}/geom-gcn/raw/{key}_split_0.6_0.2_{i}.npz" for i in range(10)]
            pyg_split = "geom-gcn"
        # the packaged copy holds the public split's graph (the random split needs no more)
        packaged = embedded_path(name) if self.split != "geom-gcn" else None
        try:
            # the guard turns a download that fails midway into DatasetDownloadError here,
            # where the packaged copy can still stand in
            with self.downloads.guard():
                root = self._root("Planetoid", files, f"{Planetoid.url}/ind.{key}.x")
                from torch_geometric.io import planetoid as reader

                # the raw files are pickles: rebuild data classes only
                with restricted_pickles(reader):
                    return Planetoid(str(root), name, split=pyg_split)[0]
        except DatasetNotFoundError:  # missing, and downloads off or failed
            if packaged is None:
                raise
            reason = "could not be downloaded" if self.downloads.enabled else "downloads are off"
            log.warning(
                "dataset %r: raw files not found in %s and %s; using the copy of its public "
                "split packaged with graphssl (%s)",
                name,
                self.data_dir / "Planetoid",
                reason,
                packaged.name,
            )
            return load_embedded(packaged)


class CitationFullDataModule(NodeDataModule):
    """CitationFull graphs (Bojchevski & Günnemann, ICLR 2018); here ``Cora_ML``."""

    def __init__(self, name: str = "Cora_ML", **kwargs: object) -> None:
        kwargs.setdefault("split", "random")
        super().__init__(name, **kwargs)  # type: ignore[arg-type]

    def load(self) -> Data:
        from torch_geometric.datasets import CitationFull

        key = self.name.lower()
        root = self._root("CitationFull", [f"{key}/raw/{key}.npz"], CitationFull.url.format(key))
        return CitationFull(str(root), self.name)[0]


class WebKBDataModule(NodeDataModule):
    """WebKB heterophilous graphs (Pei et al., ICLR 2020): Cornell, Texas, Wisconsin."""

    def __init__(self, name: str, **kwargs: object) -> None:
        kwargs.setdefault("split", "geom-gcn")
        super().__init__(name, **kwargs)  # type: ignore[arg-type]

    def load(self) -> Data:
        from torch_geometric.datasets import WebKB

        key = self.name.lower()
        files = [f"{key}/raw/out1_node_feature_label.txt", f"{key}/raw/out1_graph_edges.txt"]
        files += [f"{key}/raw/{key}_split_0.6_0.2_{i}.npz" for i in range(10)]
        root = self._root("WebKB", files, f"{WebKB.url}/new_data/{key}/out1_graph_edges.txt")
        return WebKB(str(root), self.name)[0]


class ActorDataModule(NodeDataModule):
    """Actor co-occurrence graph (Pei et al., ICLR 2020) with its 10 Geom-GCN splits."""

    def __init__(self, name: str = "Actor", **kwargs: object) -> None:
        kwargs.setdefault("split", "geom-gcn")
        super().__init__(name, **kwargs)  # type: ignore[arg-type]

    def load(self) -> Data:
        from torch_geometric.datasets import Actor

        files = ["raw/out1_node_feature_label.txt", "raw/out1_graph_edges.txt"]
        files += [f"raw/film_split_0.6_0.2_{i}.npz" for i in range(10)]
        root = self._root("Actor", files, f"{Actor.url}/new_data/film/out1_graph_edges.txt")
        return Actor(str(root))[0]


class AmazonDataModule(NodeDataModule):
    """Amazon co-purchase graphs (Shchur et al., 2018): ``Computers``, ``Photo``.

    They have no split of their own; the default is the seeded random 10/10/80 split of the
    self-supervised benchmarks (GRACE, BGRL).
    """

    _NAMES: ClassVar[dict[str, str]] = {"computers": "Computers", "photo": "Photo"}

    def __init__(self, name: str, **kwargs: Any) -> None:
        if name.lower() not in self._NAMES:
            raise ValueError(
                f"Amazon name must be one of {sorted(self._NAMES.values())}, got {name!r}"
            )
        kwargs.setdefault("split", "random")
        super().__init__(self._NAMES[name.lower()], **kwargs)

    def load(self) -> Data:
        from torch_geometric.datasets import Amazon

        file = f"amazon_electronics_{self.name.lower()}.npz"
        root = self._root("Amazon", [f"{self.name}/raw/{file}"], Amazon.url + file)
        return Amazon(str(root), self.name)[0]


class CoauthorDataModule(NodeDataModule):
    """Coauthor graphs of the Microsoft Academic Graph (Shchur et al., 2018): ``CS``,
    ``Physics``; seeded random 10/10/80 split by default."""

    _NAMES: ClassVar[dict[str, str]] = {"cs": "CS", "physics": "Physics"}

    def __init__(self, name: str, **kwargs: Any) -> None:
        if name.lower() not in self._NAMES:
            raise ValueError(
                f"Coauthor name must be one of {sorted(self._NAMES.values())}, got {name!r}"
            )
        kwargs.setdefault("split", "random")
        super().__init__(self._NAMES[name.lower()], **kwargs)

    def load(self) -> Data:
        from torch_geometric.datasets import Coauthor

        file = f"ms_academic_{self.name[:3].lower()}.npz"
        root = self._root("Coauthor", [f"{self.name}/raw/{file}"], Coauthor.url + file)
        return Coauthor(str(root), self.name)[0]


class WikiCSDataModule(NodeDataModule):
    """WikiCS (Mernyei & Cangea, 2020), undirected, with its own 20 training/validation splits
    and one test set (``split="public"``; ``split_index`` picks one, ``None`` evaluates all)."""

    def __init__(self, name: str = "WikiCS", **kwargs: Any) -> None:
        super().__init__(name, **kwargs)

    def load(self) -> Data:
        from torch_geometric.datasets import WikiCS

        root = self._root("WikiCS", ["raw/data.json"], f"{WikiCS.url}/data.json")
        data = WikiCS(str(root), is_undirected=True)[0]
        del data.stopping_mask
        return data


class FlickrDataModule(NodeDataModule):
    """Flickr (Zeng et al., GraphSAINT, ICLR 2020) with its own 50/25/25 masks."""

    _RAW = ("adj_full.npz", "feats.npy", "class_map.json", "role.json")

    def __init__(self, name: str = "Flickr", **kwargs: Any) -> None:
        super().__init__(name, **kwargs)

    def load(self) -> Data:
        from torch_geometric.datasets import Flickr

        url = f"https://drive.usercontent.google.com/download?id={Flickr.adj_full_id}"
        root = self._root("Flickr", [f"raw/{f}" for f in self._RAW], url)
        return Flickr(str(root))[0]


class KarateClubDataModule(NodeDataModule):
    """Zachary's karate club (34 nodes, 4 communities); bundled with PyG, no files needed."""

    def __init__(self, name: str = "KarateClub", **kwargs: object) -> None:
        kwargs.setdefault("split", "random")
        kwargs.setdefault("train_frac", 0.5)
        kwargs.setdefault("val_frac", 0.2)
        super().__init__(name, **kwargs)  # type: ignore[arg-type]

    def load(self) -> Data:
        from torch_geometric.datasets import KarateClub

        data = KarateClub()[0]
        del data.train_mask
        return data


#: :class:`SBMDataModule` draws the edges of more nodes than this block pair by block pair,
#: never holding an ``n x n`` matrix (at 20,000 nodes the whole matrix's draw peaked at 4.5 GB);
#: up to it, from the whole matrix, so the seeded graphs of small models stay as they are
DENSE_SBM_NODES = 4096


def _distinct_pairs(
    rows: int, cols: int, count: int, within: bool, gen: torch.Generator
) -> tuple[Tensor, Tensor]:
    """``count`` distinct cells ``(i, j)`` of a ``rows x cols`` grid, drawn uniformly (with
    ``within``, a square grid's cells above its diagonal, ``i < j``).

    Candidates are drawn with replacement until ``count`` distinct ones are in hand, then a
    uniform subset of them is kept, so memory follows ``count``, not the grid; a draw of more
    than half the grid's cells takes the grid whole instead.
    """
    cells = rows * (rows - 1) // 2 if within else rows * cols
    if 2 * count > cells:
        if within:
            i, j = torch.triu_indices(rows, rows, offset=1)
        else:
            i, j = torch.arange(rows).repeat_interleave(cols), torch.arange(cols).repeat(rows)
        keep = torch.randperm(cells, generator=gen)[:count]
        return i[keep], j[keep]
    keys = torch.empty(0, dtype=torch.long)
    while keys.numel() < count:
        draw = count - keys.numel() + (count - keys.numel()) // 8 + 16
        i = torch.randint(rows, (draw,), generator=gen)
        j = torch.randint(cols, (draw,), generator=gen)
        if within:  # an unordered pair of distinct nodes, from either of its two orders
            apart = i != j
            i, j = torch.minimum(i, j)[apart], torch.maximum(i, j)[apart]
        keys = torch.unique(torch.cat([keys, i * cols + j]))
    keys = keys[torch.randperm(keys.numel(), generator=gen)[:count]]
    return keys // cols, keys % cols


def sparse_sbm_edges(
    block_sizes: Sequence[int], p_in: float, p_out: float, gen: torch.Generator
) -> Tensor:
    """The edges ``(2, E)`` (each once, ``i < j``) of a stochastic block model drawn block pair by
    block pair: a binomial number of edges for the pair's cells, then that many distinct cells
    (:func:`_distinct_pairs`). The same distribution as one Bernoulli draw per cell, in memory
    that follows the edges."""
    offsets = [0]
    for size in block_sizes:
        offsets.append(offsets[-1] + size)
    parts = [torch.empty(2, 0, dtype=torch.long)]
    for a, size_a in enumerate(block_sizes):
        for b in range(a, len(block_sizes)):
            p, size_b = (p_in if a == b else p_out), block_sizes[b]
            cells = size_a * (size_a - 1) // 2 if a == b else size_a * size_b
            if p <= 0 or cells == 0:
                continue
            trials = torch.tensor(float(cells), dtype=torch.float64)
            count = int(torch.binomial(trials, torch.tensor(p, dtype=torch.float64), generator=gen))
            i, j = _distinct_pairs(size_a, size_b, count, a == b, gen)
            parts.append(torch.stack([i + offsets[a], j + offsets[b]]))
    return torch.cat(parts, dim=1)


class SBMDataModule(NodeDataModule):
    """A seeded stochastic block model with class-dependent Gaussian features (for tests, and for
    generated graphs of a chosen size: above :data:`DENSE_SBM_NODES` nodes the edges are drawn
    block pair by block pair, in memory that follows the edges).

    Args:
        num_blocks: number of communities (= classes) (default: ``2``).
        block_size: nodes per community (default: ``100``).
        p_in: edge probability inside a community (default: ``0.1``).
        p_out: edge probability across communities (default: ``0.01``).
        num_features: feature dimension (default: ``16``).
        feature_noise: standard deviation of the features around their class mean
            (default: ``1.0``).
    """

    def __init__(
        self,
        name: str = "SBM",
        num_blocks: int = 2,
        block_size: int = 100,
        p_in: float = 0.1,
        p_out: float = 0.01,
        num_features: int = 16,
        feature_noise: float = 1.0,
        **kwargs: object,
    ) -> None:
        kwargs.setdefault("split", "random")
        kwargs.setdefault("train_frac", 0.5)
        kwargs.setdefault("val_frac", 0.2)
        super().__init__(name, **kwargs)  # type: ignore[arg-type]
        if num_blocks < 1 or block_size < 1:
            raise ValueError(
                f"num_blocks and block_size must be >= 1, got {num_blocks} and {block_size}"
            )
        for pname, p in (("p_in", p_in), ("p_out", p_out)):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{pname} must be a probability in [0, 1], got {p}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.p_in = p_in
        self.p_out = p_out
        self.feature_dim = num_features
        self.feature_noise = feature_noise

    def load(self) -> Data:
        gen = torch.Generator().manual_seed(self.seed)
        n = self.num_blocks * self.block_size
        y = torch.arange(self.num_blocks).repeat_interleave(self.block_size)
        if n > DENSE_SBM_NODES:
            sizes = [self.block_size] * self.num_blocks
            upper_edges = sparse_sbm_edges(sizes, self.p_in, self.p_out, gen)
        else:
            same = y.view(-1, 1) == y.view(1, -1)
            prob = torch.where(same, torch.tensor(self.p_in), torch.tensor(self.p_out))
            upper = torch.triu(torch.rand(n, n, generator=gen) < prob, diagonal=1)
            upper_edges = upper.nonzero().t().contiguous()
        edge_index = to_undirected(upper_edges, num_nodes=n)
        means = torch.randn(self.num_blocks, self.feature_dim, generator=gen)
        x = means[y] + self.feature_noise * torch.randn(n, self.feature_dim, generator=gen)
        return Data(x=x, edge_index=edge_index, y=y, num_nodes=n)
