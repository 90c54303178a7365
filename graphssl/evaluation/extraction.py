"""Embedding extraction: the one way evaluation gets ``[N, D]`` tensors out of a trained model.

Three paths (the public API of ``shared/seeds/002``): graph-level (one row per graph over
``eval_dataloader()``), node full-batch (one forward over ``datamodule.data``) and node mini-batch
(``NeighborLoader``, rows reassembled through ``batch.n_id``). With all neighbours over as many
hops as the encoder has layers, mini-batch rows equal full-batch rows; for GCN this needs the
full-graph normalisation, which ``prepare(data)`` supplies as edge weights.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable, Sized
from typing import TYPE_CHECKING, Literal

import torch
from torch import Tensor, nn
from torch_geometric.data import Data
from tqdm import tqdm

from graphssl.models.encode import encode

if TYPE_CHECKING:
    from graphssl.data.base import DataModule

__all__ = [
    "DEFAULT_NUM_NEIGHBORS",
    "MINI_BATCH_SIZE",
    "EncoderSource",
    "encoder_depth",
    "extract_embeddings",
    "extraction_fanouts",
]

EncoderSource = Literal["auto", "teacher", "student", "online", "target", "encoder"]

#: Seeds per ``NeighborLoader`` batch in mini-batch extraction.
MINI_BATCH_SIZE: int = 1024

#: Fanouts used when ``mini_batch=True``, ``num_neighbors`` is ``None`` and the encoder's depth
#: cannot be read (no ``num_hops``/``num_layers``); with a known depth ``L`` the default is
#: ``[-1] * L``, all neighbours over as many hops as the encoder has layers.
DEFAULT_NUM_NEIGHBORS: tuple[int, ...] = (-1, -1)

_Extract = Callable[[Data], Tensor]


def extract_embeddings(
    model: nn.Module,
    datamodule: DataModule,
    encoder_source: EncoderSource = "auto",
    device: str = "cpu",
    mini_batch: bool = False,
    num_neighbors: list[int] | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Extract embeddings from a model using a DataModule.

    Three extraction paths:

    - **Graph-level** (``datamodule.is_graph_level=True``): iterates ``eval_dataloader()``, one
      embedding per graph.
    - **Node full-batch** (default, ``mini_batch=False``): single forward pass over the full
      graph stored in ``datamodule.data``.
    - **Node mini-batch** (``mini_batch=True``): ``NeighborLoader`` with global-to-local
      reassembly via ``batch.n_id``, :data:`MINI_BATCH_SIZE` seeds per batch. Use this for graphs
      too large for a single forward pass. The graph sampled from is ``enc.prepare(data)`` for an
      explicit encoder that has ``prepare`` (``model.prepare(data)`` for ``"auto"`` when the
      model defines it), so GCN's full-graph normalisation follows the sampled edges.

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
            Used only when ``mini_batch=True`` (default: ``None``).

    Returns:
        ``(embeddings, labels)``: embeddings ``[N, D]`` (nodes) or ``[G, D]`` (graphs), float32
        on CPU, and the labels (``datamodule.labels``, on CPU), ``None`` when the dataset has no
        ``y`` attribute.

    Raises:
        ValueError: for an ``encoder_source`` the model does not name, labels whose row
            count differs from the embeddings', or a ``num_neighbors`` whose length is not the
            encoder's depth.
    """
    if not isinstance(encoder_source, str):
        raise TypeError(
            f"encoder_source must be a string ('auto' or a sub-encoder name), got "
            f"{type(encoder_source).__name__} {encoder_source!r}"
        )
    _device = torch.device(device)
    setup = getattr(datamodule, "setup", None)
    if callable(setup):
        setup()

    use_model_forward = encoder_source == "auto"
    encoder = None if use_model_forward else _select_encoder(model, encoder_source)
    graph_level = bool(datamodule.is_graph_level)

    def _extract(batch: Data) -> Tensor:
        if encoder is None:
            out: Tensor = model(batch)
            return out
        return encode(encoder, batch, graph_level=graph_level, seeds_only=not graph_level)

    # The selected encoder may live outside the model's module tree: move and freeze it too.
    modules = [model] if encoder is None else [model, encoder]
    was_training = [m.training for m in modules]
    for m in modules:
        m.to(_device)
        m.eval()
    try:
        with torch.no_grad():
            if graph_level:
                embeddings = _extract_graph_level(datamodule, _extract, _device)
            elif mini_batch:
                source: object = model if encoder is None else encoder
                embeddings = _extract_node_mini_batch(
                    datamodule, _extract, _device, num_neighbors, source
                )
            else:
                embeddings = _extract_node_full_batch(datamodule, _extract, _device)
    finally:
        for m, mode in zip(modules, was_training, strict=True):
            m.train(mode)

    labels = datamodule.labels
    if labels is not None:
        labels = labels.detach().cpu()
        if labels.size(0) != embeddings.size(0):
            raise ValueError(
                f"extracted {embeddings.size(0)} embedding rows but datamodule.labels has "
                f"{labels.size(0)} (dataset {getattr(datamodule, 'name', '?')!r}); expected "
                f"one label per {'graph' if graph_level else 'node'}"
            )
    return embeddings, labels


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
) -> Tensor:
    data = datamodule.data
    prepare = getattr(source, "prepare", None)
    prepared = prepare(data) if callable(prepare) else data
    fanouts = extraction_fanouts(num_neighbors, source)
    loader = datamodule.neighbor_loader(fanouts, batch_size=MINI_BATCH_SIZE, data=prepared)

    num_nodes = int(data.num_nodes)
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
        out[seeds] = h
        covered += size
    if out is None or covered != num_nodes:
        raise RuntimeError(
            f"mini-batch extraction covered {covered} seed nodes of {num_nodes}; "
            f"neighbor_loader() must yield every node once as a seed"
        )
    return out
