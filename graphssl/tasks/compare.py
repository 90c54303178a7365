"""``graphssl-compare``: rank trained embedders by information sufficiency (EMIR).

Darrin et al., *When is an Embedding Model More Promising than Another?*, NeurIPS 2024
(https://arxiv.org/abs/2406.07640). The embeddings of several MLflow runs (their
``embeddings.pt`` artifacts) or of ``.pt`` files with the same payload are aligned row by row on
their ``ids``; then :mod:`graphssl.evaluation.emir` estimates ``I_S(U -> Z) / d_Z`` for every
ordered pair, ranks the embedders by informativeness (median over references), builds the
predictiveness graph and its Louvain communities, and runs the cross-encoder L2 baseline. When
the runs carry a downstream metric (default ``probe/logreg/test_acc``), the Spearman and Kendall
correlations between each ranking and that metric are reported. Everything is logged to a new
MLflow run tagged ``graphssl.role=compare``.

:func:`run_compare` is the task the CLI calls (``graphssl-compare``, config ``conf/compare.yaml``);
:func:`compare_embeddings` is the tensor-level core.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor

from graphssl.evaluation.emir import (
    EMIRConfig,
    communities,
    emir_reliability,
    informativeness,
    pairwise_cross_encoder_l2,
    pairwise_information_sufficiency,
    predictiveness_graph,
)
from graphssl.evaluation.emir.inputs import principal_components
from graphssl.tracking import artifacts
from graphssl.tracking.embeddings import download_embeddings, load_payload
from graphssl.tracking.mlflow_store import flatten
from graphssl.tracking.store import TrackingStore

if TYPE_CHECKING:
    import networkx as nx
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)

__all__ = [
    "CompareResult",
    "Embedder",
    "align_embedders",
    "compare_embeddings",
    "correlation",
    "load_payload",
    "run_compare",
]


# --------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------


@dataclass
class Embedder:
    """One embedder to compare.

    Attributes:
        name: unique display name (run name, plus a short run id when names collide).
        embeddings: ``[N, D]`` final embeddings.
        ids: ``[N]`` row ids (node / graph / image index), one per row.
        source: run id or file path, for messages.
        run_id: the MLflow run id (``None`` for a file).
        downstream: the run's downstream metric (e.g. ``probe/logreg/test_acc``), if logged.
    """

    name: str
    embeddings: Tensor
    ids: Tensor
    source: str
    run_id: str | None = None
    downstream: float | None = None


def align_embedders(embedders: Sequence[Embedder]) -> dict[str, Tensor]:
    """Reorder every embedder's rows by id so row ``i`` is the same input everywhere.

    Raises:
        ValueError: when two embedders embed different inputs (different counts or ids); the
            message names both and their counts.
    """
    if not embedders:
        return {}
    ref = embedders[0]
    ref_ids = torch.sort(ref.ids).values
    out: dict[str, Tensor] = {}
    for emb in embedders:
        ids_sorted, order = torch.sort(emb.ids)
        if ids_sorted.numel() != ref_ids.numel() or not torch.equal(ids_sorted, ref_ids):
            common = np.intersect1d(ref_ids.numpy(), ids_sorted.numpy()).size
            raise ValueError(
                f"row mismatch: {ref.name!r} ({ref.source}) has {ref_ids.numel()} rows but "
                f"{emb.name!r} ({emb.source}) has {ids_sorted.numel()}, with {common} ids in "
                "common; every embedder must embed the same inputs (same dataset and split of "
                'rows) — select runs of one dataset, e.g. filter="params.`dataset.name` = '
                "'cora'\""
            )
        out[emb.name] = emb.embeddings[order].float()
    return out


_SAFE = re.compile(r"[^0-9A-Za-z_\-. /]")


def metric_safe(name: str) -> str:
    """``name`` with the characters MLflow refuses in metric keys replaced by ``_``."""
    return _SAFE.sub("_", name)


def _unique_names(records: Sequence[artifacts.RunRecord]) -> list[str]:
    base = [metric_safe(r.run_name or r.run_id[:8]) for r in records]
    return [f"{b}-{r.run_id[:8]}" if base.count(b) > 1 else b for b, r in zip(base, records)]


# --------------------------------------------------------------------------------------------
# Core
# --------------------------------------------------------------------------------------------


def correlation(x: Sequence[float], y: Sequence[float]) -> tuple[float, float, int, str]:
    """Spearman and Kendall correlation of the finite pairs of ``x`` and ``y``.

    ``scipy.stats`` semantics (average ranks for ties). Fewer than 3 finite pairs or a constant
    input give NaN with a note instead of an error.

    Returns:
        ``(spearman, kendall, n_pairs, note)``; ``note`` is ``""`` when both are defined.
    """
    from scipy.stats import kendalltau, spearmanr

    a = np.asarray(x, dtype=np.float64)
    b = np.asarray(y, dtype=np.float64)
    keep = np.isfinite(a) & np.isfinite(b)
    a, b = a[keep], b[keep]
    n = int(a.size)
    if n < 3:
        return math.nan, math.nan, n, f"only {n} finite pair(s); need at least 3"
    if np.all(a == a[0]) or np.all(b == b[0]):
        which = "metric" if np.all(a == a[0]) else "downstream"
        return math.nan, math.nan, n, f"{which} is constant over the {n} runs"
    rho = float(spearmanr(a, b).statistic)
    tau = float(kendalltau(a, b).statistic)
    return rho, tau, n, ""


@dataclass
class CompareResult:
    """Everything :func:`compare_embeddings` computes.

    Attributes:
        names: embedder names, in matrix order.
        matrix: ``[M, M]`` ``I_S(row -> column) / d_column`` (NaN diagonal).
        informativeness: ``{name: median I_S / d_Z over references}`` (higher = better).
        communities: Louvain communities of the predictiveness graph.
        graph: the predictiveness graph.
        cross_matrix: ``[M, M]`` cross-encoder test L2 (``None`` when disabled).
        cross_encoder: ``{name: median L2}`` (lower = better; empty when disabled).
        downstream: ``{name: downstream metric}`` for the embedders that have one.
        correlations: ``emir/spearman_informativeness`` etc. (NaN when undefined).
        notes: why a correlation is NaN.
        n_rows: rows used (after ``max_rows``).
        informativeness_held_out: the same score from the rows the conditional nets were not
            fitted on (empty when the estimator makes no held-out estimate).
        caveat: why the ranking may not be trusted at this many rows and embedders, or ``None``.
        run_id: the compare run's MLflow id (set by :func:`run_compare`).
        original_dims: ``{name: width}`` of the embedders ``max_dims`` projected (empty when
            none was).
    """

    names: list[str]
    matrix: np.ndarray
    informativeness: dict[str, float]
    communities: list[set[str]]
    graph: nx.DiGraph
    cross_matrix: np.ndarray | None = None
    cross_encoder: dict[str, float] = field(default_factory=dict)
    downstream: dict[str, float] = field(default_factory=dict)
    correlations: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    n_rows: int = 0
    informativeness_held_out: dict[str, float] = field(default_factory=dict)
    caveat: str | None = None
    run_id: str = ""
    original_dims: dict[str, int] = field(default_factory=dict)

    def community_of(self, name: str) -> int:
        return next(i for i, c in enumerate(self.communities) if name in c)

    def ranking_rows(self) -> list[dict[str, Any]]:
        """One row per embedder, best informativeness first."""
        order = sorted(self.names, key=lambda n: -_nan_low(self.informativeness[n]))
        ce_order = sorted(self.names, key=lambda n: _nan_high(self.cross_encoder.get(n)))
        rows = []
        for rank, name in enumerate(order, start=1):
            rows.append(
                {
                    "rank": rank,
                    "embedder": name,
                    "informativeness": self.informativeness[name],
                    "community": self.community_of(name),
                    "cross_encoder_l2": self.cross_encoder.get(name, math.nan),
                    "cross_encoder_rank": ce_order.index(name) + 1 if self.cross_encoder else "",
                    "downstream": self.downstream.get(name, math.nan),
                }
            )
        return rows

    def metrics(self) -> dict[str, float]:
        """The MLflow metrics of the compare run."""
        out = {f"emir/informativeness/{n}": v for n, v in self.informativeness.items()}
        out.update(
            {
                f"emir/informativeness_held_out/{n}": v
                for n, v in self.informativeness_held_out.items()
                if not math.isnan(v)
            }
        )
        out.update({f"emir/cross_encoder/{n}": v for n, v in self.cross_encoder.items()})
        out.update(self.correlations)
        out["emir/n_embedders"] = float(len(self.names))
        out["emir/n_rows"] = float(self.n_rows)
        out.update({f"emir/original_dim/{n}": float(d) for n, d in self.original_dims.items()})
        out["emir/n_communities"] = float(len(self.communities))
        return out


def _nan_low(v: float | None) -> float:
    return -math.inf if v is None or math.isnan(v) else v


def _nan_high(v: float | None) -> float:
    return math.inf if v is None or math.isnan(v) else v


def compare_embeddings(
    embeddings: Mapping[str, Tensor],
    *,
    emir: EMIRConfig | None = None,
    downstream: Mapping[str, float] | None = None,
    cross_encoder: Mapping[str, Any] | None = None,
    resolution: float = 1.1,
    normalize_graph: bool = False,
    community_seed: int = 0,
    max_rows: int | None = None,
    seed: int = 0,
    progress: bool = True,
    max_dims: int | None = None,
) -> CompareResult:
    """EMIR comparison of aligned embedders: information sufficiency, predictiveness graph and
    communities, cross-encoder baseline.

    Args:
        embeddings: ``{name: [N, d_name]}``, rows aligned (same input in the same row).
        emir: estimator settings (default: :class:`EMIRConfig` ``()``, the estimator's defaults).
        downstream: ``{name: accuracy}`` to correlate the rankings with (optional).
        cross_encoder: keyword arguments of :func:`pairwise_cross_encoder_l2` plus
            ``enabled`` (default: enabled with its defaults).
        resolution: Louvain resolution (default: ``1.1``).
        normalize_graph: min-max normalise the graph's edge weights (default: ``False``).
        community_seed: Louvain seed (default: ``0``).
        max_rows: use a seeded random subset of this many rows (default: all rows).
        seed: seed of that subset (default: ``0``).
        progress: tqdm bars over pairs on a terminal.
        max_dims: project every embedder wider than this onto its ``max_dims`` leading
            principal components (:func:`~graphssl.evaluation.emir.inputs.principal_components`)
            before estimating; the original widths are kept in ``CompareResult.original_dims``
            (default: ``None``, every dimension).

    Raises:
        ValueError: fewer than 2 embedders, or different row counts.
    """
    if len(embeddings) < 2:
        raise ValueError(
            f"need at least 2 embedders to compare, got {len(embeddings)}: {sorted(embeddings)}"
        )
    embs = dict(embeddings)
    n = next(iter(embs.values())).shape[0]
    if max_rows is not None and 0 < max_rows < n:
        gen = torch.Generator().manual_seed(seed)
        keep = torch.sort(torch.randperm(n, generator=gen)[:max_rows]).values
        embs = {k: v[keep] for k, v in embs.items()}
        n = max_rows
    original_dims = {k: int(v.shape[1]) for k, v in embs.items()}
    if max_dims is not None:
        embs = {k: principal_components(v, int(max_dims), name=k) for k, v in embs.items()}
    pairwise = pairwise_information_sufficiency(embs, emir or EMIRConfig(), progress)
    names, matrix = list(pairwise.names), pairwise.matrix.numpy()
    info = informativeness(matrix, names)
    graph = predictiveness_graph(matrix, names, normalize=normalize_graph)
    comms = communities(graph, resolution=resolution, seed=community_seed)
    result = CompareResult(
        names=names, matrix=matrix, informativeness=info, communities=comms, graph=graph, n_rows=n
    )
    result.original_dims = {k: d for k, d in original_dims.items() if d != int(embs[k].shape[1])}
    held_out = pairwise.informativeness_held_out
    if any(not math.isnan(v) for v in held_out.values()):
        result.informativeness_held_out = held_out
    result.caveat = emir_reliability(n, [int(v.shape[1]) for v in embs.values()], len(names))
    ce = dict(cross_encoder or {})
    if ce.pop("enabled", True):
        ce_names, ce_matrix = pairwise_cross_encoder_l2(embs, progress=progress, **ce)
        result.cross_matrix = ce_matrix.numpy()
        result.cross_encoder = informativeness(result.cross_matrix, ce_names)
    result.downstream = {k: float(v) for k, v in (downstream or {}).items() if k in info}
    if result.downstream:
        acc = [result.downstream.get(k, math.nan) for k in names]
        scores: dict[str, dict[str, float]] = {"informativeness": info}
        if result.informativeness_held_out:
            scores["informativeness_held_out"] = result.informativeness_held_out
        if result.cross_encoder:
            scores["cross_encoder"] = result.cross_encoder
        for label, score in scores.items():
            rho, tau, _, note = correlation([score[k] for k in names], acc)
            result.correlations[f"emir/spearman_{label}"] = rho
            result.correlations[f"emir/kendall_{label}"] = tau
            if note:
                result.notes[label] = note
    return result


# --------------------------------------------------------------------------------------------
# Output: tables and figures
# --------------------------------------------------------------------------------------------


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.4f}"
    return str(v)


def ranking_table(result: CompareResult, downstream_name: str) -> str:
    """The ranking as a Markdown table (what the CLI prints)."""
    rows = result.ranking_rows()
    head = ["rank", "embedder", "informativeness", "community"]
    if result.cross_encoder:
        head += ["cross_encoder_l2", "cross_encoder_rank"]
    if result.downstream:
        head.append("downstream")
    lines = [
        "| " + " | ".join(h if h != "downstream" else downstream_name for h in head) + " |",
        "|" + "|".join("---" for _ in head) + "|",
    ]
    lines += ["| " + " | ".join(_fmt(r[h]) for h in head) + " |" for r in rows]
    for label in ("informativeness", "cross_encoder"):
        key = f"emir/spearman_{label}"
        if key in result.correlations:
            rho = result.correlations[key]
            tau = result.correlations[f"emir/kendall_{label}"]
            note = f"  ({result.notes[label]})" if label in result.notes else ""
            lines.append(
                f"\n{label} vs {downstream_name}: Spearman {_fmt(rho)}, Kendall {_fmt(tau)}{note}"
            )
    return "\n".join(lines)


def _write_matrix(path: Path, names: list[str], matrix: np.ndarray) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["source \\ target", *names])
        for name, row in zip(names, matrix):
            w.writerow([name, *(_fmt(float(v)) if not math.isnan(v) else "" for v in row)])


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
    info = [_nan_low(result.informativeness[n]) for n in graph.nodes]
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
                    **{k: _fmt(v) for k, v in r.items()},
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


# --------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------


def emir_config(cfg: DictConfig | Mapping[str, Any]) -> EMIRConfig:
    """:class:`EMIRConfig` from the ``emir`` node (unknown keys fail with the known ones)."""
    raw = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg
    if not isinstance(raw, Mapping):
        raise TypeError(f"emir must be a mapping of EMIRConfig fields, got {type(raw).__name__}")
    values = {str(k): v for k, v in raw.items()}
    known = set(EMIRConfig.__dataclass_fields__)
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"unknown emir option(s) {unknown}; expected some of {sorted(known)}")
    return EMIRConfig(**values)


def _load_embedders(
    cfg: DictConfig, store: TrackingStore, tmp: Path
) -> tuple[list[Embedder], list[artifacts.RunRecord]]:
    files = [str(p) for p in (cfg.get("embedding_files") or [])]
    run_ids = [str(r) for r in (cfg.get("run_ids") or [])]
    selectors = {
        "experiment_name": cfg.get("experiment_name"),
        "parent_run_id": cfg.get("parent_run_id"),
        "run_ids": run_ids,
    }
    embedders: list[Embedder] = []
    records: list[artifacts.RunRecord] = []
    if any(selectors.values()):
        records = artifacts.select_runs(
            store,
            experiment=cfg.get("experiment_name"),
            parent_run_id=cfg.get("parent_run_id"),
            run_ids=run_ids,
            filter_string=cfg.get("filter"),
        )
        if not records:
            raise ValueError(
                f"no runs selected (experiment_name={cfg.get('experiment_name')!r}, "
                f"parent_run_id={cfg.get('parent_run_id')!r}, filter={cfg.get('filter')!r} in "
                f"{store.tracking_uri}); expected FINISHED graphssl runs with embeddings.pt"
            )
        downstream = str(cfg.downstream)
        for name, rec in zip(_unique_names(records), records):
            path = download_embeddings(store, rec, tmp)
            z, ids = load_payload(path, source=f"run {rec.run_id}")
            embedders.append(
                Embedder(name, z, ids, f"run {rec.run_id}", rec.run_id, rec.metrics.get(downstream))
            )
    elif not files:
        raise ValueError(
            "no runs selected: give experiment_name=<name>, parent_run_id=<id>, "
            "run_ids=[...] or embedding_files=[...]"
        )
    stems = [
        metric_safe(Path(f).stem if Path(f).stem != "embeddings" else Path(f).parent.name)
        for f in files
    ]
    taken = {e.name for e in embedders}
    for i, (f, stem) in enumerate(zip(files, stems)):
        name = stem if stems.count(stem) == 1 and stem not in taken else f"{stem}-{i}"
        z, ids = load_payload(f)
        embedders.append(Embedder(name, z, ids, f))
    return embedders, records


def _output_experiment(cfg: DictConfig, store: TrackingStore) -> str:
    """The experiment the compare run goes to: the inputs' one when it can be found (named
    experiment, the parent's, the first run id's), else ``logger.experiment_name``."""
    name = cfg.get("experiment_name")
    if name and artifacts.experiment_id_of(store, str(name)):
        return str(name)
    anchor = cfg.get("parent_run_id") or next(iter(cfg.get("run_ids") or []), None)
    if anchor:
        try:
            run = artifacts.get_run(store, str(anchor))
            return artifacts.experiment_name_of(store, run.experiment_id)
        except LookupError:
            pass  # selection fails below, inside the compare run, with the full message
    return str(cfg.logger.experiment_name)


def run_compare(cfg: DictConfig) -> CompareResult:
    """Select, load, align and compare embedders; log a ``graphssl.role=compare`` run.

    The compare run is created first, so every failure (no runs, a run without embeddings,
    a row mismatch, fewer than 2 embedders) ends it ``FAILED`` with the error as its tag.
    """
    store = TrackingStore.from_config(cfg)
    out_dir = Path(str(cfg.get("output_dir") or tempfile.mkdtemp(prefix="graphssl-compare-")))
    tags = {artifacts.ROLE_TAG: "compare"}
    for key, tag in (
        ("experiment_name", "experiment"),
        ("parent_run_id", "parent_run_id"),
        ("filter", "filter"),
    ):
        if cfg.get(key):
            tags[f"graphssl.compare.{tag}"] = str(cfg.get(key))
    with store.start_run(
        str(cfg.run_name), experiment_name=_output_experiment(cfg, store), tags=tags
    ) as tracker:
        params = flatten(OmegaConf.to_container(cfg, resolve=True))  # type: ignore[arg-type]
        tracker.log_params({k: v for k, v in params.items() if not k.startswith("paths.")})
        with tempfile.TemporaryDirectory(prefix="graphssl-compare-dl-") as tmp:
            embedders, records = _load_embedders(cfg, store, Path(tmp))
        tracker.set_tags(
            {
                "graphssl.compare.input_run_ids": ",".join(r.run_id for r in records)[:5000],
                "graphssl.compare.embedders": ",".join(e.name for e in embedders)[:5000],
            }
        )
        for i, e in enumerate(embedders):
            tracker.set_tags({f"graphssl.compare.input.{i}": f"{e.name}={e.source}"})
        aligned = align_embedders(embedders)
        ce = OmegaConf.to_container(cfg.cross_encoder, resolve=True)
        assert isinstance(ce, dict)
        downstream = {e.name: e.downstream for e in embedders if e.downstream is not None}
        result = compare_embeddings(
            aligned,
            emir=emir_config(cfg.emir),
            downstream=downstream,
            cross_encoder={str(k): v for k, v in ce.items()},
            resolution=float(cfg.graph.resolution),
            normalize_graph=bool(cfg.graph.normalize),
            community_seed=int(cfg.graph.seed),
            max_rows=cfg.get("max_rows"),
            seed=int(cfg.seed),
            progress=bool(cfg.get("progress", True)),
            max_dims=cfg.get("max_dims"),
        )
        tracker.log_metrics(result.metrics())
        runs = {e.name: e.run_id for e in embedders}
        for path in write_outputs(result, out_dir, str(cfg.downstream), runs):
            tracker.log_artifact(path)
        for label, note in result.notes.items():
            tracker.set_tags({f"graphssl.compare.note.{label}": note})
        print(
            f"EMIR comparison of {len(result.names)} embedders on {result.n_rows} rows "
            f"(MLflow run {tracker.run_id}; files in {out_dir})"
        )
        print(ranking_table(result, str(cfg.downstream)))
        if result.original_dims:
            print(
                f"max_dims={cfg.get('max_dims')}: {len(result.original_dims)} embedders were "
                "compared on their leading principal components (original widths "
                + ", ".join(f"{k} {d}" for k, d in sorted(result.original_dims.items()))
                + ")"
            )
        if result.caveat:
            tracker.set_tags({"graphssl.compare.caveat": result.caveat[:5000]})
            print(f"caveat: {result.caveat}")
        result.run_id = tracker.run_id
    log.info("compare run %s finished", result.run_id)
    return result
