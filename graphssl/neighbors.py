"""Exhaustive nearest-neighbour search in float32, with faiss or with chunked torch matmuls.

:class:`NeighborIndex` returns, for each query row, the ``k`` reference rows of largest
similarity — the inner product (``metric="ip"``) or the negative squared Euclidean distance
(``metric="l2"``) — with their float32 similarities, in descending order. Two backends compute
it:

- ``"faiss"``: faiss's exact flat index (``IndexFlatIP`` / ``IndexFlatL2``, package
  ``faiss-cpu``, extra ``graphssl[faiss]``), multi-threaded with ``torch.get_num_threads()``
  threads; it runs on the CPU (tensors on another device are moved there and back);
- ``"torch"``: ``[chunk, n_ref]`` similarity blocks by ``torch.mm`` and ``topk``, on the
  tensors' device (in float64 when the reference rows are float64).

``"auto"`` picks faiss where it is importable and the tensors are on the CPU, else torch.

Both backends compute the similarities in float32, in different summation orders, so their
similarities differ by rounding (at most ``(d + 2)·eps32`` times the product of the row norms)
and the order of near-ties may differ. Callers that need results independent of the backend
(the kNN probe, the ε-graph) re-score the candidates in float64 and certify the result with
that bound.
"""

from __future__ import annotations

import importlib.util
import logging
from typing import Literal

import torch
from torch import Tensor

__all__ = [
    "BACKENDS",
    "Backend",
    "NeighborIndex",
    "faiss_available",
    "knn_search",
    "resolve_backend",
]

Backend = Literal["auto", "faiss", "torch"]
NeighborMetric = Literal["ip", "l2"]
BACKENDS = ("auto", "faiss", "torch")


def _import_faiss():  # type: ignore[no-untyped-def]
    """``import faiss`` without its loader's INFO lines about which CPU build it tried."""
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)
    import faiss

    return faiss


def faiss_available() -> bool:
    """Whether the ``faiss`` package (``pip install faiss-cpu``) is importable."""
    return importlib.util.find_spec("faiss") is not None


def resolve_backend(backend: str, device: torch.device | None = None) -> Literal["faiss", "torch"]:
    """The backend ``backend`` stands for: ``"auto"`` is faiss when installed and ``device`` is
    the CPU (or unknown), else torch.

    Raises:
        ValueError: ``backend`` is not one of ``auto``, ``faiss``, ``torch``.
        ImportError: ``backend="faiss"`` but faiss is not installed.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "faiss":
        if not faiss_available():
            raise ImportError(
                "backend='faiss' needs the faiss package, which is not installed: "
                "pip install faiss-cpu (or graphssl[faiss]), or use backend=torch / auto"
            )
        return "faiss"
    if backend == "torch":
        return "torch"
    on_cpu = device is None or device.type == "cpu"
    return "faiss" if on_cpu and faiss_available() else "torch"


class NeighborIndex:
    """Exhaustive top-``k`` search among the rows of ``ref``.

    Args:
        ref: ``[N, D]`` reference rows (used as float32).
        metric: ``"ip"`` (inner product) or ``"l2"`` (negative squared distance)
            (default: ``"ip"``).
        backend: ``"auto"``, ``"faiss"`` or ``"torch"`` (default: ``"auto"``).
        chunk_size: query rows per similarity block of the torch backend, and per faiss call
            (default: ``4096``).
    """

    def __init__(
        self,
        ref: Tensor,
        metric: NeighborMetric = "ip",
        backend: Backend | str = "auto",
        chunk_size: int = 4096,
    ) -> None:
        if ref.ndim != 2:
            raise ValueError(f"ref must be an (N, D) matrix, got shape {tuple(ref.shape)}")
        if metric not in ("ip", "l2"):
            raise ValueError(f"metric must be 'ip' or 'l2', got {metric!r}")
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self.metric: NeighborMetric = metric
        self.backend = resolve_backend(backend, ref.device)
        self.chunk_size = int(chunk_size)
        self.device = ref.device
        self.num_rows, self.dim = ref.shape
        if self.backend == "faiss":
            faiss = _import_faiss()
            data = ref.detach().to("cpu", torch.float32).contiguous().numpy()
            self._faiss = (faiss.IndexFlatIP if metric == "ip" else faiss.IndexFlatL2)(self.dim)
            self._faiss.add(data)
        else:
            dtype = torch.float64 if ref.dtype == torch.float64 else torch.float32
            self._ref = ref.detach().to(dtype)
            self._sq = (self._ref * self._ref).sum(1) if metric == "l2" else None
            self._buffer: Tensor | None = None  # [chunk, N] similarity block, reused

    def search(self, query: Tensor, k: int) -> tuple[Tensor, Tensor]:
        """Similarities ``[M, k]`` (descending) and indices ``[M, k]`` (int64) of the ``k``
        most similar reference rows of each row of ``query`` ``[M, D]``.

        Similarities are float32, except with the torch backend on a float64 ``ref``, which
        computes in float64.
        """
        if query.ndim != 2 or query.shape[1] != self.dim:
            raise ValueError(
                f"query must be an (M, {self.dim}) matrix, got shape {tuple(query.shape)}"
            )
        if not 1 <= k <= self.num_rows:
            raise ValueError(f"k must be in [1, {self.num_rows}] (the reference rows), got {k}")
        if self.backend == "faiss":
            return self._search_faiss(query, k)
        return self._search_torch(query, k)

    def _search_torch(self, query: Tensor, k: int) -> tuple[Tensor, Tensor]:
        q = query.detach().to(self.device, self._ref.dtype)
        m = q.shape[0]
        sims = q.new_empty(m, k)
        idx = torch.empty(m, k, dtype=torch.long, device=self.device)
        rows = min(self.chunk_size, m)
        if self._buffer is None or self._buffer.shape[0] < rows:
            self._buffer = q.new_empty(rows, self.num_rows)
        buffer = self._buffer
        for start in range(0, m, self.chunk_size):
            stop = min(start + self.chunk_size, m)
            s = torch.mm(q[start:stop], self._ref.T, out=buffer[: stop - start])
            if self._sq is not None:  # -|a - b|² = 2 a·b - |b|² - |a|²
                s.mul_(2).sub_(self._sq.view(1, -1))
                s.sub_((q[start:stop] * q[start:stop]).sum(1, keepdim=True))
            sims[start:stop], idx[start:stop] = s.topk(k, dim=1)
        return sims, idx

    def _search_faiss(self, query: Tensor, k: int) -> tuple[Tensor, Tensor]:
        faiss = _import_faiss()
        q = query.detach().to("cpu", torch.float32).contiguous().numpy()
        previous = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(torch.get_num_threads())
        try:
            parts = [
                self._faiss.search(q[start : start + self.chunk_size], k)
                for start in range(0, q.shape[0], self.chunk_size)
            ]
        finally:
            faiss.omp_set_num_threads(previous)
        sims = torch.cat([torch.from_numpy(d) for d, _ in parts]) if parts else torch.empty(0, k)
        idx = torch.cat([torch.from_numpy(i) for _, i in parts]) if parts else torch.empty(0, k)
        if self.metric == "l2":
            sims = sims.neg_()
        return sims.to(self.device), idx.long().to(self.device)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(rows={self.num_rows}, dim={self.dim}, "
            f"metric={self.metric!r}, backend={self.backend!r})"
        )


def knn_search(
    query: Tensor,
    ref: Tensor,
    k: int,
    metric: NeighborMetric = "ip",
    backend: Backend | str = "auto",
    chunk_size: int = 4096,
) -> tuple[Tensor, Tensor]:
    """The ``k`` most similar rows of ``ref`` for each row of ``query``: float32 similarities
    ``[M, k]`` (descending) and indices ``[M, k]``; see :class:`NeighborIndex`."""
    return NeighborIndex(ref, metric, backend, chunk_size).search(query, k)
