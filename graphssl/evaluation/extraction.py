"""Embedding extraction: the one way evaluation gets ``[N, D]`` tensors out of a trained model.

Four paths: graph-level (one row per graph over ``eval_dataloader()``), node full-batch (one
forward over ``datamodule.data``), node mini-batch (``NeighborLoader``, rows reassembled through
``batch.n_id``) and node layer-wise (:func:`~graphssl.models.encode.encode_layerwise`: one layer
at a time over all nodes, in chunks of target nodes). With all neighbours over as many hops as
the encoder has layers, mini-batch rows equal full-batch rows; for GCN this needs the full-graph
normalisation, which ``prepare(data)`` supplies as edge weights. Layer-wise rows equal full-batch
rows too, reading each edge once per layer instead of once per sampled ``L``-hop neighbourhood.

:func:`plan_extraction` chooses the node path: ``mode="auto"`` runs full-batch while its
estimated memory fits the budget, and layer-wise above it (mini-batch when the encoder has no
layer-wise step); the plan and its reason are logged.
"""

from __future__ import annotations

import copy
import logging
import sys
import time
from collections.abc import Callable, Sized
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch_geometric.data import Data
from tqdm import tqdm

from graphssl.models.encode import DEFAULT_CHUNK_BYTES, encode, encode_layerwise, layerwise_reason

if TYPE_CHECKING:
    from graphssl.data.base import DataModule

__all__ = [
    "DEFAULT_NUM_NEIGHBORS",
    "EXTRACTION_MODES",
    "LAYERWISE_CHUNK_FRACTION",
    "MINI_BATCH_SIZE",
    "EncoderSource",
    "ExtractionMode",
    "ExtractionPlan",
    "ShardedExtraction",
    "all_gather_rows",
    "encoder_depth",
    "extract_embeddings",
    "extract_sharded",
    "extraction_fanouts",
    "node_range",
    "plan_extraction",
]

log = logging.getLogger(__name__)

EncoderSource = Literal["auto", "teacher", "student", "online", "target", "encoder"]
#: how node embeddings are extracted (graph-level datasets always go graph by graph)
ExtractionMode = Literal["auto", "full", "mini_batch", "layerwise"]
EXTRACTION_MODES: tuple[str, ...] = ("auto", "full", "mini_batch", "layerwise")

#: share of the memory budget one chunk of layer-wise extraction may take (the two ``n x d``
#: layer tensors and the graph take the rest)
LAYERWISE_CHUNK_FRACTION: float = 1 / 16

#: Seeds per ``NeighborLoader`` batch in mini-batch extraction.
MINI_BATCH_SIZE: int = 1024

#: Fanouts used when ``mini_batch=True``, ``num_neighbors`` is ``None`` and the encoder's depth
#: cannot be read (no ``num_hops``/``num_layers``); with a known depth ``L`` the default is
#: ``[-1] * L``, all neighbours over as many hops as the encoder has layers.
DEFAULT_NUM_NEIGHBORS: tuple[int, ...] = (-1, -1)

_Extract = Callable[[Data], Tensor]


@dataclass(frozen=True)
class ExtractionPlan:
    """How :func:`extract_embeddings` extracts, as :func:`plan_extraction` chose it.

    Attributes:
        mode: ``"graph"`` (graph-level dataset), ``"full"``, ``"mini_batch"`` or
            ``"layerwise"``.
        reason: why, in words (logged with the mode).
        fallback: ``True`` when the mode asked for (layer-wise) was not possible.
        encoder: the encoder that runs on its own (layer-wise, and the graph
            ``prepare(data)`` of mini-batch sampling), ``None`` when ``model.forward`` runs.
        chunk_bytes: memory budget of one layer-wise chunk.
        chunk_nodes: target nodes per layer-wise chunk, ``None``: from ``chunk_bytes``.
    """

    mode: Literal["graph", "full", "mini_batch", "layerwise"]
    reason: str
    fallback: bool = False
    encoder: nn.Module | None = None
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    chunk_nodes: int | None = None


def plan_extraction(
    model: nn.Module,
    datamodule: DataModule,
    encoder_source: EncoderSource = "auto",
    mode: ExtractionMode = "auto",
    mini_batch: bool = False,
    memory_budget_gb: float | None = None,
    chunk_size: int | None = None,
) -> ExtractionPlan:
    """Choose how node embeddings of ``model`` on ``datamodule`` are extracted.

    - ``"full"`` / ``"mini_batch"``: as asked.
    - ``"layerwise"``: layer by layer over all nodes when the encoder allows it
      (:func:`~graphssl.models.encode.layerwise_reason`); otherwise, with the reason logged as
      a warning, full-batch when its estimated memory fits ``memory_budget_gb`` (or no budget
      is given), else mini-batch with all neighbours.
    - ``"auto"``: full-batch when no budget is given or its estimate
      (:meth:`~graphssl.models.encoders.GNNEncoder.full_batch_inference_bytes`) fits the budget;
      above it layer-wise, or mini-batch when the encoder has no layer-wise step.

    The encoder that runs on its own is the one ``encoder_source`` names, or for ``"auto"`` the
    one the model's ``forward`` embeds with (its ``forward_encoder`` key of ``encoders()``);
    a model without one extracts through ``forward`` (full-batch or mini-batch).

    Args:
        model: the model (an ``SSLMethod`` or compatible module).
        datamodule: its ``DataModule`` (set up here when it has ``setup``).
        encoder_source: as for :func:`extract_embeddings` (default: ``"auto"``).
        mode: one of :data:`EXTRACTION_MODES` (default: ``"auto"``).
        mini_batch: the older spelling of ``mode="mini_batch"``: ``True`` with ``mode="auto"``
            means mini-batch (default: ``False``).
        memory_budget_gb: the memory extraction may use, in GiB; ``None``: no budget, ``auto``
            is full-batch (default: ``None``). Layer-wise chunks take
            :data:`LAYERWISE_CHUNK_FRACTION` of it.
        chunk_size: target nodes per layer-wise chunk; ``None``: from the budget
            (default: ``None``).

    Raises:
        ValueError: for an unknown ``mode``, ``mini_batch=True`` with a mode other than
            ``"auto"``/``"mini_batch"``, a budget or chunk size that is not positive, or an
            ``encoder_source`` the model does not name.
    """
    if mode not in EXTRACTION_MODES:
        raise ValueError(
            f"Could not resolve extraction mode {mode!r} among choices {list(EXTRACTION_MODES)}"
        )
    if mini_batch and mode not in ("auto", "mini_batch"):
        raise ValueError(
            f"mini_batch=True asks for mini-batch extraction but mode={mode!r}; set one of "
            f"them (mode='mini_batch', or mini_batch=False)"
        )
    if memory_budget_gb is not None and not memory_budget_gb > 0:
        raise ValueError(f"memory_budget_gb must be > 0 or None, got {memory_budget_gb!r}")
    if chunk_size is not None and (isinstance(chunk_size, bool) or chunk_size < 1):
        raise ValueError(f"chunk_size must be a positive int or None, got {chunk_size!r}")
    requested: str = "mini_batch" if mini_batch else mode
    setup = getattr(datamodule, "setup", None)
    if callable(setup):
        setup()
    if bool(datamodule.is_graph_level):
        return ExtractionPlan("graph", "graph-level dataset: one row per graph")

    encoder, why_not = _standalone_encoder(model, encoder_source)
    if encoder is not None:
        why_not = layerwise_reason(encoder)
    budget = None if memory_budget_gb is None else int(float(memory_budget_gb) * 2**30)
    chunk_bytes = (
        DEFAULT_CHUNK_BYTES if budget is None else max(1, int(budget * LAYERWISE_CHUNK_FRACTION))
    )

    def plan(
        mode: Literal["full", "mini_batch", "layerwise"], reason: str, fallback: bool = False
    ) -> ExtractionPlan:
        return ExtractionPlan(mode, reason, fallback, encoder, chunk_bytes, chunk_size)

    if requested == "full":
        return plan("full", "mode='full'")
    if requested == "mini_batch":
        return plan("mini_batch", "mode='mini_batch'")
    estimate = _full_batch_estimate(encoder, datamodule)
    fits = budget is None or estimate is None or estimate <= budget
    need = "" if estimate is None else f"about {estimate / 2**30:.1f} GiB"
    if requested == "layerwise":
        if why_not is None:
            return plan("layerwise", "mode='layerwise'")
        not_possible = f"layer-wise extraction is not possible ({why_not})"
        if fits:
            return plan("full", f"{not_possible}; full-batch instead", fallback=True)
        return plan(
            "mini_batch", f"{not_possible}; mini-batch with all neighbours instead", fallback=True
        )
    # auto
    if budget is None:
        return plan("full", "no memory budget given: full-batch")
    if estimate is None:
        return plan("full", "the full-batch memory of this encoder is not known: full-batch")
    over = (
        f"full-batch would need {need}, above the memory budget of "
        f"{float(memory_budget_gb or 0):g} GiB"
    )
    if fits:
        return plan("full", f"full-batch needs {need}, within the memory budget")
    if why_not is None:
        return plan("layerwise", over)
    return plan(
        "mini_batch",
        f"{over}, and layer-wise extraction is not possible ({why_not}): mini-batch with all "
        f"neighbours",
    )


def _standalone_encoder(
    model: nn.Module, encoder_source: str
) -> tuple[nn.Module | None, str | None]:
    """The encoder extraction may run on its own: the one ``encoder_source`` names, or for
    ``"auto"`` the model's ``forward_encoder``; ``(None, why)`` when there is none."""
    if encoder_source != "auto":
        return _select_encoder(model, encoder_source), None
    name = getattr(model, "forward_encoder", None)
    if not isinstance(name, str):
        return None, (
            f"{type(model).__name__}.forward() does not name the encoder it embeds with "
            f"(forward_encoder)"
        )
    return _select_encoder(model, name), None


def _full_batch_estimate(encoder: nn.Module | None, datamodule: DataModule) -> int | None:
    """Estimated peak bytes of a full-batch forward of ``encoder`` on ``datamodule.data``."""
    estimate = getattr(encoder, "full_batch_inference_bytes", None)
    if encoder is None or not callable(estimate):
        return None
    data = datamodule.data
    x = getattr(data, "x", None)
    if not isinstance(x, Tensor) or x.dim() != 2:
        return None
    return int(estimate(int(data.num_nodes), int(data.num_edges), int(x.size(1))))


def extract_embeddings(
    model: nn.Module,
    datamodule: DataModule,
    encoder_source: EncoderSource = "auto",
    device: str = "cpu",
    mini_batch: bool = False,
    num_neighbors: list[int] | None = None,
    mode: ExtractionMode = "auto",
    memory_budget_gb: float | None = None,
    chunk_size: int | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Extract embeddings from a model using a DataModule.

    Four extraction paths (chosen by :func:`plan_extraction`, logged with its reason):

    - **Graph-level** (``datamodule.is_graph_level=True``): iterates ``eval_dataloader()``, one
      embedding per graph.
    - **Node full-batch** (default, ``mini_batch=False``): single forward pass over the full
      graph stored in ``datamodule.data``.
    - **Node mini-batch** (``mini_batch=True``): ``NeighborLoader`` with global-to-local
      reassembly via ``batch.n_id``, :data:`MINI_BATCH_SIZE` seeds per batch. Use this for graphs
      too large for a single forward pass. The graph sampled from is ``enc.prepare(data)`` for an
      explicit encoder that has ``prepare`` (``model.prepare(data)`` for ``"auto"`` when the
      model defines it, else the ``prepare`` of the encoder its ``forward`` embeds with), so
      GCN's full-graph normalisation follows the sampled edges.
    - **Node layer-wise** (``mode="layerwise"``, or ``"auto"`` above the memory budget):
      :func:`~graphssl.models.encode.encode_layerwise`, one layer at a time over all nodes in
      chunks of target nodes; the same rows as full-batch (to float rounding) at the cost of one
      full-batch forward and ``O(n·d)`` memory. It runs the encoder on its own: the one
      ``encoder_source`` names, or for ``"auto"`` the model's ``forward_encoder``. Encoders
      without a layer-wise step fall back to full-batch (or mini-batch above the budget), with
      the reason logged.

    When ``encoder_source="auto"`` (default), calls ``model.forward()`` directly. This respects
    each model's own evaluation convention (e.g. teacher encoder for GraphDINO, online encoder
    for BGRL/AFGRL) without requiring the caller to know the internal architecture. Pass an
    explicit ``encoder_source`` to bypass ``model.forward()`` and extract from a specific
    sub-encoder named by ``model.encoders()`` (useful for ablations); graph-level extraction then
    mean-pools its node embeddings per graph.

    The model runs in eval mode under ``torch.no_grad()``; its previous train/eval mode is
    restored afterwards (it stays on ``device``).

    Args:
        model: Any ``SSLMethod`` or compatible ``nn.Module``.
        datamodule: ``DataModule`` exposing ``eval_dataloader()``, ``.data``, and
            ``neighbor_loader()`` (required for ``mini_batch=True``).
        encoder_source: ``"auto"`` calls ``model.forward()``; one of ``"teacher"``,
            ``"student"``, ``"online"``, ``"target"``, ``"encoder"`` selects a specific
            sub-encoder directly (default: ``"auto"``).
        device: Inference device string, e.g. ``"cuda:0"`` (default: ``"cpu"``).
        mini_batch: If ``True``, use ``NeighborLoader`` for node-level extraction. Ignored when
            ``is_graph_level=True`` (default: ``False``).
        num_neighbors: Neighbours per hop for ``NeighborLoader``, one entry per message-passing
            layer of the encoder. ``None`` means all neighbours over as many hops as the encoder
            has layers (``[-1] * num_layers``; ``[-1, -1]`` when the depth cannot be read).
            Used only for mini-batch extraction (default: ``None``).
        mode: ``"auto"``, ``"full"``, ``"mini_batch"`` or ``"layerwise"`` for node-level
            datasets (:func:`plan_extraction`); ``mini_batch=True`` is ``"mini_batch"``
            (default: ``"auto"``: full-batch unless it exceeds ``memory_budget_gb``).
        memory_budget_gb: memory extraction may use, in GiB; ``None``: no budget
            (default: ``None``).
        chunk_size: target nodes per layer-wise chunk; ``None``: from the budget
            (default: ``None``).

    Returns:
        ``(embeddings, labels)``: embeddings ``[N, D]`` (nodes) or ``[G, D]`` (graphs), float32
        on CPU, and the labels (``datamodule.labels``, on CPU), ``None`` when the dataset has no
        ``y`` attribute.

    Raises:
        ValueError: for an ``encoder_source`` the model does not name, labels whose row
            count differs from the embeddings', a ``num_neighbors`` whose length is not the
            encoder's depth, or an unknown or contradictory ``mode``.
    """
    embeddings, labels, _ = _extract(
        model,
        datamodule,
        encoder_source,
        device,
        mini_batch,
        num_neighbors,
        mode,
        memory_budget_gb,
        chunk_size,
        sharded=False,
    )
    assert embeddings is not None  # one process extracts every row
    return embeddings, labels


@dataclass(frozen=True)
class ShardedExtraction:
    """Embeddings that the ranks of a process group extracted together (:func:`extract_sharded`).

    Attributes:
        embeddings: ``[N, D]`` float32 on CPU, rows in node order.
        labels: ``datamodule.labels`` on CPU, or ``None``.
        plan: the extraction plan (its mode and reason).
        seconds: wall time of the extraction on rank 0.
        ranks: processes that shared the nodes.
    """

    embeddings: Tensor
    labels: Tensor | None
    plan: ExtractionPlan
    seconds: float
    ranks: int


def extract_sharded(
    model: nn.Module,
    datamodule: DataModule,
    encoder_source: EncoderSource = "auto",
    device: str = "cpu",
    mini_batch: bool = False,
    num_neighbors: list[int] | None = None,
    mode: ExtractionMode = "auto",
    memory_budget_gb: float | None = None,
    chunk_size: int | None = None,
) -> ShardedExtraction | None:
    """Node embeddings extracted by every rank of the current ``torch.distributed`` group
    together; a collective: every rank calls it, with the same model and graph.

    The nodes ``0..N-1`` are cut into as many near-equal contiguous ranges as there are ranks,
    rank ``r`` taking the ``r``-th. Mini-batch extraction: each rank samples and embeds the
    seed nodes of its range, and rank 0 gathers the rows in node order. Layer-wise extraction:
    for each layer each rank computes the rows of its range and every rank gathers the whole
    layer, the next layer's input (each rank holds the graph and two ``[N, d]`` layers, as one
    process does). The rows equal one process's (the same computation per row). Any other plan
    (full-batch, graph-level datasets) returns ``None`` on every rank, with no collective: rank
    0 then extracts alone with :func:`extract_embeddings`.

    Arguments as for :func:`extract_embeddings`.

    Returns:
        On rank 0 the :class:`ShardedExtraction`; ``None`` on the other ranks, and on every
        rank when the plan is neither mini-batch nor layer-wise.

    Raises:
        ValueError: as :func:`extract_embeddings`, and for a graph with fewer nodes than ranks.
    """
    t0 = time.perf_counter()
    embeddings, labels, plan = _extract(
        model,
        datamodule,
        encoder_source,
        device,
        mini_batch,
        num_neighbors,
        mode,
        memory_budget_gb,
        chunk_size,
        sharded=True,
    )
    if embeddings is None or plan is None:
        return None
    return ShardedExtraction(embeddings, labels, plan, time.perf_counter() - t0, _world())


def _world() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _extract(
    model: nn.Module,
    datamodule: DataModule,
    encoder_source: EncoderSource,
    device: str,
    mini_batch: bool,
    num_neighbors: list[int] | None,
    mode: ExtractionMode,
    memory_budget_gb: float | None,
    chunk_size: int | None,
    sharded: bool,
) -> tuple[Tensor | None, Tensor | None, ExtractionPlan | None]:
    """Extraction on this process, or (``sharded``, in a group of several ranks) this rank's
    share of a mini-batch or layer-wise extraction; ``(None, None, None)`` where this rank
    returns nothing (see :func:`extract_sharded`)."""
    if not isinstance(encoder_source, str):
        raise TypeError(
            f"encoder_source must be a string ('auto' or a sub-encoder name), got "
            f"{type(encoder_source).__name__} {encoder_source!r}"
        )
    _device = torch.device(device)
    plan = plan_extraction(
        model, datamodule, encoder_source, mode, mini_batch, memory_budget_gb, chunk_size
    )
    world = _world() if sharded else 1
    if sharded and (world == 1 or plan.mode not in ("mini_batch", "layerwise")):
        if world == 1:  # a group of one: the whole extraction is this rank's share
            sharded = False
        else:
            return None, None, None
    part = (_rank(), world) if sharded else None
    if part is not None and _rank() == 0:
        log.info(
            "embedding extraction: %s (%s), the nodes shared out across %d processes",
            plan.mode,
            plan.reason,
            world,
        )
    elif part is None or plan.fallback:
        (log.warning if plan.fallback else log.info)(
            "embedding extraction: %s (%s)", plan.mode, plan.reason
        )
    if part is not None and int(datamodule.data.num_nodes) < world:
        raise ValueError(
            f"sharded extraction shares {int(datamodule.data.num_nodes)} nodes out across "
            f"{world} processes; expected at least one node per process"
        )

    use_model_forward = encoder_source == "auto"
    encoder = None if use_model_forward else _select_encoder(model, encoder_source)
    graph_level = plan.mode == "graph"

    def _extract(batch: Data) -> Tensor:
        if encoder is None:
            out: Tensor = model(batch)
            return out
        return encode(encoder, batch, graph_level=graph_level, seeds_only=not graph_level)

    # The selected encoder may live outside the model's module tree: move and freeze it too.
    modules = [model] if encoder is None else [model, encoder]
    if plan.encoder is not None and all(plan.encoder is not m for m in modules):
        modules.append(plan.encoder)
    was_training = [m.training for m in modules]
    for m in modules:
        m.to(_device)
        m.eval()
    embeddings: Tensor | None
    try:
        with torch.no_grad():
            if graph_level:
                embeddings = _extract_graph_level(datamodule, _extract, _device)
            elif plan.mode == "mini_batch":
                source: object = model if encoder is None else encoder
                embeddings = _extract_node_mini_batch(
                    datamodule, _extract, _device, num_neighbors, source, plan.encoder, part
                )
                if part is not None:
                    embeddings = _gather_rows_on_first(embeddings)
            elif plan.mode == "layerwise" and plan.encoder is not None:
                embeddings = _extract_node_layerwise(datamodule, plan, _device, part)
                if part is not None and _rank() != 0:
                    embeddings = None
            else:
                embeddings = _extract_node_full_batch(datamodule, _extract, _device)
    finally:
        for m, was in zip(modules, was_training, strict=True):
            m.train(was)
    if embeddings is None:
        return None, None, None

    labels = datamodule.labels
    if labels is not None:
        labels = labels.detach().cpu()
        if labels.size(0) != embeddings.size(0):
            raise ValueError(
                f"extracted {embeddings.size(0)} embedding rows but datamodule.labels has "
                f"{labels.size(0)} (dataset {getattr(datamodule, 'name', '?')!r}); expected "
                f"one label per {'graph' if graph_level else 'node'}"
            )
    return embeddings, labels, plan


def _select_encoder(model: nn.Module, source: str) -> nn.Module:
    """The sub-encoder ``model.encoders()[source]``, or a ValueError naming what exists."""
    cls = type(model).__name__
    encoders_fn = getattr(model, "encoders", None)
    available: dict[str, nn.Module] = {}
    if callable(encoders_fn):
        try:
            available = dict(encoders_fn())
        except NotImplementedError:
            available = {}
    if not callable(encoders_fn) or not available:
        raise ValueError(
            f"encoder_source={source!r} needs a model that names its sub-encoders in "
            f"encoders(), but {cls} names none; use encoder_source='auto'"
        )
    if source not in available:
        raise ValueError(
            f"encoder_source={source!r} is not an encoder of {cls}; available: "
            f"{sorted(available)} (or 'auto' to call {cls}.forward())"
        )
    return available[source]


def encoder_depth(source: object) -> int | None:
    """Hops of neighbourhood one output row of ``source`` depends on, or ``None`` if unknown.

    Read from ``num_hops`` (graphssl encoders: their number of message-passing layers, ``0`` for
    an MLP) or ``num_layers``; for a model that has neither, from the sub-encoders it names in
    ``encoders()`` when they all agree.
    """
    for attr in ("num_hops", "num_layers"):
        value = getattr(source, attr, None)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    encoders_fn = getattr(source, "encoders", None)
    if isinstance(source, nn.Module) and callable(encoders_fn):
        try:
            named = dict(encoders_fn())
        except NotImplementedError:
            return None
        depths = {encoder_depth(m) for m in named.values() if m is not source}
        if len(depths) == 1:
            return depths.pop()
    return None


def extraction_fanouts(num_neighbors: list[int] | None, source: object) -> list[int]:
    """The per-hop fanouts of mini-batch extraction for ``source`` (a model or an encoder).

    ``None``: all neighbours over as many hops as the encoder has layers (``[-1] * depth``;
    ``[0]``, the seeds alone, for a depth-0 encoder such as an MLP; :data:`DEFAULT_NUM_NEIGHBORS`
    when the depth is unknown). A given list must have one entry per layer.

    Raises:
        ValueError: for a ``num_neighbors`` whose length differs from the encoder's depth.
    """
    depth = encoder_depth(source)
    if num_neighbors is None:
        if depth is None:
            return list(DEFAULT_NUM_NEIGHBORS)
        return [-1] * depth if depth > 0 else [0]
    fanouts = list(num_neighbors)
    if depth is not None and depth > 0 and len(fanouts) != depth:
        raise ValueError(
            f"num_neighbors={fanouts} (eval.extraction.num_neighbors) samples "
            f"{len(fanouts)} hop(s), but the encoder ({type(source).__name__}) has {depth} "
            f"message-passing layer(s); give one fanout per layer (e.g. {[-1] * depth} for all "
            f"neighbours) or null for all "
            f"neighbours over {depth} hop(s)"
        )
    return fanouts


def _to_device(data: Data, device: torch.device) -> Data:
    # Data.to() moves the tensors of the object it is called on; copy so the datamodule's
    # graph stays where it is. Image batches are tensors or tuples (x, y) of tensors.
    if isinstance(data, Tensor):
        return data.to(device)  # type: ignore[return-value]
    if isinstance(data, (tuple, list)):
        return type(data)(_to_device(b, device) for b in data)  # type: ignore[return-value]
    return copy.copy(data).to(device)


def _as_output(h: Tensor) -> Tensor:
    return h.detach().to(device="cpu", dtype=torch.float32)


def _progress_disabled() -> bool:
    stream = sys.stderr
    isatty = getattr(stream, "isatty", None)
    try:
        return not (callable(isatty) and isatty())
    except ValueError:  # closed stream
        return True


def _extract_graph_level(datamodule: DataModule, extract: _Extract, device: torch.device) -> Tensor:
    rows = [_as_output(extract(_to_device(b, device))) for b in datamodule.eval_dataloader()]
    if not rows:
        raise ValueError(
            f"eval_dataloader() of dataset {getattr(datamodule, 'name', '?')!r} yielded no "
            f"batches; expected at least one graph"
        )
    return torch.cat(rows, dim=0)


def _extract_node_full_batch(
    datamodule: DataModule, extract: _Extract, device: torch.device
) -> Tensor:
    return _as_output(extract(_to_device(datamodule.data, device)))


def _extract_node_mini_batch(
    datamodule: DataModule,
    extract: _Extract,
    device: torch.device,
    num_neighbors: list[int] | None,
    source: object,
    encoder: nn.Module | None = None,
    part: tuple[int, int] | None = None,
) -> Tensor:
    """Every node's row (``part=(r, W)``: the rows of range ``r`` of ``W``, in node order)."""
    data = datamodule.data
    # the graph to sample from: the model's own prepare, else that of the encoder it embeds
    # with (GCN: the full graph's normalisation, so sampled rows equal full-batch rows)
    prepare = getattr(source, "prepare", None)
    if not callable(prepare):
        prepare = getattr(encoder, "prepare", None)
    prepared = prepare(data) if callable(prepare) else data
    fanouts = extraction_fanouts(num_neighbors, source)
    first, num_nodes = 0, int(data.num_nodes)
    seeds_of_part = None
    if part is not None:
        first, last = node_range(num_nodes, *part)
        seeds_of_part, num_nodes = torch.arange(first, last), last - first
    loader = datamodule.neighbor_loader(
        fanouts, batch_size=MINI_BATCH_SIZE, data=prepared, input_nodes=seeds_of_part
    )

    out: Tensor | None = None
    covered = 0
    bar = tqdm(
        loader,
        total=len(loader) if isinstance(loader, Sized) else None,
        desc="extract (mini-batch)",
        unit="batch",
        leave=False,
        disable=_progress_disabled(),
    )
    for batch in bar:
        size = int(batch.batch_size)
        seeds = batch.n_id[:size].cpu()
        h = _as_output(extract(batch.to(device))[:size])
        if out is None:
            out = h.new_zeros((num_nodes, *h.shape[1:]))
        out[seeds - first] = h
        covered += size
    if out is None or covered != num_nodes:
        raise RuntimeError(
            f"mini-batch extraction covered {covered} seed nodes of {num_nodes}; "
            f"neighbor_loader() must yield every node once as a seed"
        )
    return out


def node_range(num_nodes: int, index: int, parts: int) -> tuple[int, int]:
    """Range ``[first, last)`` of part ``index`` of ``parts`` near-equal contiguous parts of
    ``0..num_nodes-1`` (the first ``num_nodes % parts`` parts one node longer)."""
    size, extra = divmod(num_nodes, parts)
    first = index * size + min(index, extra)
    return first, first + size + (1 if index < extra else 0)


def _comm_device() -> torch.device:
    """Where the group's collectives take their tensors (the current GPU under NCCL)."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _padded_parts(local: Tensor) -> tuple[list[int], Tensor]:
    """Every rank's row count, and ``local`` padded to the largest on the comm device."""
    device = _comm_device()
    count = torch.tensor([local.shape[0]], dtype=torch.long, device=device)
    counts = [torch.zeros_like(count) for _ in range(dist.get_world_size())]
    dist.all_gather(counts, count)
    sizes = [int(c.item()) for c in counts]
    padded = local.new_zeros((max(sizes), *local.shape[1:]), device=device)
    padded[: local.shape[0]] = local
    return sizes, padded


def all_gather_rows(local: Tensor) -> Tensor:
    """Every rank's rows of ``local`` concatenated in rank order, on every rank, on the
    device of ``local`` (no gradient)."""
    sizes, padded = _padded_parts(local)
    parts = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(parts, padded)
    return torch.cat([p[:n] for p, n in zip(parts, sizes, strict=True)]).to(local.device)


def _gather_rows_on_first(local: Tensor) -> Tensor | None:
    """Every rank's rows of ``local`` concatenated in rank order on rank 0 (on the device of
    ``local``), ``None`` on the others: only rank 0 holds the whole ``[N, D]``."""
    sizes, padded = _padded_parts(local)
    first = dist.get_rank() == 0
    parts = [torch.empty_like(padded) for _ in sizes] if first else None
    dist.gather(padded, parts, dst=0)
    if parts is None:
        return None
    return torch.cat([p[:n] for p, n in zip(parts, sizes, strict=True)]).to(local.device)


def _extract_node_layerwise(
    datamodule: DataModule,
    plan: ExtractionPlan,
    device: torch.device,
    part: tuple[int, int] | None = None,
) -> Tensor:
    if plan.encoder is None:  # plan_extraction plans layer-wise with an encoder only
        raise RuntimeError("layer-wise extraction was planned without an encoder")
    out = encode_layerwise(
        plan.encoder,
        _to_device(datamodule.data, device),
        chunk_bytes=plan.chunk_bytes,
        chunk_nodes=plan.chunk_nodes,
        progress=not _progress_disabled(),
        part=part or (0, 1),
        exchange=all_gather_rows if part is not None else None,
    )
    return _as_output(out)
