"""Nearest-neighbour graphs built from image pixels, as node-level DataModules.

Tsitsulin et al. (2023, https://arxiv.org/abs/2305.16562, §4.2, Table 2) add MNIST and
CIFAR-10 to their sparsification study as "ε-nearest neighbor graphs with average degree 100"
(d̄ = |E| / |V| = 99 in their Table 2). :func:`epsilon_graph` builds such a graph: the
``round(n · avg_degree)`` most similar pairs of rows, i.e. a global similarity threshold ε,
so that the graph has exactly ``avg_degree`` undirected edges per node. Candidate pairs come from
each row's ``candidates · avg_degree`` nearest neighbours (a symmetric kNN graph), found by an
exhaustive float32 search (:class:`~graphssl.neighbors.NeighborIndex`: faiss, or chunked torch
matmuls), so memory stays ``O(n · k)`` and never ``O(n²)``; a pair within ε that is in neither
row's candidate list is missed, which only happens at rows with more than
``candidates · avg_degree`` neighbours within ε.

Exactness. The graph is defined by float64 similarities, with ties broken by the lower row
index (candidate lists) and the lower pair key (the threshold). The float32 search only
proposes candidates: the pairs whose float32 similarity is within its rounding-error bound of a
row's last candidate or of the global threshold are re-scored in float64, so the edges are the
same whichever search backend (faiss or torch) or ``chunk_size`` found the candidates.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
import warnings
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Data

from graphssl.data.node import NodeDataModule
from graphssl.data.paths import require_raw_files
from graphssl.neighbors import BACKENDS, Backend, NeighborIndex

__all__ = [
    "FashionMNISTKNNGraphDataModule",
    "epsilon_graph",
    "load_edge_cache",
    "save_edge_cache",
]

Metric = Literal["cosine", "l2"]

_FMNIST_RAW = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
#: Bumped whenever the edges a configuration produces change; part of the cache file name.
_CACHE_VERSION = 2


def epsilon_graph(
    x: Tensor,
    avg_degree: float,
    metric: Metric = "cosine",
    candidates: float = 2.0,
    chunk_size: int = 1024,
    backend: Backend | str = "auto",
) -> Tensor:
    """The ``round(n · avg_degree)`` most similar pairs of rows of ``x`` as a symmetric graph.

    Args:
        x: ``(N, F)`` float features.
        avg_degree: undirected edges per node ``|E| / |V|`` (Table 2's d̄); must be ``> 0``.
        metric: ``"cosine"`` similarity or (negative squared) ``"l2"`` distance
            (default: ``"cosine"``).
        candidates: each row contributes its ``ceil(candidates · avg_degree)`` nearest rows as
            candidate pairs (default: ``2.0``).
        chunk_size: query rows per nearest-neighbour search block (default: ``1024``).
        backend: nearest-neighbour search, ``"faiss"``, ``"torch"`` or ``"auto"`` (faiss where
            installed); the edges are the same with either (default: ``"auto"``).

    Returns:
        ``[2, 2·|E|]`` coalesced ``edge_index`` with both directions of each edge and no
        self-loops.
    """
    if x.ndim != 2:
        raise ValueError(f"x must be an (N, F) matrix, got shape {tuple(x.shape)}")
    if not (math.isfinite(avg_degree) and avg_degree > 0):
        raise ValueError(f"avg_degree must be a finite number > 0, got {avg_degree!r}")
    if metric not in ("cosine", "l2"):
        raise ValueError(f"metric must be 'cosine' or 'l2', got {metric!r}")
    if candidates < 1 or chunk_size < 1:
        raise ValueError(
            f"candidates must be >= 1 and chunk_size >= 1, got {candidates} and {chunk_size}"
        )
    n = x.shape[0]
    if n < 2:
        return torch.empty(2, 0, dtype=torch.long)
    x = x.detach().float().cpu()
    if metric == "cosine":
        x = F.normalize(x, dim=1)
    scorer = _PairScores(x, metric)
    m = min(n - 1, math.ceil(candidates * avg_degree))
    row, col, score = _candidate_lists(x, m, scorer, chunk_size, backend)
    lo, hi = torch.minimum(row, col), torch.maximum(row, col)
    key, inverse = torch.unique(lo * n + hi, return_inverse=True)
    approx = torch.full((key.numel(),), -math.inf, dtype=torch.float64).scatter_reduce(
        0, inverse, score, reduce="amax"
    )
    target = round(n * avg_degree)
    if target > key.numel():
        warnings.warn(
            f"epsilon_graph: only {key.numel()} candidate pairs for {target} edges "
            f"(avg_degree={avg_degree:g}, n={n}); raise `candidates`",
            stacklevel=2,
        )
        target = key.numel()
    keep = key[_top_pairs(key // n, key % n, approx, target, scorer)]
    lo, hi = keep // n, keep % n
    row, col = torch.cat([lo, hi]), torch.cat([hi, lo])
    order = torch.argsort(row * n + col)
    return torch.stack([row[order], col[order]])


class _PairScores:
    """Exact similarities of pairs of rows, and bounds on the float32 search's error.

    The exact similarity of rows ``i`` and ``j`` is a float64 multiply-and-sum over the
    features (``a·b``, or ``-Σ (a - b)²`` for ``"l2"``): symmetric in ``i`` and ``j`` and
    independent of how many pairs are scored together, so every code path ranks the same
    values. A float32 search returns it up to ``bound(i, j)`` = ``(d + 2)·eps32`` (twice the
    rounding-error bound of a length-``d`` float32 dot product) times ``|a|·|b|`` (``"ip"``) or
    ``(|a| + |b|)²`` (``"l2"``).
    """

    _BLOCK = 1024  # pairs scored at once: small float64 temporaries stay in cache

    def __init__(self, x: Tensor, metric: Metric) -> None:
        self.x = x
        self.metric = metric
        self.norm = x.double().norm(dim=1)
        self.max_norm = float(self.norm.max())
        self.eps = (x.shape[1] + 2) * torch.finfo(torch.float32).eps

    def exact(self, i: Tensor, j: Tensor) -> Tensor:
        out = torch.empty(i.numel(), dtype=torch.float64)
        for start in range(0, i.numel(), self._BLOCK):
            a = self.x[i[start : start + self._BLOCK]].double()
            b = self.x[j[start : start + self._BLOCK]].double()
            if self.metric == "cosine":
                out[start : start + self._BLOCK] = (a * b).sum(1)
            else:
                out[start : start + self._BLOCK] = (a - b).square_().sum(1).neg_()
        return out

    def bound(self, i: Tensor, j: Tensor | None = None) -> Tensor:
        """Error bound of pairs ``(i, j)``; ``j=None``: of row ``i`` against any row."""
        a = self.norm[i]
        b = self.norm[j] if j is not None else torch.full_like(a, self.max_norm)
        return self.eps * (a * b if self.metric == "cosine" else (a + b).square())

    def exact_rows(self, rows: Tensor, k: int) -> Tensor:
        """Float64 top-``k`` candidates of ``rows`` against all rows (self excluded)."""
        x64 = self.x.double()
        sq = x64.square().sum(1)
        cand = []
        for start in range(0, rows.numel(), 256):
            r = rows[start : start + 256]
            s = x64[r] @ x64.T
            if self.metric == "l2":
                s = 2 * s - sq.view(1, -1) - sq[r].view(-1, 1)
            s[torch.arange(r.numel()), r] = -math.inf
            cand.append(s.topk(k, dim=1).indices)
        return torch.cat(cand) if cand else torch.empty(0, k, dtype=torch.long)


def _first_by_group(group: Tensor, score: Tensor, tiebreak: Tensor, count: Tensor) -> Tensor:
    """Mask of the ``count[g]`` best entries of each group ``g``, ordered by score (descending),
    then ``tiebreak`` (ascending)."""
    order = torch.argsort(tiebreak, stable=True)
    order = order[torch.argsort(score[order], descending=True, stable=True)]
    order = order[torch.argsort(group[order], stable=True)]
    g = group[order]
    start = torch.searchsorted(g, g, right=False)
    rank = torch.arange(g.numel()) - start
    keep = torch.zeros(group.numel(), dtype=torch.bool)
    keep[order] = rank < count[g]
    return keep


def _candidate_lists(
    x: Tensor, m: int, scorer: _PairScores, chunk_size: int, backend: Backend | str
) -> tuple[Tensor, Tensor, Tensor]:
    """Each row's ``m`` most similar other rows, by exact similarity (ties: lower index).

    A float32 search returns ``m + slack`` candidates per row. Candidates whose float32
    similarity is more than twice the error bound above the row's ``m``-th are certainly
    among the ``m`` best, those more than twice below certainly not; the ones in between are
    re-scored exactly. A row whose last candidate is still within that band (more than
    ``slack`` near-ties) is searched again in float64.

    Returns:
        ``(row, col, score)`` flat: ``score`` exact or within the error bound of it.
    """
    n = x.shape[0]
    slack = min(n - 1 - m, max(16, m // 8))
    width = m + slack
    index = NeighborIndex(x, "ip" if scorer.metric == "cosine" else "l2", backend, chunk_size)
    sims, idx = index.search(x, width + 1)
    # drop each row's own entry; rows whose own entry is not listed drop their last one
    rows = torch.arange(n).view(-1, 1)
    keep = idx != rows
    keep[keep.all(dim=1), -1] = False
    sims, idx = sims[keep].view(n, width).double(), idx[keep].view(n, width)
    bound = 2 * scorer.bound(torch.arange(n)).view(-1, 1)
    mth = sims[:, m - 1 : m]
    sure = sims > mth + bound
    band = ~sure & (sims >= mth - bound)
    redo = band[:, -1].clone() if slack > 0 else torch.zeros(n, dtype=torch.bool)
    band &= ~redo.view(-1, 1)
    sure &= ~redo.view(-1, 1)
    # resolve each row's band: the best (m - #sure) by exact similarity, then index
    br, bc = band.nonzero(as_tuple=True)
    b_row, b_col = br, idx[br, bc]
    b_score = scorer.exact(b_row, b_col)
    need = m - sure.sum(1)
    chosen = _first_by_group(b_row, b_score, b_col, need)
    sr, sc = sure.nonzero(as_tuple=True)
    parts_row, parts_col = [sr, b_row[chosen]], [idx[sr, sc], b_col[chosen]]
    parts_score = [sims[sr, sc], b_score[chosen]]
    # rows with more than `slack` near-ties: exact top candidates from a float64 search
    again = redo.nonzero().view(-1)
    if again.numel():
        cand = scorer.exact_rows(again, width)
        r_row = again.view(-1, 1).expand_as(cand).reshape(-1)
        r_col = cand.reshape(-1)
        r_score = scorer.exact(r_row, r_col)
        best = _first_by_group(r_row, r_score, r_col, torch.full((n,), m))
        parts_row.append(r_row[best])
        parts_col.append(r_col[best])
        parts_score.append(r_score[best])
    return torch.cat(parts_row), torch.cat(parts_col), torch.cat(parts_score)


def _top_pairs(lo: Tensor, hi: Tensor, approx: Tensor, target: int, scorer: _PairScores) -> Tensor:
    """Indices of the ``target`` pairs of largest exact similarity (ties: smaller key first),
    given ``approx`` within ``scorer.bound`` of it; only pairs near the threshold are
    re-scored."""
    if target >= approx.numel():
        return torch.arange(approx.numel())
    bound = scorer.bound(lo, hi)
    # the target-th largest approximate similarity: within max(bound) of the exact one
    threshold = float(approx.kthvalue(approx.numel() - target + 1).values)
    slack = float(bound.max())
    sure = approx - bound > threshold + slack
    band = ~sure & (approx + bound >= threshold - slack)
    cand = band.nonzero().view(-1)
    exact = scorer.exact(lo[cand], hi[cand])
    group = torch.zeros(cand.numel(), dtype=torch.long)
    need = torch.tensor([target - int(sure.sum())])
    chosen = cand[_first_by_group(group, exact, cand, need)]
    return torch.cat([sure.nonzero().view(-1), chosen])


class FashionMNISTKNNGraphDataModule(NodeDataModule):
    """A nearest-neighbour graph of Fashion-MNIST images (Xiao et al., 2017), one node per image.

    Nodes are the 60 000 training images followed by the 10 000 test images
    (``include_test=False``: the training images only), or a seeded subset of ``num_nodes`` of
    them; ``x`` = pixels scaled to ``[0, 1]`` (784 features), ``y`` = the 10 classes; edges from
    :func:`epsilon_graph` on the pixel vectors with ``k`` undirected edges per node. Raw files
    are read from ``<data_dir>/FashionMNIST/raw/`` with torchvision (never downloaded).

    Splits. ``split="public"`` with the test images included: the test images are the test
    split, a seeded ``val_frac`` share of the training images the validation split and the other
    training images the training split (``train_frac`` is not used). ``split="random"``, or
    ``"public"`` without the test images: seeded ``train_frac`` / ``val_frac`` fractions of all
    nodes.

    Cache. Building the 70 000-node graph takes minutes, so the edges are stored in
    ``<cache_dir>/knn_graph/`` under a name derived from the graph's parameters (``num_nodes``,
    ``include_test``, ``seed`` when subsetting, ``k``, ``metric``, ``candidates``) and the
    SHA-256 of the raw files; a later run with the same parameters loads them in seconds. The
    file is written to a temporary name and renamed, carries the SHA-256 of its edges, and is
    rebuilt when it cannot be read or does not match. ``chunk_size`` and ``backend`` are not
    part of the name: they do not change the edges.

    Args:
        name: dataset name (default: ``"FashionMNIST-kNN"``).
        num_nodes: images kept (seeded); ``None`` all of them (default: ``None``).
        include_test: add the 10 000 test images to the 60 000 training images
            (default: ``True``).
        k: target average degree, undirected edges per node ``|E|/|V|`` (default: ``100``).
        metric: ``"cosine"`` or ``"l2"`` on pixel vectors (default: ``"cosine"``).
        candidates: candidate neighbours per node, as a multiple of ``k`` (default: ``2.0``).
        chunk_size: query rows per nearest-neighbour search block (default: ``1024``).
        backend: nearest-neighbour search, ``"auto"`` (faiss where installed), ``"faiss"`` or
            ``"torch"`` (default: ``"auto"``).
        cache_graph: load/store the edges under ``cache_dir`` (default: ``True``).
        **kwargs: :class:`~graphssl.data.node.NodeDataModule` arguments (``split`` defaults to
            ``"public"``).
    """

    def __init__(
        self,
        name: str = "FashionMNIST-kNN",
        num_nodes: int | None = None,
        include_test: bool = True,
        k: float = 100.0,
        metric: Metric = "cosine",
        candidates: float = 2.0,
        chunk_size: int = 1024,
        backend: Backend | str = "auto",
        cache_graph: bool = True,
        **kwargs: object,
    ) -> None:
        kwargs.setdefault("split", "public")
        super().__init__(name, **kwargs)  # type: ignore[arg-type]
        if num_nodes is not None and num_nodes < 2:
            raise ValueError(f"num_nodes must be >= 2 or null, got {num_nodes}")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        self.num_nodes = num_nodes
        self.include_test = bool(include_test)
        self.k = float(k)
        self.metric: Metric = metric
        self.candidates = candidates
        self.chunk_size = chunk_size
        self.backend = backend
        self.cache_graph = bool(cache_graph)

    def load(self) -> Data:
        from torchvision.datasets import FashionMNIST

        raw = Path(self.data_dir) / "FashionMNIST" / "raw"
        require_raw_files(self.name, raw, _FMNIST_RAW)
        parts = [FashionMNIST(str(self.data_dir), train=True, download=False)]
        if self.include_test:
            parts.append(FashionMNIST(str(self.data_dir), train=False, download=False))
        images = torch.cat([p.data for p in parts])
        labels = torch.cat([p.targets for p in parts])
        is_test = torch.cat([torch.full((len(p.targets),), i == 1) for i, p in enumerate(parts)])
        n_all = images.shape[0]
        subset = self.num_nodes is not None and self.num_nodes < n_all
        if subset:
            gen = torch.Generator().manual_seed(self.seed)
            keep = torch.randperm(n_all, generator=gen)[: self.num_nodes].sort().values
            images, labels, is_test = images[keep], labels[keep], is_test[keep]
        x = images.reshape(images.shape[0], -1).float() / 255.0
        edge_index = self._edge_index(x, raw, subset)
        data = Data(x=x, edge_index=edge_index, y=labels.long(), num_nodes=x.shape[0])
        if self.include_test and bool(is_test.any()):
            data.train_mask, data.val_mask, data.test_mask = self._masks(is_test)
        return data

    def _masks(self, is_test: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Test images as the test split; a seeded ``val_frac`` of the others as validation."""
        pool = (~is_test).nonzero().view(-1)
        gen = torch.Generator().manual_seed(self.seed)
        n_val = max(1, round(self.val_frac * pool.numel())) if self.val_frac > 0 else 0
        val = pool[torch.randperm(pool.numel(), generator=gen)[:n_val]]
        val_mask = torch.zeros_like(is_test)
        val_mask[val] = True
        return ~is_test & ~val_mask, val_mask, is_test.clone()

    # ------------------------------------------------------------------ edge cache
    def cache_path(self, raw: Path, subset: bool) -> Path:
        """Where the edges of this configuration are cached (see the class docstring)."""
        params = {
            "version": _CACHE_VERSION,
            "num_nodes": self.num_nodes,
            "include_test": self.include_test,
            "seed": self.seed if subset else None,
            "k": self.k,
            "metric": self.metric,
            "candidates": float(self.candidates),
            "raw": _files_sha256(raw, _FMNIST_RAW),
        }
        digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:20]
        return self.cache_dir / "knn_graph" / f"fashion_mnist_{digest}.pt"

    def _edge_index(self, x: Tensor, raw: Path, subset: bool) -> Tensor:
        def build() -> Tensor:
            return epsilon_graph(
                x, self.k, self.metric, self.candidates, self.chunk_size, self.backend
            )

        if not self.cache_graph:
            return build()
        from filelock import FileLock

        path = self.cache_path(raw, subset)
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock"):  # concurrent runs build the graph once
            cached = load_edge_cache(path, x.shape[0])
            if cached is not None:
                return cached
            edge_index = build()
            save_edge_cache(path, edge_index, x.shape[0])
            return edge_index


def _files_sha256(folder: Path, files: tuple[str, ...]) -> str:
    digest = hashlib.sha256()
    for name in files:
        digest.update(name.encode())
        with open(folder / name, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                digest.update(block)
    return digest.hexdigest()


def _tensor_sha256(t: Tensor) -> str:
    return hashlib.sha256(t.contiguous().numpy().data).hexdigest()


def save_edge_cache(path: Path, edge_index: Tensor, num_nodes: int) -> None:
    """Store ``edge_index`` (as int32) with its SHA-256 at ``path``, atomically: written to a
    temporary file in the same folder, then renamed over ``path``."""
    edges = edge_index.to(torch.int32).contiguous()
    payload = {
        "version": _CACHE_VERSION,
        "num_nodes": int(num_nodes),
        "edge_index": edges,
        "sha256": _tensor_sha256(edges),
    }
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_edge_cache(path: Path, num_nodes: int) -> Tensor | None:
    """The edges stored at ``path`` as int64, or ``None`` when the file is missing, unreadable
    (e.g. truncated), or its contents do not match their SHA-256, version or node count — a
    damaged file is reported with a warning and rebuilt by the caller."""
    if not path.is_file():
        return None
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
        edges = payload["edge_index"]
        problem = None
        if payload.get("version") != _CACHE_VERSION or payload.get("num_nodes") != num_nodes:
            problem = "it was written for another version or node count"
        elif not (
            isinstance(edges, Tensor)
            and edges.dtype == torch.int32
            and edges.ndim == 2
            and edges.shape[0] == 2
        ):
            problem = "its edge_index is not an int32 [2, E] tensor"
        elif _tensor_sha256(edges) != payload.get("sha256"):
            problem = "its edges do not match their SHA-256"
        elif edges.numel() and not (int(edges.min()) >= 0 and int(edges.max()) < num_nodes):
            problem = f"its node ids are outside [0, {num_nodes})"
    except Exception as err:  # a truncated or overwritten file fails in many ways
        problem = f"it could not be read ({type(err).__name__}: {err})"
    if problem is not None:
        warnings.warn(f"ignoring the cached graph {path}: {problem}; rebuilding it", stacklevel=2)
        return None
    return edges.long()
