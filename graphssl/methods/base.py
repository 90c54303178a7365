"""Base class of every SSL method.

A method implements :meth:`SSLMethod.loss` (a dict with key ``"loss"``) and
:meth:`SSLMethod.forward` (embeddings, by its own evaluation convention), and names its
sub-encoders in :meth:`SSLMethod.encoders` so ``extract_embeddings(encoder_source=...)`` can pick
one. It never writes an epoch loop: :mod:`graphssl.training` owns that, and steps the
learning-rate schedule the method builds in :meth:`SSLMethod.configure_scheduler`.

Node-level methods train full-batch (the whole graph per step) or on ``NeighborLoader``
mini-batches, whose first ``batch.batch_size`` rows are the seed nodes: every loss is computed
on those seed rows only (the other sampled nodes exist to give the seeds their neighbourhoods),
so a loss that compares all pairs of nodes costs ``batch_size²`` per step whatever the graph's
size. Before full-batch training the trainer asks :meth:`SSLMethod.full_batch_bytes` for the
memory one step needs and refuses a run that would exceed its budget.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler
from torch_geometric.data import Data

OptimizerFactory = Callable[..., Optimizer]
#: a partial learning-rate scheduler constructor (Hydra ``_partial_: true``), called with the
#: optimizer, and with ``max_steps`` (the optimizer steps of the whole run) when it takes one
SchedulerFactory = Callable[..., LRScheduler]

#: float tensors of ``n x width`` alive per encoder layer and pass at the peak of a full-batch
#: step (the layer's output kept for backward and its gradient), fitted on GCN encoders of 1-2
#: layers and 128-512 units, where the estimate is within 15 % of the measured peak
ACTIVATIONS_PER_LAYER = 2
#: bytes per edge (self-loops included) and encoder pass: the normalised ``int64`` edge list,
#: its weights and the sparse adjacency built from them
BYTES_PER_EDGE = 32


def encoder_widths(encoder: nn.Module) -> list[int] | None:
    """``[in, hidden, ..., out]`` channel sizes of a graphssl encoder's layers, ``None`` when
    they cannot be read (a module that is not a :class:`~graphssl.models.encoders.GNNEncoder`).
    An input size not yet known (``-1``) counts as 0."""
    gnn = getattr(encoder, "gnn", encoder)
    layers = getattr(encoder, "num_layers", None)
    out = getattr(encoder, "out_channels", None)
    hidden = getattr(gnn, "hidden_channels", out)
    if not isinstance(layers, int) or not isinstance(out, int) or not isinstance(hidden, int):
        return None
    in_channels = getattr(gnn, "in_channels", 0)
    in_channels = in_channels if isinstance(in_channels, int) and in_channels > 0 else 0
    return [in_channels] + [hidden] * (layers - 1) + [out]


def linear_widths(module: nn.Module) -> list[int]:
    """Output sizes of the ``nn.Linear`` layers of ``module``, in order (e.g. a projector's)."""
    return [m.out_features for m in module.modules() if isinstance(m, nn.Linear)]


class SSLMethod(nn.Module):
    """Base of graphssl's self-supervised methods.

    Args:
        optimizer: a partial optimizer constructor (Hydra ``_partial_: true``), called with the
            method's trainable parameters.
        scheduler: a partial learning-rate scheduler constructor (e.g.
            :class:`~graphssl.training.schedules.CosineLR`), called with the optimizer and the
            run's ``max_steps`` by :meth:`configure_scheduler`; the trainer steps it after every
            optimizer step and saves it in checkpoints. ``None``: a constant learning rate.
    """

    #: whether the method can train on ``NeighborLoader`` mini-batches (``trainer.mini_batch``).
    supports_mini_batch: bool = True
    #: ``True`` when the method embeds whole graphs (InfoGraph, GraphCL).
    graph_level: bool = False
    #: encoder passes with gradients per training step (DGI: the graph and its corruption;
    #: two-view methods: one per view), for :meth:`full_batch_activation_bytes`.
    encoder_passes: int = 1
    #: whether the same method with fresh, untrained weights is a meaningful reference
    #: (``eval.baseline``); ``False`` for the supervised reference and for embedding tables
    #: that only training fills (DeepWalk, node2vec).
    has_untrained_baseline: bool = True
    #: the key of :meth:`encoders` whose node embeddings :meth:`forward` returns unchanged
    #: (``encode(self.encoders()[key], batch)``), so extraction may run that encoder on its
    #: own, e.g. layer by layer on a large graph; ``None`` when ``forward`` computes more.
    forward_encoder: str | None = None
    #: whether the loss is exact on several processes (``trainer.devices > 1``): every row
    #: comparison and batch statistic of :meth:`loss` covers the global batch
    #: (:func:`~graphssl.methods.collective.gather_rows`), so ``W`` ranks holding ``B / W`` rows
    #: each train exactly like one process holding ``B``; the trainer refuses the others
    supports_distributed: bool = False
    #: why the method is not exact on several processes, for the refusal's message (``""``:
    #: its loss has not been converted)
    not_distributed_because: str = ""
    #: hops of message passing the loss adds after the encoder (GraphMAE's decoder: 1). A
    #: mini-batch that samples them too (one fanout per encoder layer, then one per decoder
    #: hop) gives every row the loss reads its whole sampled neighbourhood, so a seed's loss
    #: does not depend on which other seeds share its batch; several processes need that
    decoder_hops: int = 0

    def __init__(
        self,
        optimizer: OptimizerFactory | None = None,
        scheduler: SchedulerFactory | None = None,
    ) -> None:
        super().__init__()
        self._optimizer_factory = optimizer
        self._scheduler_factory = scheduler

    # ------------------------------------------------------------------ contract
    def encoders(self) -> dict[str, nn.Module]:
        """Named sub-encoders, e.g. ``{"encoder": ...}`` or ``{"online": ..., "target": ...}``."""
        raise NotImplementedError

    def loss(self, batch: Data) -> dict[str, Tensor]:
        """Training objective on one batch; must contain the key ``"loss"``."""
        raise NotImplementedError

    def forward(self, batch: Data) -> Tensor:
        """Embeddings of ``batch`` for evaluation (node rows, or graph rows when graph-level)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ hooks (optional)
    def configure_optimizer(self) -> Optimizer | None:
        """The optimizer over :meth:`trainable_parameters`; ``None`` for gradient-free methods."""
        if self._optimizer_factory is None:
            raise ValueError(f"{type(self).__name__} needs an optimizer (got optimizer=None)")
        return self._optimizer_factory(list(self.trainable_parameters()))

    def configure_scheduler(self, optimizer: Optimizer, max_steps: int) -> LRScheduler | None:
        """The learning-rate scheduler of ``optimizer``, stepped after every optimizer step;
        ``None`` when the method was given no ``scheduler``.

        Args:
            optimizer: what :meth:`configure_optimizer` returned.
            max_steps: optimizer steps of the whole run, passed to schedulers that take it.
        """
        factory = self._scheduler_factory
        if factory is None:
            return None
        if "max_steps" in inspect.signature(factory).parameters:
            return factory(optimizer, max_steps=max_steps)
        return factory(optimizer)

    def trainable_parameters(self) -> Iterator[nn.Parameter]:
        return (p for p in self.parameters() if p.requires_grad)

    def on_train_start(self, data: Data, max_epochs: int) -> None:
        """Called once before the first epoch with the training graph (e.g. to precompute)."""

    def on_after_optimizer_step(self, step: int, max_steps: int) -> None:
        """Called after every optimizer step with the steps done so far (EMA target updates)."""

    def classifier_logits(self, embeddings: Tensor) -> Tensor | None:
        """Class logits from the embeddings :meth:`forward` returns, for methods that train a
        classifier (the pipeline logs its accuracy as ``supervised/<split>_acc``); others:
        None."""
        return None

    # ------------------------------------------------------------------ memory estimates
    def itemsize(self) -> int:
        """Bytes per element of the method's parameters (4 for float32, the default)."""
        param = next(self.parameters(), None)
        return param.element_size() if param is not None else torch.float32.itemsize

    def full_batch_loss_bytes(self, num_nodes: int) -> int:
        """Peak bytes of the loss's own buffers that grow faster than linearly with the number
        of nodes, on a full graph of ``num_nodes`` nodes: e.g. GRACE's ``n x n`` similarity
        matrices. ``0`` for methods whose memory is linear in ``n`` (the default)."""
        return 0

    def head_width(self) -> int:
        """Sum of the output widths of the per-node layers after the encoder (projector,
        predictor, decoder) on one pass, for :meth:`full_batch_activation_bytes` (default:
        ``0``)."""
        return 0

    def full_batch_activation_bytes(self, num_nodes: int, num_edges: int) -> int:
        """Estimated peak bytes of one full-batch step's activations on a graph of ``num_nodes``
        nodes and ``num_edges`` directed edges, beyond the graph itself: per encoder pass, a
        copy of the input features, :data:`ACTIVATIONS_PER_LAYER` tensors of ``n x width`` for
        every layer of the encoder and of the head, and :data:`BYTES_PER_EDGE` per edge.

        Within 15 % of the measured peak for GCN encoders (sparse-matrix propagation);
        encoders that gather one message per edge (GraphSAGE, GIN, GAT) need more than this per
        edge, so for them it is a lower bound. ``0`` when the encoder's widths cannot be read.
        """
        encoders = self.encoders()
        encoder = encoders.get("encoder", encoders.get("online", encoders.get("student")))
        widths = None if encoder is None else encoder_widths(encoder)
        if widths is None:
            return 0
        itemsize = self.itemsize()
        floats_per_node = widths[0] + ACTIVATIONS_PER_LAYER * (sum(widths[1:]) + self.head_width())
        per_pass = itemsize * num_nodes * floats_per_node + BYTES_PER_EDGE * (num_edges + num_nodes)
        return self.encoder_passes * per_pass

    def full_batch_bytes(self, num_nodes: int, num_edges: int) -> int:
        """:meth:`full_batch_loss_bytes` plus :meth:`full_batch_activation_bytes`."""
        return self.full_batch_loss_bytes(num_nodes) + self.full_batch_activation_bytes(
            num_nodes, num_edges
        )

    def fit_without_gradients(self, data: Data, epochs: int) -> dict[str, Any] | None:
        """Gradient-free methods (DeepWalk) train here and return summary values; others: None."""
        return None
