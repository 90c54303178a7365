"""From a pairwise ``I_S`` matrix to model scores, a predictiveness graph and its communities."""

from __future__ import annotations

from collections.abc import Sequence

import networkx as nx
import numpy as np
from networkx.algorithms.community import louvain_communities
from torch import Tensor

__all__ = ["communities", "informativeness", "predictiveness_graph"]


def _as_square(matrix: Tensor | np.ndarray, names: Sequence[str]) -> np.ndarray:
    m = np.asarray(
        matrix.detach().cpu() if isinstance(matrix, Tensor) else matrix, dtype=np.float64
    )
    if m.ndim != 2 or m.shape[0] != m.shape[1] or m.shape[0] != len(names):
        raise ValueError(
            f"matrix has shape {m.shape}; expected ({len(names)}, {len(names)}) for "
            f"{len(names)} names"
        )
    if len(set(names)) != len(names):
        raise ValueError(f"names must be unique, got {list(names)}")
    return m


def informativeness(matrix: Tensor | np.ndarray, names: Sequence[str]) -> dict[str, float]:
    """Median over reference targets ``Z != U`` of ``I_S(U -> Z) / d_Z``.

    Missing (NaN) pairs are skipped; the median of an even count averages the two middle values
    (pandas/NumPy convention). Higher means a more promising embedder.

    Args:
        matrix: ``[M, M]`` from :func:`pairwise_information_sufficiency` (rows = sources).
        names: the ``M`` embedder names, in matrix order.

    Returns:
        ``{name: score}``; NaN for an embedder without any finite pair.
    """
    m = _as_square(matrix, names)
    scores: dict[str, float] = {}
    for i, name in enumerate(names):
        row = np.delete(m[i], i)
        row = row[~np.isnan(row)]
        scores[name] = float(np.median(row)) if row.size else float("nan")
    return scores


def predictiveness_graph(
    matrix: Tensor | np.ndarray, names: Sequence[str], *, normalize: bool = False
) -> nx.DiGraph:
    """Directed predictiveness graph: edge ``U -> Z`` per finite off-diagonal pair.

    Edge attribute ``"i_s_per_dim"`` holds the raw value; ``"weight"`` (used by Louvain) is the
    value clipped at 0 (negative ``I_S`` estimates mean "no information", and modularity needs
    non-negative weights), or, with ``normalize=True``, the min-max normalised value over
    off-diagonal pairs as in the EMIR molecule plot. Node attributes: ``"informativeness"``
    (median outgoing value) and ``"predictability"`` (median incoming value).

    Returns:
        ``networkx.DiGraph`` without self-loops.
    """
    m = _as_square(matrix, names)
    off = ~np.eye(len(names), dtype=bool) & ~np.isnan(m)
    if normalize and off.any():
        lo, hi = float(m[off].min()), float(m[off].max())
        weights = (m - lo) / (hi - lo) if hi > lo else np.ones_like(m)
    else:
        weights = np.clip(m, 0.0, None)
    graph = nx.DiGraph()
    out_scores = informativeness(m, names)
    in_scores = informativeness(m.T, names)
    for name in names:
        graph.add_node(name, informativeness=out_scores[name], predictability=in_scores[name])
    for i, source in enumerate(names):
        for j, target in enumerate(names):
            if off[i, j]:
                graph.add_edge(
                    source, target, weight=float(weights[i, j]), i_s_per_dim=float(m[i, j])
                )
    return graph


def communities(graph: nx.DiGraph, resolution: float = 1.1, seed: int = 0) -> list[set[str]]:
    """Louvain communities of a predictiveness graph (``networkx`` ``louvain_communities``).

    Args:
        graph: from :func:`predictiveness_graph`.
        resolution: modularity resolution (default: ``1.1``, EMIR NLP; the molecule notebook
            uses ``1.0``).
        seed: Louvain seed (default: ``0``).

    Returns:
        Communities sorted by their smallest name; every node is its own community when the graph
        has no positive weight.
    """
    total = sum(float(w) for _, _, w in graph.edges(data="weight", default=1.0))
    if total <= 0.0:
        found = [{node} for node in graph.nodes]
    else:
        found = [
            set(c)
            for c in louvain_communities(graph, weight="weight", resolution=resolution, seed=seed)
        ]
    return sorted(found, key=lambda c: min(c))
