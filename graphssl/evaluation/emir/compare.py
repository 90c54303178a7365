"""EMIR comparison of several embedders of the same inputs: information sufficiency for every
ordered pair, the informativeness ranking, the predictiveness graph and its communities, the
cross-encoder baseline, and how each ranking correlates with a downstream metric.

Darrin et al., *When is an Embedding Model More Promising than Another?*, NeurIPS 2024
(https://arxiv.org/abs/2406.07640). :func:`align_embedders` orders every embedder's rows by their
ids; :func:`compare_embeddings` estimates ``I_S(U -> Z) / d_Z`` for every ordered pair, ranks the
embedders by informativeness (median over references), builds the predictiveness graph and its
Louvain communities, and runs the cross-encoder L2 baseline. With downstream values (e.g. each
embedder's ``probe/logreg/test_acc``) the Spearman and Kendall correlations between each
ranking and them are reported. :meth:`CompareResult.metrics` names the results as the compare
run logs them (``emir/...``); :func:`ranking_table` is the Markdown ranking.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from graphssl.evaluation.correlation import correlation
from graphssl.evaluation.emir.config import EMIRConfig
from graphssl.evaluation.emir.cross_encoder import pairwise_cross_encoder_l2
from graphssl.evaluation.emir.graph import communities, informativeness, predictiveness_graph
from graphssl.evaluation.emir.inputs import principal_components
from graphssl.evaluation.emir.pairwise import pairwise_information_sufficiency
from graphssl.evaluation.emir.reliability import emir_reliability

if TYPE_CHECKING:
    import networkx as nx

__all__ = [
    "CompareResult",
    "Embedder",
    "align_embedders",
    "compare_embeddings",
    "emir_config",
    "format_cell",
    "nan_as_highest",
    "nan_as_lowest",
    "ranking_table",
]


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
        run_id: the compare run's MLflow id (set by the compare task).
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
        order = sorted(self.names, key=lambda n: -nan_as_lowest(self.informativeness[n]))
        ce_order = sorted(self.names, key=lambda n: nan_as_highest(self.cross_encoder.get(n)))
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
        """The metrics of the comparison, named as the compare run logs them (``emir/...``)."""
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


def nan_as_lowest(v: float | None) -> float:
    """``v``, with a missing or NaN value as minus infinity (sorts last in a descending order)."""
    return -math.inf if v is None or math.isnan(v) else v


def nan_as_highest(v: float | None) -> float:
    """``v``, with a missing or NaN value as infinity (sorts last in an ascending order)."""
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


def format_cell(v: Any) -> str:
    """A table cell: floats with four decimals (``nan`` when undefined), anything else as is."""
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
    lines += ["| " + " | ".join(format_cell(r[h]) for h in head) + " |" for r in rows]
    for label in ("informativeness", "cross_encoder"):
        key = f"emir/spearman_{label}"
        if key in result.correlations:
            rho = result.correlations[key]
            tau = result.correlations[f"emir/kendall_{label}"]
            note = f"  ({result.notes[label]})" if label in result.notes else ""
            lines.append(
                f"\n{label} vs {downstream_name}: Spearman {format_cell(rho)}, "
                f"Kendall {format_cell(tau)}{note}"
            )
    return "\n".join(lines)


def emir_config(values: Mapping[str, Any]) -> EMIRConfig:
    """:class:`EMIRConfig` from a mapping of its fields (unknown keys fail with the known ones).

    Raises:
        TypeError: ``values`` is not a mapping.
        ValueError: a key is not a field of :class:`EMIRConfig`.
    """
    if not isinstance(values, Mapping):
        raise TypeError(f"emir must be a mapping of EMIRConfig fields, got {type(values).__name__}")
    fields = {str(k): v for k, v in values.items()}
    known = set(EMIRConfig.__dataclass_fields__)
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(f"unknown emir option(s) {unknown}; expected some of {sorted(known)}")
    return EMIRConfig(**fields)
