"""The files of an EMIR comparison: the ``I_S / d_Z`` matrix (CSV and heatmap), the ranking
(CSV and Markdown), the Louvain communities (JSON), the predictiveness graph (PNG) and the
cross-encoder matrix (CSV); :func:`write_outputs` writes them all into one folder.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from graphssl.evaluation.emir.compare import (
    CompareResult,
    format_cell,
    nan_as_lowest,
    ranking_table,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["graph_figure", "heatmap_figure", "write_outputs"]


def _write_matrix(path: Path, names: list[str], matrix: np.ndarray) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["source \\ target", *names])
        for name, row in zip(names, matrix):
            w.writerow([name, *(format_cell(float(v)) if not math.isnan(v) else "" for v in row)])


def heatmap_figure(names: list[str], matrix: np.ndarray, title: str) -> Figure:
    """The ``I_S / d_Z`` matrix as an annotated heatmap (rows = sources, columns = targets)."""
    from graphssl.evaluation.plots import _figure

    m = len(names)
    fig = _figure(1.6 + 0.7 * m, 1.2 + 0.6 * m)
    ax = fig.add_subplot()
    im = ax.imshow(np.ma.masked_invalid(matrix), cmap="viridis")
    ax.set_xticks(range(m), names, rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(m), names, fontsize=7)
    ax.set_xlabel("target Z")
    ax.set_ylabel("source U")
    if m <= 16:
        for i in range(m):
            for j in range(m):
                if not math.isnan(matrix[i, j]):
                    ax.text(
                        j, i, f"{matrix[i, j]:.2f}", ha="center", va="center", fontsize=6, color="w"
                    )
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, shrink=0.8)
    return fig


def graph_figure(result: CompareResult, seed: int = 0) -> Figure:
    """Predictiveness graph: node colour = informativeness, node ring = community,
    edge width = weight."""
    import networkx as nx

    from graphssl.evaluation.plots import _figure

    graph = result.graph
    fig = _figure(6.0, 5.0)
    ax = fig.add_subplot()
    pos = nx.spring_layout(graph, weight="weight", seed=seed)
    weights = np.array([w for _, _, w in graph.edges(data="weight", default=0.0)], dtype=float)
    widths = 0.3 + 2.5 * weights / weights.max() if weights.size and weights.max() > 0 else 0.5
    nx.draw_networkx_edges(
        graph,
        pos,
        ax=ax,
        width=widths,
        alpha=0.35,
        arrows=True,
        arrowsize=8,
        connectionstyle="arc3,rad=0.1",
    )
    info = [nan_as_lowest(result.informativeness[n]) for n in graph.nodes]
    finite = [v for v in info if math.isfinite(v)]
    lo = min(finite) if finite else 0.0
    colors = [v if math.isfinite(v) else lo for v in info]
    palette = [
        "tab:red",
        "tab:blue",
        "tab:green",
        "tab:orange",
        "tab:purple",
        "tab:brown",
        "tab:pink",
        "tab:gray",
        "tab:olive",
        "tab:cyan",
    ]
    rings = [palette[result.community_of(n) % len(palette)] for n in graph.nodes]
    nodes = nx.draw_networkx_nodes(
        graph,
        pos,
        ax=ax,
        node_color=colors,
        cmap="viridis",
        edgecolors=rings,
        linewidths=2.5,
        node_size=420,
    )
    # names beside (below) their node, on a light box, so they never hide the node's colour
    ys = [float(p[1]) for p in pos.values()] or [0.0]
    dy = 0.07 * ((max(ys) - min(ys)) or 1.0)
    label_pos = {n: (float(p[0]), float(p[1]) - dy) for n, p in pos.items()}
    nx.draw_networkx_labels(
        graph,
        label_pos,
        ax=ax,
        font_size=7,
        verticalalignment="top",
        bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.7},
    )
    ax.margins(0.12)
    fig.colorbar(nodes, ax=ax, shrink=0.7, label="informativeness (median I_S/d_Z)")
    ax.set_title(
        f"predictiveness graph: {len(result.communities)} Louvain communities (ring colour)",
        fontsize=9,
    )
    ax.set_axis_off()
    return fig


def write_outputs(
    result: CompareResult,
    folder: Path,
    downstream_name: str,
    runs: Mapping[str, str | None] | None = None,
) -> list[Path]:
    """Write matrix.csv, ranking.csv, ranking.md, communities.json, heatmap.png, graph.png
    (and cross_encoder_matrix.csv) into ``folder``; returns the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [
        folder / "matrix.csv",
        folder / "ranking.csv",
        folder / "ranking.md",
        folder / "communities.json",
        folder / "heatmap.png",
        folder / "graph.png",
    ]
    _write_matrix(paths[0], result.names, result.matrix)
    rows = result.ranking_rows()
    with paths[1].open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[*rows[0], "run_id"])
        w.writeheader()
        for r in rows:
            w.writerow(
                {
                    **{k: format_cell(v) for k, v in r.items()},
                    "run_id": (runs or {}).get(r["embedder"]) or "",
                }
            )
    paths[2].write_text(ranking_table(result, downstream_name) + "\n")
    paths[3].write_text(json.dumps([sorted(c) for c in result.communities], indent=1))
    heatmap_figure(result.names, result.matrix, "EMIR I_S(U -> Z) / d_Z").savefig(paths[4])
    graph_figure(result).savefig(paths[5])
    if result.cross_matrix is not None:
        paths.append(folder / "cross_encoder_matrix.csv")
        _write_matrix(paths[-1], result.names, result.cross_matrix)
    return paths
