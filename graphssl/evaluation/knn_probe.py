"""Weighted k-nearest-neighbour probe on frozen embeddings (cosine similarity).

The protocol of Wu et al., *Unsupervised Feature Learning via Non-Parametric Instance
Discrimination*, CVPR 2018 (https://arxiv.org/abs/1805.01978), as implemented in DINO's
``eval_knn.py`` (Caron et al., ICCV 2021, https://arxiv.org/abs/2104.14294): neighbours by
cosine similarity, votes weighted by ``exp(similarity / T)`` with ``T = 0.07``
(DINO's defaults); ``weighting="uniform"`` gives the plain majority vote.

Exactness and speed. Similarities are defined in float64 and neighbours with equal similarity
are ordered by their position in the training split. The evaluated split is processed
``chunk_size`` rows at a time: on CPU the ``[chunk, n_train]`` similarities are first screened
in float32 (about twice as fast as float64), the ``2k + 16`` best candidates are re-scored in
float64, and the result is kept only when a rounding-error bound proves that no other training
row can enter the top ``k``; rows without that certificate (near-duplicate training rows) are
screened again in float64. (Exact ties among more than ``2k + 16`` training rows are broken
arbitrarily.) The predictions are therefore those of a float64 computation, the same
for every ``chunk_size`` and search backend: the float32 screening runs on faiss's exact flat
index where it is installed (``backend="auto"`` or ``"faiss"``), else on torch matmuls
(:class:`~graphssl.neighbors.NeighborIndex`). float32 embeddings are not copied whole to
float64: the training rows are (normalised), the evaluated rows are normalised a chunk at a time.

Large graphs. The cost is ``|split| × |train| × D`` per evaluated split; ``max_rows`` evaluates
a seeded uniform subsample of each split instead (the training rows included, every class
keeping at least one), which the configuration sets above a size threshold.
"""

from __future__ import annotations

import logging
import math
import numbers
from typing import Any, Literal

import torch
from torch import Tensor

from graphssl.evaluation._checks import as_float_matrix
from graphssl.evaluation._deprecated import old_names
from graphssl.evaluation.probe import Probe
from graphssl.evaluation.probe_inputs import (
    ArrayLike,
    class_labels,
    encode_classes,
    prepare_inputs,
)
from graphssl.evaluation.subsample import cap_rows, check_max_rows, row_generator
from graphssl.neighbors import BACKENDS, Backend, NeighborIndex, resolve_backend

__all__ = ["KNNProbe"]

Weighting = Literal["exp", "uniform"]
_WEIGHTINGS = ("exp", "uniform")
_RESCORE_ROWS = 512  # rows re-scored at once: bounds the [rows, candidates, D] gather

log = logging.getLogger(__name__)


def _l2_normalize(x: Tensor) -> Tensor:
    """Unit rows in float64; all-zero rows stay zero (as sklearn's ``normalize``)."""
    x = x.to(torch.float64)
    norm = x.norm(dim=1, keepdim=True)
    return x / torch.where(norm == 0, torch.ones_like(norm), norm)


def _screen_dtype(device: torch.device) -> torch.dtype:
    """float32 where its matmul is IEEE float32 (CPU at "highest" precision), else float64.

    On GPUs TF32 may be enabled behind our back and float64 throughput is high anyway.
    """
    if device.type == "cpu" and torch.get_float32_matmul_precision() == "highest":
        return torch.float32
    return torch.float64


class KNNProbe(Probe):
    """Weighted k-nearest-neighbour classifier on frozen embeddings.

    Uses cosine similarity to find the ``k`` nearest training rows; each neighbour votes for
    its label with weight ``exp(similarity / temperature)`` (``weighting="exp"``, DINO's
    protocol) or 1 (``weighting="uniform"``, plain majority vote). Ties between classes go to
    the smallest class id.

    Args:
        k: Number of nearest neighbours; must not exceed the training split (default: ``20``).
        chunk_size: Rows of the evaluated split scored at a time. The full
            ``[|split|, |train|]`` similarity matrix is never built (it would take ~17 GB for the
            ogbn-arxiv test split); the predictions are identical (default: ``4096``).
        weighting: ``"exp"`` or ``"uniform"`` (default: ``"exp"``).
        temperature: ``T`` of the ``"exp"`` weights (default: ``0.07``).
        backend: float32 screening search, ``"auto"`` (faiss where installed and the
            embeddings are on the CPU), ``"faiss"`` or ``"torch"``; the neighbours are the same
            with each (default: ``"auto"``).
        max_rows: In :meth:`evaluate`, use at most this many rows of each split (train, val and
            test), drawn uniformly with a generator seeded by ``seed``; every class of a split
            keeps at least one row. ``None`` uses every row (default: ``None``).
        seed: Seed of the ``max_rows`` draw (default: ``0``).

    Attributes (after :meth:`fit`):
        classes_: ``[C]`` class ids seen in the training split.
        train_embeddings_: ``[n_train, D]`` L2-normalised training rows (float64).
        train_labels_: ``[n_train]`` training labels as indices into ``classes_``.
    """

    def __init__(
        self,
        k: int = 20,
        chunk_size: int = 4096,
        weighting: Weighting = "exp",
        temperature: float = 0.07,
        backend: Backend = "auto",
        max_rows: int | None = None,
        seed: int = 0,
    ) -> None:
        if not isinstance(chunk_size, numbers.Integral) or isinstance(chunk_size, bool):
            raise TypeError(f"chunk_size must be an integer, got {chunk_size!r}")
        if chunk_size <= 0:
            raise ValueError(f"chunk_size must be > 0, got {chunk_size}")
        if not isinstance(k, numbers.Integral) or isinstance(k, bool) or k <= 0:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        if weighting not in _WEIGHTINGS:
            raise ValueError(
                f"Could not resolve weighting {weighting!r} among choices {set(_WEIGHTINGS)}"
            )
        if not isinstance(temperature, numbers.Real) or not 0 < temperature < math.inf:
            raise ValueError(f"temperature must be a finite value > 0, got {temperature!r}")
        self.k: int = int(k)
        self.chunk_size: int = int(chunk_size)
        self.weighting: Weighting = weighting
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        self.temperature: float = float(temperature)
        self.backend: Backend = backend

        self.max_rows: int | None = check_max_rows(max_rows)
        self.seed: int = int(seed)

    #: The embeddings stay float32 when given so; rows are cast to float64 where used.
    input_dtype = None

    # ------------------------------------------------------------------ public API
    def fit(
        self,
        embeddings: ArrayLike,
        labels: ArrayLike | None,
        train_mask: ArrayLike | None = None,
    ) -> KNNProbe:
        """Store the L2-normalised training rows (all rows when ``train_mask`` is None)."""
        if train_mask is None:
            x, y, _ = prepare_inputs(embeddings, labels, {}, dtype=None)
            train = torch.arange(x.shape[0], device=x.device)
        else:
            x, y, idx = prepare_inputs(embeddings, labels, {"train_mask": train_mask}, dtype=None)
            train = idx["train_mask"]
        self._fit(x[train], class_labels(y, train)[train])
        return self

    def kneighbors(self, embeddings: ArrayLike) -> tuple[Tensor, Tensor]:
        """Cosine similarities ``[M, k]`` (float64, descending) and positions in the training
        split ``[M, k]`` of the nearest training rows."""
        self._check_fitted()
        return self._kneighbors(self._as_query(embeddings))

    def predict(self, embeddings: ArrayLike) -> Tensor:
        """Class ids ``[M]`` for the rows of ``embeddings`` ``[M, D]``."""
        self._check_fitted()
        return self._predict(self._as_query(embeddings))

    # ---------------------------------------------------------------- internals
    def _evaluate(self, x: Tensor, targets: Tensor, rows: dict[str, Tensor]) -> dict[str, Any]:
        """Fit on ``train`` and report accuracy on ``val`` and ``test``.

        Returns:
            ``val_acc``, ``test_acc`` and ``k`` (and ``max_rows`` when it dropped rows).
        """
        capped = False
        if self.max_rows is not None:
            gen = row_generator(self.seed)
            draws = {split: cap_rows(r, self.max_rows, gen, targets) for split, r in rows.items()}
            capped = any(d.capped for d in draws.values())
            if capped:
                rows = {split: d.rows for split, d in draws.items()}
                log.info(
                    "%s: max_rows=%d, seeded subsample (seed %d) of %s rows",
                    type(self).__name__,
                    self.max_rows,
                    self.seed,
                    ", ".join(f"{s} {d.rows.numel()}" for s, d in draws.items()),
                )
        self._fit(x[rows["train"]], targets[rows["train"]])
        out: dict[str, Any] = {}
        for split in ("val", "test"):
            split_rows = rows[split]
            out[f"{split}_acc"] = float(
                (self._predict(x, split_rows) == targets[split_rows]).double().mean()
            )
        out["k"] = self.k
        if capped:
            out["max_rows"] = self.max_rows
        return out

    def _fit(self, x_train: Tensor, y_train: Tensor) -> None:
        n_train = x_train.shape[0]
        if self.k > n_train:
            raise ValueError(
                f"k={self.k} is larger than the training split ({n_train} rows); expected "
                f"k <= {n_train}"
            )
        self.classes_, self.train_labels_ = encode_classes(y_train)
        self.train_embeddings_ = _l2_normalize(x_train)
        self._search = resolve_backend(self.backend, x_train.device)
        dtype = torch.float32 if self._search == "faiss" else _screen_dtype(x_train.device)
        self._screen = self.train_embeddings_.to(dtype)
        self.n_features_in_ = x_train.shape[1]

    def _check_fitted(self) -> None:
        if not hasattr(self, "train_embeddings_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit() or evaluate()")

    def _as_query(self, embeddings: ArrayLike) -> Tensor:
        x = as_float_matrix(embeddings, dtype=None).to(self.train_embeddings_.device)
        if x.shape[1] != self.n_features_in_:
            raise ValueError(
                f"embeddings have {x.shape[1]} features but the probe was fitted on "
                f"{self.n_features_in_}"
            )
        return x

    def _predict(self, x: Tensor, rows: Tensor | None = None) -> Tensor:
        sims, nbrs = self._kneighbors(x, rows)
        if self.weighting == "exp":
            weights = sims.div(self.temperature).exp_()
        else:
            weights = torch.ones_like(sims)
        votes = sims.new_zeros(sims.shape[0], self.classes_.numel())
        votes.scatter_add_(1, self.train_labels_[nbrs], weights)
        return self.classes_[votes.argmax(dim=1)]  # first maximum: smallest class id

    def _kneighbors(self, x: Tensor, rows: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Top-k of the query rows ``x`` [M, D] (``x[rows]`` when given; L2-normalised in
        float64 a chunk at a time) against the training rows."""
        train = self.train_embeddings_
        n_train, d = train.shape
        k = self.k
        n_cand = min(n_train, 2 * k + 16)
        screen = self._screen
        # |screened dot - exact dot| of unit vectors <= (d + 2) u (input rounding plus any
        # summation order), u = eps / 2 the unit roundoff of the screening dtype; doubled.
        bound = (d + 2) * torch.finfo(screen.dtype).eps
        m = x.shape[0] if rows is None else rows.numel()
        out_sims = torch.empty(m, k, dtype=torch.float64, device=x.device)
        out_nbrs = torch.empty(m, k, dtype=torch.long, device=x.device)
        index = NeighborIndex(screen, "ip", self._search, self.chunk_size)
        for start in range(0, m, self.chunk_size):
            stop = min(start + self.chunk_size, m)
            q_chunk = _l2_normalize(x[start:stop] if rows is None else x[rows[start:stop]])
            cand_sims, cand = index.search(q_chunk.to(screen.dtype), n_cand)
            top_sims, top_nbrs = self._rescore(q_chunk, cand)
            if n_cand < n_train:
                # A row outside the candidates scores at most the last candidate's screened
                # similarity + bound; the top k is certain when it beats that.
                uncertain = top_sims[:, k - 1] <= cand_sims[:, -1].double() + bound
                if bool(uncertain.any()):
                    redo = uncertain.nonzero().view(-1)
                    exact = q_chunk[redo] @ train.T  # float64; ties beyond n_cand: arbitrary
                    top_sims[redo], top_nbrs[redo] = self._rescore(
                        q_chunk[redo], exact.topk(n_cand, dim=1).indices
                    )
            out_sims[start:stop], out_nbrs[start:stop] = top_sims, top_nbrs
        return out_sims, out_nbrs

    def _rescore(self, q: Tensor, cand: Tensor) -> tuple[Tensor, Tensor]:
        """Exact float64 similarities of the candidates, top k ordered by (similarity desc,
        training index asc).

        Each similarity is a row-wise multiply-and-sum, whose rounding does not depend on how
        many rows are processed together.
        """
        cand, _ = cand.sort(dim=1)
        sims = torch.empty(cand.shape, dtype=q.dtype, device=q.device)
        for start in range(0, q.shape[0], _RESCORE_ROWS):
            part = slice(start, start + _RESCORE_ROWS)
            sims[part] = (q[part].unsqueeze(1) * self.train_embeddings_[cand[part]]).sum(dim=2)
        order = sims.argsort(dim=1, descending=True, stable=True)[:, : self.k]
        return sims.gather(1, order), cand.gather(1, order)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(k={self.k}, chunk_size={self.chunk_size}, "
            f"weighting={self.weighting!r}, temperature={self.temperature}, "
            f"backend={self.backend!r}, "
            f"max_rows={self.max_rows})"
        )


#: class names before the rename, answered for one release with a DeprecationWarning
__getattr__ = old_names(__name__, {"KNNEvaluator": "KNNProbe"})
