"""Graph-level DataModules: TUDataset, MoleculeNet and a seeded synthetic set of graphs.

A graph-level DataModule holds a list of small graphs with one label (or target vector) per
graph. Self-supervised methods train on shuffled mini-batches of *all* graphs (labels unused);
evaluation embeds every graph in dataset order (:meth:`GraphDataModule.eval_dataloader`) and
probes the embeddings with seeded stratified k-fold cross-validation, the protocol of
InfoGraph (Sun et al., ICLR 2020) and GraphCL (You et al., NeurIPS 2020). Each fold's training
part keeps a stratified validation subset so a probe can select its regularisation on it; the
fold itself is the test set.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor
from torch_geometric.data import Batch, Data
from torch_geometric.loader import DataLoader
from torch_geometric.utils import degree

from graphssl.data.base import DataModule, Split
from graphssl.data.cache import load_with_processed_repair, processed_root
from graphssl.data.paths import Downloads, default_data_dir

Task = Literal["classification", "regression", "multilabel"]
GraphSplitName = Literal["kfold", "random"]

__all__ = [
    "GraphDataModule",
    "MoleculeNetDataModule",
    "SyntheticGraphsDataModule",
    "TUDataModule",
    "kfold_splits",
    "random_graph_splits",
]


# ---------------------------------------------------------------------------- split helpers
def _grouped_order(n: int, strata: Tensor | None, generator: torch.Generator) -> Tensor:
    """A random order of ``range(n)``, grouped by stratum (random order inside each stratum)."""
    perm = torch.randperm(n, generator=generator)
    if strata is None:
        return perm
    return perm[torch.sort(strata[perm], stable=True).indices]


def _spread(n: int, k: int) -> Tensor:
    """``k`` positions spread evenly over ``range(n)`` (on a class-grouped order: stratified)."""
    if k <= 0:
        return torch.empty(0, dtype=torch.long)
    return ((torch.arange(k, dtype=torch.float64) + 0.5) * n / k).long().clamp_max(n - 1)


def _carve(order: Tensor, fraction: float) -> tuple[Tensor, Tensor]:
    """Split ``order`` into (rest, picked) with ``round(fraction * len)`` picked rows, spread
    evenly over ``order`` (at least one when ``fraction > 0`` and ``order`` has two rows)."""
    n = order.numel()
    k = round(fraction * n)
    if fraction > 0 and n >= 2:
        k = min(max(k, 1), n - 1)
    picked = torch.zeros(n, dtype=torch.bool)
    picked[_spread(n, k)] = True
    return order[~picked], order[picked]


def _check_strata(strata: Tensor | None, n: int) -> Tensor | None:
    if strata is None:
        return None
    if strata.ndim != 1 or strata.numel() != n:
        raise ValueError(
            f"strata must be a 1-D tensor with one entry per graph ({n}), got "
            f"shape {tuple(strata.shape)}"
        )
    return strata.long()


def kfold_splits(
    num_graphs: int,
    num_folds: int = 10,
    val_frac: float = 0.1,
    *,
    strata: Tensor | None = None,
    generator: torch.Generator,
) -> list[Split]:
    """Seeded (stratified) k-fold cross-validation splits.

    Every graph is in exactly one test fold; fold sizes differ by at most one, and with
    ``strata`` (class ids ``[G]``) every fold holds each class in proportion. Each fold's
    training part is split again: ``val_frac`` of it (stratified too) becomes the validation
    rows on which a probe selects its hyperparameters.

    Args:
        num_graphs: number of graphs ``G``.
        num_folds: ``k`` (default: ``10``).
        val_frac: fraction of each fold's training part used for validation (default: ``0.1``).
        strata: class id per graph for stratification, or ``None`` (default: ``None``).
        generator: the seeded generator every random choice is drawn from.
    """
    if not 2 <= num_folds <= num_graphs:
        raise ValueError(
            f"num_folds must be in [2, number of graphs = {num_graphs}], got {num_folds}"
        )
    if not 0.0 <= val_frac < 1.0:
        raise ValueError(f"val_frac must be in [0, 1), got {val_frac}")
    strata = _check_strata(strata, num_graphs)
    order = _grouped_order(num_graphs, strata, generator)
    fold_of = torch.empty(num_graphs, dtype=torch.long)
    fold_of[order] = torch.arange(num_graphs) % num_folds
    out = []
    for fold in range(num_folds):
        test = (fold_of == fold).nonzero().view(-1)
        rest = (fold_of != fold).nonzero().view(-1)
        sub = None if strata is None else strata[rest]
        rest = rest[_grouped_order(rest.numel(), sub, generator)]
        train, val = _carve(rest, val_frac)
        out.append(Split(train=train.sort().values, val=val.sort().values, test=test))
    return out


def random_graph_splits(
    num_graphs: int,
    train_frac: float = 0.8,
    val_frac: float = 0.1,
    num_splits: int = 1,
    *,
    strata: Tensor | None = None,
    generator: torch.Generator,
) -> list[Split]:
    """``num_splits`` seeded random train/val/test splits (stratified when ``strata`` is given);
    the test fraction is ``1 - train_frac - val_frac``."""
    if not (0 < train_frac < 1 and 0 <= val_frac < 1 and train_frac + val_frac < 1):
        raise ValueError(
            f"split fractions must satisfy 0 < train_frac < 1, 0 <= val_frac and "
            f"train_frac + val_frac < 1, got train_frac={train_frac}, val_frac={val_frac}"
        )
    if num_splits < 1:
        raise ValueError(f"num_splits must be >= 1, got {num_splits}")
    strata = _check_strata(strata, num_graphs)
    out = []
    for _ in range(num_splits):
        order = _grouped_order(num_graphs, strata, generator)
        rest, test = _carve(order, 1.0 - train_frac - val_frac)
        train, val = _carve(rest, val_frac / (train_frac + val_frac))
        out.append(Split(train=train.sort().values, val=val.sort().values, test=test.sort().values))
    return out


# ------------------------------------------------------------------------------ base class
class GraphDataModule(DataModule):
    """A DataModule of many small graphs with one label (or target vector) per graph.

    Subclasses implement :meth:`load` (the graphs, each with ``x``, ``edge_index`` and ``y``).
    Integer node features are cast to float. Self-supervised training sees every graph
    (labels unused); probes are evaluated on :meth:`splits`.

    Args:
        name: dataset name.
        data_dir: folder holding the raw files (default: ``$GRAPHSSL_DATA_DIR`` or ``data/``).
        cache_dir: writable folder for copies of read-only sources (default: ``outputs/cache``).
        batch_size: graphs per training mini-batch (default: ``128``).
        eval_batch_size: graphs per batch when embedding for evaluation (default: ``512``).
        split: ``"kfold"`` (stratified k-fold cross-validation) or ``"random"`` (seeded
            train/val/test fractions) (default: ``"kfold"``).
        num_folds: ``k`` for ``split="kfold"`` (default: ``10``).
        fold_index: evaluate only this fold; ``None`` evaluates all (default: ``None``).
        train_frac: training fraction for ``split="random"`` (default: ``0.8``).
        val_frac: ``"kfold"``: fraction of each fold's training part held out for validation;
            ``"random"``: validation fraction of all graphs (default: ``0.1``).
        num_splits: number of random splits for ``split="random"`` (default: ``1``).
        seed: seed of the splits and of the training shuffle (default: ``0``).
        download: let PyG download missing raw files (config ``paths.download``)
            (default: ``False``).
        download_timeout: seconds for each connect and read of a download (config
            ``paths.download_timeout``) (default: ``10.0``).
    """

    is_graph_level = True
    #: what ``labels`` holds: class ids ``[G]`` (``"classification"``), real targets ``[G]`` or
    #: ``[G, T]`` (``"regression"``), or ``{0, 1, NaN}`` ``[G, T]`` (``"multilabel"``).
    task: Task = "classification"

    def __init__(
        self,
        name: str,
        data_dir: str | Path | None = None,
        cache_dir: str | Path | None = None,
        batch_size: int = 128,
        eval_batch_size: int = 512,
        split: GraphSplitName = "kfold",
        num_folds: int = 10,
        fold_index: int | None = None,
        train_frac: float = 0.8,
        val_frac: float = 0.1,
        num_splits: int = 1,
        seed: int = 0,
        download: bool = False,
        download_timeout: float = 10.0,
    ) -> None:
        super().__init__(name=name, seed=seed)
        if split not in ("kfold", "random"):
            raise ValueError(f"split must be 'kfold' or 'random', got {split!r}")
        if batch_size < 1 or eval_batch_size < 1:
            raise ValueError(
                f"batch_size and eval_batch_size must be >= 1, got {batch_size} "
                f"and {eval_batch_size}"
            )
        self.data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
        self.cache_dir = Path(cache_dir) if cache_dir is not None else Path("outputs/cache")
        self.batch_size = int(batch_size)
        self.eval_batch_size = int(eval_batch_size)
        self.split = split
        self.num_folds = int(num_folds)
        self.fold_index = fold_index
        self.train_frac = float(train_frac)
        self.val_frac = float(val_frac)
        self.num_splits = int(num_splits)
        self.downloads = Downloads(name, download, download_timeout, self.cache_dir)
        self._graphs: list[Data] = []
        self._labels: Tensor | None = None
        self._splits: list[Split] = []
        self._collated: Batch | None = None
        self._shuffle_generator = torch.Generator()

    # ------------------------------------------------------------------ subclass hook
    def load(self) -> Sequence[Data]:
        """The graphs, in a fixed order (each with ``x``, ``edge_index`` and ``y``)."""
        raise NotImplementedError

    def _source(self, folder: str, files: Sequence[str], url: str | None = None) -> Path:
        """Check ``files`` (relative to ``data_dir/folder``) and return a writable copy of
        ``data_dir/folder`` (the folder itself when writable); with downloads on, missing
        files are fetched from ``url`` by the PyG class."""
        self.downloads.cache_dir = self.cache_dir / Path(folder).parent
        return self.downloads.root(self.data_dir / folder, files, url)

    # ------------------------------------------------------------------ DataModule
    def _setup(self) -> None:
        with self.downloads.guard():
            graphs = list(load_with_processed_repair(self.load))
        if not graphs:
            raise ValueError(f"dataset {self.name!r} has no graphs")
        for i, g in enumerate(graphs):
            if g.x is None:
                raise ValueError(
                    f"graph {i} of dataset {self.name!r} has no node features "
                    f"(x is None); expected a [num_nodes, F] feature matrix"
                )
            if not g.x.is_floating_point():
                g.x = g.x.float()
        self._graphs = graphs
        self._labels = self._collect_labels(graphs)
        self._shuffle_generator = torch.Generator().manual_seed(self.seed)
        self._splits = self._make_splits()

    def _collect_labels(self, graphs: list[Data]) -> Tensor | None:
        ys = [getattr(g, "y", None) for g in graphs]
        if any(y is None for y in ys):
            return None
        rows = [y.reshape(1, -1) for y in ys]  # type: ignore[union-attr]
        widths = {r.size(1) for r in rows}
        if len(widths) != 1:
            raise ValueError(
                f"graphs of dataset {self.name!r} have labels of different sizes "
                f"{sorted(widths)}; expected one label (or target vector) per graph"
            )
        y = torch.cat(rows, dim=0)
        if self.task == "classification":
            if y.size(1) != 1:
                raise ValueError(
                    f"dataset {self.name!r} has {y.size(1)} targets per graph but "
                    f"task='classification' expects one class id"
                )
            return y.view(-1).long()
        y = y.float()
        if self.task == "regression" and y.size(1) == 1:
            return y.view(-1)
        return y

    def _strata(self) -> Tensor | None:
        return self._labels if self.task == "classification" else None

    def _make_splits(self) -> list[Split]:
        gen = torch.Generator().manual_seed(self.seed)
        n = len(self._graphs)
        if self.split == "random":
            return random_graph_splits(
                n,
                self.train_frac,
                self.val_frac,
                self.num_splits,
                strata=self._strata(),
                generator=gen,
            )
        folds = kfold_splits(n, self.num_folds, self.val_frac, strata=self._strata(), generator=gen)
        if self.fold_index is None:
            return folds
        if not 0 <= self.fold_index < self.num_folds:
            raise ValueError(
                f"fold_index must be in [0, {self.num_folds - 1}] for "
                f"{self.name!r}, got {self.fold_index}"
            )
        return [folds[self.fold_index]]

    @property
    def graphs(self) -> list[Data]:
        """The graphs in evaluation order."""
        self._require_setup()
        return self._graphs

    @property
    def num_graphs(self) -> int:
        return len(self.graphs)

    @property
    def data(self) -> Data:
        """All graphs collated into one ``Batch`` (in evaluation order; built once, on demand).

        Training and extraction never need it (they use the loaders); it is there for
        statistics and for code written against node-level DataModules.
        """
        self._require_setup()
        if self._collated is None:
            self._collated = Batch.from_data_list(self._graphs)
        return self._collated

    @property
    def num_features(self) -> int:
        return int(self.graphs[0].num_node_features)

    def graph_stats(self) -> dict[str, float]:
        """``data/num_graphs``, ``data/num_nodes`` and ``data/num_edges`` summed over the
        graphs (edges undirected, without self-loops, as for node-level datasets)."""
        from graphssl.data.corruptions import undirected_edge_count

        batch = self.data
        return {
            "data/num_graphs": float(len(self.graphs)),
            "data/num_nodes": float(batch.num_nodes or 0),
            "data/num_edges": float(undirected_edge_count(batch.edge_index)),
        }

    @property
    def labels(self) -> Tensor | None:
        """One label per graph in :meth:`eval_dataloader` order: class ids ``[G]``
        (classification), targets ``[G]`` / ``[G, T]`` (regression) or ``[G, T]`` with NaN for
        missing labels (multilabel); ``None`` when the graphs have no ``y``."""
        self._require_setup()
        return self._labels

    @property
    def num_classes(self) -> int:
        """Classes (classification), tasks (multilabel) or ``0`` (regression)."""
        y = self.labels
        if y is None or y.numel() == 0 or self.task == "regression":
            return 0
        if self.task == "multilabel":
            return int(y.size(1))
        return int(y.max()) + 1

    @property
    def num_tasks(self) -> int:
        """Targets per graph (``1`` for classification)."""
        y = self.labels
        return 1 if y is None or y.ndim == 1 else int(y.size(1))

    def splits(self) -> Sequence[Split]:
        self._require_setup()
        return self._splits

    # ------------------------------------------------------------------ loaders
    def train_dataloader(self) -> DataLoader:
        """Shuffled mini-batches of all graphs; the order comes from one generator seeded at
        setup, so every epoch differs and every run repeats. A last batch of a single graph is
        dropped (contrastive losses need two graphs)."""
        graphs = self.graphs
        return DataLoader(
            graphs,
            batch_size=self.batch_size,
            shuffle=True,
            generator=self._shuffle_generator,
            drop_last=len(graphs) % self.batch_size == 1 and len(graphs) > 1,
        )

    def eval_dataloader(self) -> Iterable[Data]:
        """Every graph once, in dataset order (the order of :attr:`labels`)."""
        return DataLoader(self.graphs, batch_size=self.eval_batch_size, shuffle=False)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, task={self.task!r}, "
            f"split={self.split!r}, seed={self.seed})"
        )


# ------------------------------------------------------------------------------- TUDataset
#: TUDataset names served here and the optional raw files each needs besides A,
#: graph_indicator and graph_labels (node labels give the node features).
TU_DATASETS: dict[str, tuple[str, ...]] = {
    "MUTAG": ("node_labels",),
    "PTC_MR": ("node_labels",),
    "ENZYMES": ("node_labels",),
    "PROTEINS": ("node_labels",),
    "NCI1": ("node_labels",),
    "IMDB-BINARY": (),
}


def max_degree(graphs: Iterable[Data]) -> int:
    """The largest node degree (number of outgoing edges) over ``graphs``."""
    best = 0
    for g in graphs:
        if g.edge_index.numel():
            best = max(best, int(degree(g.edge_index[0], int(g.num_nodes)).max()))
    return best


class TUDataModule(GraphDataModule):
    """TUDataset graph classification (Morris et al., 2020, https://arxiv.org/abs/2007.08663):
    ``MUTAG``, ``PTC_MR``, ``ENZYMES``, ``PROTEINS``, ``NCI1``, ``IMDB-BINARY``.

    Node features are the one-hot node labels (``use_node_attr=True`` appends the continuous
    attributes of ENZYMES and PROTEINS). Graphs without node features (IMDB-BINARY) get
    one-hot degrees (PyG's ``OneHotDegree``) up to the largest degree in the dataset. Only the
    cleaned IMDB-BINARY (Ivanov et al., 2019) exists offline, so ``cleaned`` defaults to
    ``True`` for it.

    Args:
        name: one of :data:`TU_DATASETS` (case-insensitive).
        use_node_attr: append continuous node attributes (default: ``False``).
        cleaned: use the ``raw_cleaned/`` files (default: ``None``: ``True`` for IMDB-BINARY
            only).
        **kwargs: :class:`GraphDataModule` arguments (splits, batch sizes, seed, folders).
    """

    def __init__(
        self, name: str, use_node_attr: bool = False, cleaned: bool | None = None, **kwargs: Any
    ) -> None:
        key = name.upper()
        if key not in TU_DATASETS:
            raise ValueError(
                f"Could not resolve TUDataset {name!r} among choices {sorted(TU_DATASETS)}"
            )
        super().__init__(key, **kwargs)
        self.use_node_attr = use_node_attr
        self.cleaned = (key == "IMDB-BINARY") if cleaned is None else bool(cleaned)

    def raw_files(self) -> list[str]:
        """Raw files this dataset needs, relative to ``<data_dir>/TUDataset/<NAME>``."""
        extra = list(TU_DATASETS[self.name])
        if self.use_node_attr and self.name in ("ENZYMES", "PROTEINS"):
            extra.append("node_attributes")
        raw = "raw_cleaned" if self.cleaned else "raw"
        return [
            f"{raw}/{self.name}_{part}.txt"
            for part in ("A", "graph_indicator", "graph_labels", *extra)
        ]

    def load(self) -> Sequence[Data]:
        from torch_geometric.datasets import TUDataset
        from torch_geometric.transforms import OneHotDegree

        url = f"{TUDataset.cleaned_url if self.cleaned else TUDataset.url}/{self.name}.zip"
        folder = self._source(f"TUDataset/{self.name}", self.raw_files(), url)
        dataset = TUDataset(
            str(folder.parent), self.name, use_node_attr=self.use_node_attr, cleaned=self.cleaned
        )
        graphs = [dataset[i] for i in range(len(dataset))]
        if graphs and graphs[0].x is None:
            one_hot = OneHotDegree(max_degree(graphs))
            graphs = [one_hot(g) for g in graphs]
        return graphs


# ----------------------------------------------------------------------------- MoleculeNet
#: lower-case key → (PyG name, raw CSV, task).
MOLECULENET_DATASETS: dict[str, tuple[str, str, Task]] = {
    "esol": ("ESOL", "delaney-processed.csv", "regression"),
    "freesolv": ("FreeSolv", "SAMPL.csv", "regression"),
    "lipo": ("Lipo", "Lipophilicity.csv", "regression"),
    "bace": ("BACE", "bace.csv", "classification"),
    "bbbp": ("BBBP", "BBBP.csv", "classification"),
    "clintox": ("ClinTox", "clintox.csv", "multilabel"),
    "tox21": ("Tox21", "tox21.csv", "multilabel"),
    "hiv": ("HIV", "HIV.csv", "classification"),
}


def require_rdkit(dataset: str) -> None:
    """Raise an ImportError naming the install command when RDKit is missing."""
    try:
        import rdkit  # noqa: F401
    except ImportError as err:
        raise ImportError(
            f"dataset {dataset!r} (MoleculeNet) needs RDKit to turn SMILES into graphs, and it "
            f"is not installed: run `pip install rdkit` (or `pip install -e '.[molecules]'`)"
        ) from err


class MoleculeNetDataModule(GraphDataModule):
    """MoleculeNet molecular property prediction (Wu et al., 2018,
    https://arxiv.org/abs/1703.00564): ``ESOL``, ``FreeSolv``, ``Lipo`` (regression), ``BACE``,
    ``BBBP``, ``HIV`` (binary classification), ``ClinTox``, ``Tox21`` (multi-task, NaN =
    missing).

    Atoms carry PyG's 9 integer features (``from_smiles``), cast to float. Needs RDKit
    (``pip install rdkit``). Splits default to one seeded random 80/10/10 split (stratified
    for the binary tasks); scaffold splits are not provided.

    ``max_molecules`` keeps a seeded random subset of the raw CSV's molecules (in file order)
    *before* RDKit turns them into graphs, so a subset of HIV's 41k molecules costs only its own
    processing time; the subset's CSV and its processed graphs are cached under ``cache_dir``.
    The subset depends on ``subset_seed`` only, never on ``seed``, so runs with different seeds
    embed the same molecules. Molecules RDKit cannot parse are skipped after the subset is drawn,
    so a subset may hold a few graphs fewer than ``max_molecules``.

    Args:
        name: one of ``ESOL``, ``FreeSolv``, ``Lipo``, ``BACE``, ``BBBP``, ``ClinTox``,
            ``Tox21``, ``HIV`` (case-insensitive).
        max_molecules: keep at most this many molecules of the raw CSV (default: ``None``, all).
        subset_seed: seed of that subset (default: ``0``).
        **kwargs: :class:`GraphDataModule` arguments (default ``split="random"``).
    """

    def __init__(
        self, name: str, max_molecules: int | None = None, subset_seed: int = 0, **kwargs: Any
    ) -> None:
        key = name.lower()
        if key not in MOLECULENET_DATASETS:
            choices = sorted(v[0] for v in MOLECULENET_DATASETS.values())
            raise ValueError(
                f"Could not resolve MoleculeNet dataset {name!r} among choices {choices}"
            )
        if max_molecules is not None and (
            isinstance(max_molecules, bool)
            or not isinstance(max_molecules, int)
            or max_molecules < 2
        ):
            raise ValueError(
                f"max_molecules must be null (every molecule) or an integer >= 2, got "
                f"{max_molecules!r}"
            )
        kwargs.setdefault("split", "random")
        pyg_name, self._csv, task = MOLECULENET_DATASETS[key]
        super().__init__(pyg_name, **kwargs)
        self.task = task
        self._key = key
        self.max_molecules = max_molecules
        self.subset_seed = int(subset_seed)

    def load(self) -> Sequence[Data]:
        from torch_geometric.datasets import MoleculeNet

        url = MoleculeNet.url.format(MoleculeNet.names[self._key][1])
        folder = self._source(f"MoleculeNet/{self._key}", [f"raw/{self._csv}"], url)
        require_rdkit(self.name)
        if self.max_molecules is not None:
            folder = self._subset_root(folder, self.max_molecules)
        dataset = MoleculeNet(str(folder.parent), self.name)
        return [dataset[i] for i in range(len(dataset))]

    def _subset_root(self, folder: Path, size: int) -> Path:
        """A PyG root whose raw CSV holds ``size`` seeded molecules of ``folder``'s (``folder``
        itself when it has no more)."""
        text = (folder / "raw" / self._csv).read_text()
        header, rows = subset_csv_rows(text)
        if len(rows) <= size:
            return folder
        gen = torch.Generator().manual_seed(self.subset_seed)
        keep = torch.sort(torch.randperm(len(rows), generator=gen)[:size]).values.tolist()
        source = (
            self.cache_dir
            / "MoleculeNet"
            / "subsets"
            / f"{self._key}-n{size}-seed{self.subset_seed}"
            / self._key
        )
        target = source / "raw" / self._csv
        content = "\n".join([header, *(rows[i] for i in keep)]) + "\n"
        if not target.is_file() or target.read_text() != content:
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
            partial.write_text(content)
            os.replace(partial, target)  # concurrent runs write the same bytes
        return processed_root(source, self.cache_dir / "MoleculeNet")


def subset_csv_rows(text: str) -> tuple[str, list[str]]:
    """The header and the molecule lines of a MoleculeNet CSV read in text mode, as PyG's
    ``MoleculeNet`` reads them: lines split on newlines, the last one dropped (the file ends with
    a newline), empty ones skipped."""
    lines = text.split("\n")
    return lines[0], [line for line in lines[1:-1] if line]


# ------------------------------------------------------------------------------- synthetic
class SyntheticGraphsDataModule(GraphDataModule):
    """A seeded two-class set of small graphs that needs no files (for tests and demos).

    Class 0 graphs are cycles, class 1 graphs random recursive trees, each with a size drawn
    uniformly from ``[min_nodes, max_nodes]``; classes alternate, so they are balanced. Node
    features are one-hot degrees (capped at ``num_features - 1``) plus Gaussian noise.

    Args:
        num_graphs: number of graphs (default: ``120``).
        min_nodes: smallest graph (default: ``6``).
        max_nodes: largest graph (default: ``16``).
        num_features: feature size (default: ``8``).
        feature_noise: standard deviation of the noise added to the features (default: ``0.1``).
        **kwargs: :class:`GraphDataModule` arguments (no folders needed).
    """

    def __init__(
        self,
        name: str = "SyntheticGraphs",
        num_graphs: int = 120,
        min_nodes: int = 6,
        max_nodes: int = 16,
        num_features: int = 8,
        feature_noise: float = 0.1,
        **kwargs: Any,
    ) -> None:
        super().__init__(name, **kwargs)
        if num_graphs < 2:
            raise ValueError(f"num_graphs must be >= 2, got {num_graphs}")
        if not 3 <= min_nodes <= max_nodes:
            raise ValueError(
                f"need 3 <= min_nodes <= max_nodes, got min_nodes={min_nodes}, "
                f"max_nodes={max_nodes}"
            )
        if num_features < 2:
            raise ValueError(f"num_features must be >= 2, got {num_features}")
        self.num_graphs_ = int(num_graphs)
        self.min_nodes = int(min_nodes)
        self.max_nodes = int(max_nodes)
        self.feature_dim = int(num_features)
        self.feature_noise = float(feature_noise)

    def load(self) -> Sequence[Data]:
        gen = torch.Generator().manual_seed(self.seed)
        graphs = []
        for i in range(self.num_graphs_):
            label = i % 2
            n = int(torch.randint(self.min_nodes, self.max_nodes + 1, (1,), generator=gen))
            if label == 0:
                src = torch.arange(n)
                dst = (src + 1) % n
            else:
                dst = torch.arange(1, n)
                src = (torch.rand(n - 1, generator=gen) * dst).long()  # parent before child
            edge_index = torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])
            deg = degree(edge_index[0], n).long().clamp_max(self.feature_dim - 1)
            x = torch.nn.functional.one_hot(deg, self.feature_dim).float()
            x = x + self.feature_noise * torch.randn(n, self.feature_dim, generator=gen)
            graphs.append(Data(x=x, edge_index=edge_index, y=torch.tensor([label]), num_nodes=n))
        return graphs
