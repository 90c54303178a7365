"""DeepWalk and node2vec: skip-gram on random walks, trained without gradients in torch."""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim import Optimizer
from torch_geometric.data import Data

from graphssl.methods.base import SSLMethod
from graphssl.models.encode import encode
from graphssl.models.random_walk import random_walks, skipgram_fit
from graphssl.utils import load_weights_only

log = logging.getLogger(__name__)

#: bump when the walks or the skip-gram fit change, so that old cache entries are not reused
_CACHE_VERSION = 1


class NodeEmbedding(nn.Module):
    """A table of one vector per node with graphssl's uniform encoder call.

    ``forward(x, edge_index, edge_weight)`` ignores the graph. It returns the rows named by
    ``x`` when ``x`` holds integer node ids (``(M,)`` or ``(M, 1)``, what :meth:`prepare` puts
    in ``x`` so ``NeighborLoader`` batches carry the ids of their nodes) and the whole table
    when ``x`` has one row per node of the graph the table was fitted on.

    Args:
        embedding_dim: size ``D`` of each vector.
    """

    weight: Tensor

    def __init__(self, embedding_dim: int) -> None:
        super().__init__()
        if embedding_dim < 1:
            raise ValueError(f"embedding_dim must be >= 1, got {embedding_dim}")
        self.out_channels = embedding_dim
        self.register_buffer("weight", torch.zeros(0, embedding_dim))

    @property
    def num_nodes(self) -> int:
        return int(self.weight.size(0))

    def set_weight(self, weight: Tensor) -> None:
        """Replace the table with ``weight`` ``(N, D)``."""
        if weight.ndim != 2 or weight.size(1) != self.out_channels:
            raise ValueError(
                f"weight must have shape [num_nodes, {self.out_channels}], got "
                f"{tuple(weight.shape)}"
            )
        self.weight = weight.to(device=self.weight.device, dtype=self.weight.dtype)

    def lookup(self, ids: Tensor) -> Tensor:
        """Rows ``ids`` ``(M,)`` of the table → ``(M, D)``."""
        self._require_fitted()
        ids = ids.view(-1).to(self.weight.device)
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.num_nodes):
            raise ValueError(
                f"node ids must be in [0, {self.num_nodes}), got "
                f"[{int(ids.min())}, {int(ids.max())}]"
            )
        return self.weight.index_select(0, ids)

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None) -> Tensor:
        if not torch.is_floating_point(x) and (x.ndim == 1 or (x.ndim == 2 and x.size(1) == 1)):
            return self.lookup(x)
        self._require_fitted()
        if x.size(0) != self.num_nodes:
            raise ValueError(
                f"the embedding table has {self.num_nodes} rows but the graph has {x.size(0)} "
                f"nodes; pass the graph it was fitted on, or node ids as x (see prepare())"
            )
        return self.weight

    def prepare(self, data: Data) -> Data:
        """A copy of ``data`` whose ``x`` is the node ids ``(N, 1)``, for mini-batch lookup."""
        out = copy.copy(data)
        out.x = torch.arange(int(data.num_nodes), device=data.edge_index.device).view(-1, 1)
        return out

    def _require_fitted(self) -> None:
        if self.num_nodes == 0:
            raise RuntimeError(
                "the node embeddings are not fitted yet: train the method first "
                "(Trainer.fit calls fit_without_gradients)"
            )

    def _load_from_state_dict(
        self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any
    ) -> None:
        # the table's row count is only known after fitting: take the stored one
        stored = state_dict.get(prefix + "weight")
        if isinstance(stored, Tensor) and stored.shape != self.weight.shape:
            self.weight = torch.empty_like(stored, device=self.weight.device)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


class DeepWalk(SSLMethod):
    """DeepWalk (Perozzi et al., KDD 2014, https://arxiv.org/abs/1403.6652) and node2vec
    (Grover & Leskovec, KDD 2016, https://arxiv.org/abs/1607.00653).

    Gradient-free in graphssl's sense: :meth:`fit_without_gradients` samples ``walks_per_node``
    walks of ``walk_length`` nodes from every node (:func:`~graphssl.models.random_walk.
    random_walks`; uniform for ``p = q = 1``, node2vec-biased otherwise) and trains skip-gram
    with negative sampling on them with gensim (:func:`~graphssl.models.random_walk.
    skipgram_embeddings`); the trainer's optimisation loop is skipped. Node features are not
    used. ``forward`` returns the stored vectors: all rows for the full graph, rows ``batch.n_id``
    for a ``NeighborLoader`` batch. The loss logged for the fit is gensim's negative-sampling
    loss of the last skip-gram pass per walk token (``loss_first_pass``: of the first).

    Args:
        embedding_dim: vector size (default: ``128``).
        walk_length: nodes per walk (default: ``80``).
        walks_per_node: walks started from every node (default: ``10``).
        window: skip-gram context window (default: ``10``).
        p: node2vec return parameter (default: ``1.0``).
        q: node2vec in-out parameter (default: ``1.0``).
        epochs: skip-gram passes over the walks; ``None`` uses the trainer's ``epochs``
            (default: ``1``).
        negative: negative samples per positive pair (default: ``5``).
        workers: gensim threads; only ``1`` is reproducible (default: ``1``).
        seed: seed of the walks and of gensim (default: ``0``).
        cache_dir: folder of fitted tables keyed by a hash of the graph's ``edge_index``, the
            node count, every hyperparameter above, the seed and the gensim version; a job that
            fits the same graph again (e.g. a sparsification target ``t`` at or above the
            graph's own degree, which leaves the graph unchanged) loads the table instead of
            refitting and logs ``train/cache_hit = 1``. Only used with ``workers = 1``, the
            reproducible setting (default: ``None``, no cache).
        optimizer: unused (accepted so configs may carry one); gradient-free.
    """

    supports_mini_batch = False
    has_untrained_baseline = False  # a random embedding table is no encoder to compare with

    def __init__(
        self,
        embedding_dim: int = 128,
        walk_length: int = 80,
        walks_per_node: int = 10,
        window: int = 10,
        p: float = 1.0,
        q: float = 1.0,
        epochs: int | None = 1,
        negative: int = 5,
        workers: int = 1,
        seed: int = 0,
        cache_dir: str | None = None,
        optimizer: Any = None,
    ) -> None:
        super().__init__(None)
        if epochs is not None and epochs < 1:
            raise ValueError(f"epochs must be >= 1 or null (the trainer's epochs), got {epochs}")
        self.encoder = NodeEmbedding(embedding_dim)
        self.walk_length = walk_length
        self.walks_per_node = walks_per_node
        self.window = window
        self.p = p
        self.q = q
        self.epochs = epochs
        self.negative = negative
        self.workers = workers
        self.seed = seed
        self.cache_dir = Path(cache_dir) if cache_dir else None

    def encoders(self) -> dict[str, nn.Module]:
        return {"encoder": self.encoder}

    def configure_optimizer(self) -> Optimizer | None:
        return None

    def forward(self, batch: Data) -> Tensor:
        n_id = getattr(batch, "n_id", None)
        if n_id is not None:  # a NeighborLoader batch: rows of its nodes, seeds first
            return self.encoder.lookup(n_id)
        return encode(self.encoder, batch)

    def loss(self, batch: Data) -> dict[str, Tensor]:
        raise RuntimeError(
            f"{type(self).__name__} trains without gradients (fit_without_gradients) and has no "
            f"differentiable loss"
        )

    def fit_without_gradients(self, data: Data, epochs: int) -> dict[str, Any] | None:
        skipgram_epochs = self.epochs if self.epochs is not None else epochs
        if skipgram_epochs < 1:
            raise ValueError(f"DeepWalk needs >= 1 skip-gram epoch, got {skipgram_epochs}")
        num_nodes = int(data.num_nodes)
        cache = self._cache_file(data.edge_index, num_nodes, skipgram_epochs)
        if cache is not None and cache.is_file():
            t0 = time.perf_counter()
            entry = load_weights_only(cache, "a DeepWalk cache entry (vectors and stats)")
            self.encoder.set_weight(entry["vectors"])
            log.info("DeepWalk: loaded the fitted table from the cache %s", cache)
            stats = {k: float(v) for k, v in entry["stats"].items()}
            return {**stats, "seconds": time.perf_counter() - t0, "cache_hit": 1.0}
        t0 = time.perf_counter()
        walks = random_walks(
            data.edge_index,
            num_nodes,
            self.walk_length,
            self.walks_per_node,
            p=self.p,
            q=self.q,
            seed=self.seed,
        )
        t1 = time.perf_counter()
        vectors, losses = skipgram_fit(
            walks,
            num_nodes,
            dim=self.encoder.out_channels,
            window=self.window,
            epochs=skipgram_epochs,
            negative=self.negative,
            workers=self.workers,
            seed=self.seed,
        )
        t2 = time.perf_counter()
        self.encoder.set_weight(vectors)
        stats = {
            "loss": losses[-1] if losses else math.nan,
            "loss_first_pass": losses[0] if losses else math.nan,
            "walk_seconds": t1 - t0,
            "skipgram_seconds": t2 - t1,
            "num_walks": float(walks.size(0)),
            "skipgram_epochs": float(skipgram_epochs),
        }
        if cache is not None:
            _atomic_save({"vectors": vectors, "stats": stats}, cache)
        return {**stats, "seconds": t2 - t0, "cache_hit": 0.0}

    def _cache_file(self, edge_index: Tensor, num_nodes: int, epochs: int) -> Path | None:
        """``cache_dir/<sha256>.pt`` of this fit, or ``None`` when not caching."""
        if self.cache_dir is None or self.workers != 1:
            return None
        import gensim

        settings = {
            "version": _CACHE_VERSION,
            "gensim": gensim.__version__,
            "num_nodes": num_nodes,
            "dim": self.encoder.out_channels,
            "walk_length": self.walk_length,
            "walks_per_node": self.walks_per_node,
            "window": self.window,
            "p": self.p,
            "q": self.q,
            "epochs": epochs,
            "negative": self.negative,
            "seed": self.seed,
        }
        h = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
        h.update(edge_index.detach().cpu().to(torch.int64).contiguous().numpy().tobytes())
        return self.cache_dir / f"{h.hexdigest()}.pt"


def _atomic_save(obj: Any, path: Path) -> None:
    """``torch.save`` to a temporary file and rename it, so that concurrent sweep jobs never
    read a half-written entry."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(fd)
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
